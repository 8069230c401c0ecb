"""The server's own secret: signs what clients must hand back unchanged (thinking signatures).

Kept in `<data_dir>/server-secret` (created once, mode 0600) so signatures survive a restart and
every replica sharing the data directory agrees. Read once per process.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

SECRET_BYTES = 32


@cache
def server_secret(data_dir: Path) -> bytes:
    path = data_dir / "server-secret"
    try:
        secret = path.read_bytes()
        if len(secret) >= SECRET_BYTES:
            return secret
    except FileNotFoundError:
        pass
    data_dir.mkdir(parents=True, exist_ok=True)
    secret = os.urandom(SECRET_BYTES)
    # Written whole under a temporary name, then renamed: a reader never sees half a secret.
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(secret)
    try:
        os.link(temporary, path)  # the first writer wins when two processes race
    except FileExistsError:
        secret = path.read_bytes()
    finally:
        temporary.unlink()
    return secret
