"""The app served in process (Starlette's `TestClient`) with one scripted model, `m`, that
answers "ok": what the unit tests of the request path drive (tests/ is on the path)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from starlette.testclient import TestClient

from sluicegate.app.factory import create_app
from sluicegate.config import load_settings


@contextmanager
def scripted_client(folder: Path, reply: str = 'content: "ok"') -> Iterator[TestClient]:
    """The app of a config in `folder` (its data there too), started and stopped around the
    block; `m` answers every turn with `reply` (one entry of the scripted engine's `replies`)."""
    (folder / "reply.yaml").write_text("replies:\n  - " + reply.replace("\n", "\n    ") + "\n")
    config = folder / "sluicegate.toml"
    config.write_text(
        '[server]\ndata_dir = "data"\n\n[[models]]\nid = "m"\nengine = "scripted"\nscript = "reply.yaml"\n'
    )
    with TestClient(create_app(load_settings(config, env={}))) as client:
        yield client
