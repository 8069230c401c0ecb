"""The processes `bench/gateway.py` measures: the fake upstream, Sluicegate, nginx and LiteLLM
(started from generated configs in a temp dir, each in the foreground), and what is read from
/proc about them (CPU time and RSS of a process tree)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

PROMPT = "Tell me a long story."


# --- processes ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def children(pid: int) -> list[int]:
    """`pid` and all its descendants (Linux /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                parents.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo += parents.get(p, [])
    return tree


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def run_ns(pids: list[int]) -> int:
    """Nanoseconds these processes' threads have run on a CPU (/proc/PID/task/TID/schedstat):
    the scheduler's own count, where /proc's user and system times come in clock ticks (10 ms:
    the CPU of 2,000 requests at 45 µs each is 9 ticks)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    total += int((task / "schedstat").read_text().split()[0])
    return total


def rss_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
    return total


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def pids(self) -> list[int]:
        return children(self.popen.pid)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def start(name: str, cmd: list[str], folder: Path, env: dict[str, str] | None = None) -> Proc:
    log = folder / f"{name}.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    return Proc(name, popen, log)


def wait_ready(proc: Proc, url: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while True:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"{proc.name} exited at start:\n{proc.log.read_text()[-3000:]}")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as r:
            if r.status == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{proc.name} not ready after {seconds:.0f}s:\n{proc.log.read_text()[-3000:]}")
        time.sleep(0.2)


@contextlib.contextmanager
def fast_upstream(folder: Path) -> Iterator[int]:
    """`bench/fast_upstream.py` in its own process, ready; yields its port, stops it after."""
    port = free_port()
    proc = start(
        "upstream",
        [sys.executable, str(Path(__file__).with_name("fast_upstream.py")), "--port", str(port)],
        folder,
    )
    try:
        wait_ready(proc, f"http://127.0.0.1:{port}/health")
        yield port
    finally:
        proc.stop()


# --- targets -----------------------------------------------------------------------------------


@dataclass
class Target:
    key: str
    port: int
    path: str = "/v1/chat/completions"
    dialect: str = "chat"
    proc: Proc | None = None  # None: the upstream itself
    answers: int = 0  # > 0: the target answers this many tokens whatever is asked (asgi-static)

    def body(self, model: str, tokens: int) -> str:
        if self.dialect == "responses":
            return json.dumps(
                {"model": model, "input": PROMPT, "stream": True, "max_output_tokens": tokens, "store": False}
            )
        if self.dialect == "completions":
            return json.dumps(
                {
                    "model": model,
                    "prompt": PROMPT,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                    "max_tokens": tokens,
                }
            )
        if self.dialect == "ollama":
            return json.dumps(
                {
                    "model": model,
                    "messages": [{"role": "user", "content": PROMPT}],
                    "stream": True,
                    "options": {"num_predict": tokens},
                }
            )
        if self.dialect == "lmstudio":
            return json.dumps(
                {"model": model, "input": PROMPT, "stream": True, "max_output_tokens": tokens, "store": False}
            )
        return json.dumps(
            {
                "model": model,
                "messages": [{"role": "user", "content": PROMPT}],
                "stream": True,
                "stream_options": {"include_usage": True},
                "max_tokens": tokens,
            }
        )


def sluicegate_missing() -> str | None:
    if not any(ep.name == "openai" for ep in entry_points(group="sluicegate.engines")):
        return "no `openai` engine entry point (is sluicegate installed?)"
    try:
        next(ep for ep in entry_points(group="sluicegate.engines") if ep.name == "openai").load()
    except ImportError as exc:
        return f"the `openai` engine does not import yet ({exc})"
    return None


def start_sluicegate(
    folder: Path,
    upstream: int,
    models: list[str],
    workers: int = 1,
    redis_url: str | None = None,
    *,
    pure: bool = False,
    variant: str = "",
    env: dict[str, str] | None = None,
    launcher: list[str] | None = None,
) -> tuple[Proc, int]:
    """Sluicegate in front of the upstream; with `workers` > 1, that many processes sharing the
    Redis store at `redis_url` (what `workers` requires). `variant`: a second server beside
    the first, in a folder of its own; `pure` is the variant with its hot path uncompiled
    (SLUICEGATE_PURE_PYTHON=1). `env`: extra environment (a `PYTHONPATH` to run another
    tree's code, a switch). `launcher`: what runs the CLI instead of `python -m sluicegate`
    (a wrapper that profiles it)."""
    if pure:
        variant, env = "pure", {**(env or {}), "SLUICEGATE_PURE_PYTHON": "1"}
    if variant:
        folder = folder / variant
        folder.mkdir(exist_ok=True)
    port = free_port()
    tables = "".join(
        f'\n[[models]]\nid = "{m}"\nengine = "openai"\nbase_url = "http://127.0.0.1:{upstream}/v1"\n'
        f'upstream_model = "{m}"\n'  # the defaults: an upstream model is not capped (issue 16)
        for m in models
    )
    config = folder / "sluicegate.toml"
    store = f'\n[store]\nbackend = "redis"\nurl = "{redis_url}"\n' if workers > 1 else ""
    config.write_text(
        f'[server]\ndata_dir = "{folder / "data"}"\nmax_concurrent_requests = 8192\nworkers = {workers}\n'
        f"{store}{tables}"
    )
    cmd = [
        *(launcher or [sys.executable, "-m", "sluicegate"]),
        "serve",
        "--config",
        str(config),
        "--port",
        str(port),
    ]
    proc = start("sluicegate", [*cmd, "--log-level", "warning"], folder, env)
    wait_ready(proc, f"http://127.0.0.1:{port}/health")
    if workers > 1:
        time.sleep(3)  # /health answers once the first worker is up; let the others finish starting
    return proc, port


def start_redis(folder: Path) -> tuple[Proc, str]:
    """A throwaway redis-server (no persistence), for Sluicegate's workers."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server not found (Debian: apt-get install redis-server)")
    port = free_port()
    proc = start("redis", [binary, "--port", str(port), "--save", "", "--appendonly", "no"], folder)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            conn.sendall(b"PING\r\n")
            if conn.recv(16).startswith(b"+PONG"):
                return proc, f"redis://127.0.0.1:{port}/0"
        time.sleep(0.1)
    raise RuntimeError(f"redis-server not ready:\n{proc.log.read_text()[-2000:]}")


def find_nginx(given: str | None) -> str | None:
    if given:
        return shutil.which(given)
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None
    )


def start_nginx(binary: str, folder: Path, upstream: int, workers: int) -> tuple[Proc, int]:
    port = free_port()
    home = folder / "nginx"
    home.mkdir()
    temps = "\n".join(
        f"  {k}_temp_path {home / k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    conf = home / "nginx.conf"
    conf.write_text(
        textwrap.dedent(
            f"""\
            daemon off;
            worker_processes {workers};
            worker_rlimit_nofile 65536;
            pid {home / "nginx.pid"};
            error_log {home / "error.log"} warn;
            events {{ worker_connections 16384; }}
            http {{
              access_log off;
            {temps}
              upstream fake {{ server 127.0.0.1:{upstream}; keepalive 256; }}
              server {{
                listen 127.0.0.1:{port} backlog=4096;
                location / {{
                  proxy_pass http://fake;
                  proxy_http_version 1.1;
                  proxy_set_header Connection "";
                  proxy_buffering off;
                  proxy_cache off;
                  proxy_read_timeout 600s;
                }}
              }}
            }}
            """
        )
    )
    proc = start("nginx", [binary, "-c", str(conf), "-p", str(home)], folder)
    wait_ready(proc, f"http://127.0.0.1:{port}/health")
    return proc, port


def start_python_relay(key: str, folder: Path, upstream: int) -> tuple[Proc, int]:
    """One of the Python reference relays: `py-floor` (`relay_floor.py`, a TCP splice: what
    no Python relay can do with less) or `py-lean` (`relay_lean.py`, a relay's work in one
    protocol callback a read)."""
    port = free_port()
    script = Path(__file__).resolve().parent / {"py-floor": "relay_floor.py", "py-lean": "relay_lean.py"}[key]
    cmd = [sys.executable, str(script), "--listen", str(port), "--upstream", str(upstream)]
    proc = start(key, cmd, folder)
    wait_ready(proc, f"http://127.0.0.1:{port}/health")
    return proc, port


def start_asgi_floor(
    key: str, folder: Path, upstream: int, launcher: list[str] | None = None
) -> tuple[Proc, int]:
    """The floor of Sluicegate's stack (`asgi_floor.py`: a raw ASGI app on uvicorn, served as
    `sluicegate serve` is): `asgi-floor` relays to the upstream, `asgi-floor-stock` the same on
    uvicorn's own httptools protocol, `asgi-static` answers a fixed one-token stream.
    `launcher`: what runs the script instead of this Python (valgrind, for `instructions.py`)."""
    port = free_port()
    script = str(Path(__file__).resolve().with_name("asgi_floor.py"))
    flags = {
        "asgi-floor": ["--upstream", str(upstream)],
        "asgi-floor-stock": ["--upstream", str(upstream), "--stock"],
        "asgi-static": ["--static"],
    }[key]
    cmd = [*(launcher or [sys.executable]), script, "--port", str(port), *flags]
    proc = start(key, cmd, folder)
    wait_ready(proc, f"http://127.0.0.1:{port}/health")
    return proc, port


def find_litellm(given: str | None) -> str | None:
    return shutil.which(given or "litellm")


def start_litellm(binary: str, folder: Path, upstream: int, models: list[str]) -> tuple[Proc, int]:
    port = free_port()
    entries = "".join(
        f"  - model_name: {m}\n    litellm_params:\n      model: openai/{m}\n"
        f"      api_base: http://127.0.0.1:{upstream}/v1\n      api_key: bench\n"
        for m in models
    )
    config = folder / "litellm.yaml"
    config.write_text(f"model_list:\n{entries}litellm_settings:\n  drop_params: true\n  telemetry: false\n")
    env = {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no fetch from GitHub at start
        "LITELLM_LOG": "ERROR",
        "LITELLM_TELEMETRY": "False",
        # No auth, as Sluicegate and nginx run here (loopback only); LiteLLM refuses that otherwise.
        "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
    }
    cmd = [binary, "--config", str(config), "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"]
    proc = start("litellm", cmd, folder, env)
    wait_ready(proc, f"http://127.0.0.1:{port}/health/liveliness", seconds=180)
    return proc, port
