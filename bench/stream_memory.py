"""What a held, flowing stream keeps: tracemalloc in a running Sluicegate, per stream and by
the line that allocated it.

    python bench/stream_memory.py [--streams 200] [--top 30] [--baseline /other/src]

The fake upstream paces a long reply (`--delay-ms`, by default 1000 as in `gateway.py`'s hold); `sluicegate serve`
runs under a wrapper that starts tracemalloc on SIGUSR1 and, on SIGUSR2, writes what is
allocated since then and still alive, grouped by line. Between the two, `--streams` streams
are opened and all flowing (`load_client.py hold`), so what is counted is what those streams
hold (plus whatever the server allocated meanwhile and kept: little, after a warm-up).
Printed: bytes per stream in all, and the lines that allocated most of it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gateway_targets import fast_upstream, start_sluicegate

HERE = Path(__file__).resolve().parent


def serve_traced(out: str, argv: list[str]) -> None:
    import tracemalloc

    from sluicegate.cli.main import main as sluicegate

    def begin(*_: object) -> None:
        tracemalloc.start(1)

    def dump(*_: object) -> None:
        snapshot = tracemalloc.take_snapshot()
        tracemalloc.stop()
        stats = snapshot.statistics("lineno")
        rows = [(str(s.traceback[0]), s.size, s.count) for s in stats]
        Path(out + ".part").write_text(json.dumps(rows))
        os.replace(out + ".part", out)

    signal.signal(signal.SIGUSR1, begin)
    signal.signal(signal.SIGUSR2, dump)
    sys.argv = ["sluicegate", *argv]
    sluicegate()


def measure(
    folder: Path, upstream: int, env: dict[str, str] | None, streams: int, delay: int
) -> list[tuple[str, int, int]]:
    folder.mkdir()
    out = folder / "memory.json"
    launcher = [sys.executable, str(Path(__file__).resolve()), "--serve-traced", str(out), "--"]
    proc, port = start_sluicegate(folder, upstream, [f"fake-d{delay}", "fake-d0"], env=env, launcher=launcher)
    slow = json.dumps(
        {
            "model": f"fake-d{delay}",
            "messages": [{"role": "user", "content": "Tell me a long story."}],
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": 100000,
        }
    )
    try:
        warm = [
            sys.executable,
            str(HERE / "load_client.py"),
            "run",
            "--port",
            str(port),
            "--concurrency",
            "16",
        ]
        warm += [
            "--requests",
            "200",
            "--body",
            slow.replace(f"fake-d{delay}", "fake-d0").replace("100000", "64"),
        ]
        w = subprocess.Popen(warm, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        w.communicate(b"go\n", timeout=300)
        os.kill(proc.popen.pid, signal.SIGUSR1)
        time.sleep(0.5)
        hold = [sys.executable, str(HERE / "load_client.py"), "hold", "--port", str(port)]
        hold += ["--requests", str(streams), "--body", slow, "--timeout", "120"]
        client = subprocess.Popen(hold, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert client.stdout is not None and client.stdin is not None
        ready = client.stdout.readline().decode()
        time.sleep(2.0)  # a few tokens into every stream
        os.kill(proc.popen.pid, signal.SIGUSR2)
        deadline = time.monotonic() + 120
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        client.stdin.write(b"close\n")
        client.stdin.flush()
        client.communicate(timeout=60)
        print(f"  {ready.strip()}", flush=True)
        return [tuple(r) for r in json.loads(out.read_text())]  # type: ignore[misc]
    finally:
        proc.stop()


def main() -> None:
    if sys.argv[1:2] == ["--serve-traced"]:
        serve_traced(sys.argv[2], sys.argv[4:])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--delay-ms", type=int, default=1000, help="the held streams' inter-token delay")
    parser.add_argument("--baseline", help="a second Sluicegate with PYTHONPATH=<this>")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        with fast_upstream(folder) as up_port:
            trees = {"this": None} | ({"baseline": {"PYTHONPATH": args.baseline}} if args.baseline else {})
            for label, env in trees.items():
                rows = measure(folder / label, up_port, env, args.streams, args.delay_ms)
                total = sum(r[1] for r in rows)
                print(f"\n== {label}: {total / args.streams / 1024:.2f} KiB traced per held stream")
                for where, size, count in sorted(rows, key=lambda r: -r[1])[: args.top]:
                    short = where.split("/site-packages/")[-1].split("/src/")[-1]
                    print(f"  {size / args.streams:8.0f} B {count / args.streams:6.2f} blocks  {short}")


if __name__ == "__main__":
    main()
