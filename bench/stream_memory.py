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
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gateway_targets import fast_upstream, start_sluicegate

HERE = Path(__file__).resolve().parent


def _name(obj: object) -> str:
    """A live object's type, and for code objects (coroutines, generators, methods, functions)
    which code, and for containers (lists, dicts, deques, cells, tuples) the type that holds
    them (filled in by `census`)."""
    kind = type(obj)
    name = f"{kind.__module__}.{kind.__qualname__}".removeprefix("builtins.")
    if name not in _CODE:
        return name
    try:
        code = getattr(obj.__func__ if name == "method" else obj, "__qualname__", None)  # type: ignore[attr-defined]
    except Exception:
        code = None
    return f"{name} {code}" if isinstance(code, str) else name


_CODE = {"coroutine", "async_generator", "method", "function", "builtin_function_or_method"}
_HELD = {"list", "dict", "collections.deque", "cell", "tuple"}


def census(ids: set[int] | None = None) -> tuple[dict[str, tuple[int, int]], set[int]]:
    """Live objects the collector tracks, by `_name`: (count, bytes by `sys.getsizeof`). With
    `ids` (the objects alive before), a container made since is named by its holder's type."""
    import gc

    objects = gc.get_objects()
    holder: dict[int, str] = {}
    if ids is not None:
        fresh = {id(o) for o in objects if id(o) not in ids and _name(o) in _HELD}
        for obj in objects:
            try:
                inside = gc.get_referents(obj)
            except SystemError:  # an extension type whose traversal reports no error properly
                continue
            for inner in inside:
                if id(inner) in fresh and id(inner) not in holder:
                    holder[id(inner)] = _name(obj)
    found: dict[str, list[int]] = {}
    for obj in objects:
        name = _name(obj)
        if name in _HELD and id(obj) in holder:
            name = f"{name} in {holder[id(obj)]}"
        row = found.setdefault(name, [0, 0])
        row[0] += 1
        row[1] += sys.getsizeof(obj)
    return {k: (v[0], v[1]) for k, v in found.items()}, {id(o) for o in objects}


def serve_traced(out: str, argv: list[str]) -> None:
    import gc
    import tracemalloc

    from sluicegate.cli.main import main as sluicegate

    log = logging.getLogger("stream_memory")
    frames = int(os.environ.get("STREAM_MEMORY_FRAMES", "1"))
    before: dict[str, tuple[int, int]] = {}
    alive: set[int] = set()

    def begin(*_: object) -> None:
        gc.collect()
        counted, ids = census()
        before.update(counted)
        alive.update(ids)
        tracemalloc.start(frames)

    def dump(*_: object) -> None:
        try:
            write()
        except BaseException:
            log.exception("the memory dump failed")
            raise

    def write() -> None:
        snapshot = tracemalloc.take_snapshot()
        tracemalloc.stop()
        stats = snapshot.statistics("lineno" if frames == 1 else "traceback")
        rows = [(" <- ".join(str(f) for f in reversed(s.traceback)), s.size, s.count) for s in stats]
        now, _ = census(alive)
        types = {
            k: (n - before.get(k, (0, 0))[0], b - before.get(k, (0, 0))[1])
            for k, (n, b) in now.items()
            if n != before.get(k, (0, 0))[0]
        }
        Path(out + ".part").write_text(json.dumps({"lines": rows, "types": types}))
        os.replace(out + ".part", out)

    signal.signal(signal.SIGUSR1, begin)
    signal.signal(signal.SIGUSR2, dump)
    sys.argv = ["sluicegate", *argv]
    sluicegate()


def measure(
    folder: Path, upstream: int, env: dict[str, str] | None, streams: int, delay: int
) -> dict[str, Any]:
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
        if not out.exists():
            raise RuntimeError(f"no dump; the server's log ends:\n{proc.log.read_text()[-3000:]}")
        return json.loads(out.read_text())  # type: ignore[no-any-return]
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
    parser.add_argument(
        "--frames", type=int, default=1, help="tracemalloc's frames per allocation (>1: grouped by traceback)"
    )
    args = parser.parse_args()
    os.environ["STREAM_MEMORY_FRAMES"] = str(args.frames)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        with fast_upstream(folder) as up_port:
            trees = {"this": None} | ({"baseline": {"PYTHONPATH": args.baseline}} if args.baseline else {})
            for label, env in trees.items():
                found = measure(folder / label, up_port, env, args.streams, args.delay_ms)
                rows = found["lines"]
                total = sum(r[1] for r in rows)
                print(f"\n== {label}: {total / args.streams / 1024:.2f} KiB traced per held stream")
                for where, size, count in sorted(rows, key=lambda r: -r[1])[: args.top]:
                    short = " <- ".join(
                        w.split("/site-packages/")[-1].split("/src/")[-1].split("/python3.11/")[-1]
                        for w in where.split(" <- ")
                    )
                    print(f"  {size / args.streams:8.0f} B {count / args.streams:6.2f} blocks  {short}")
                files: dict[str, int] = {}
                for where, size, _ in rows:
                    top = where.split(" <- ")[-1].rsplit(":", 1)[0]
                    top = top.split("/site-packages/")[-1].split("/src/")[-1].split("/python3.11/")[-1]
                    files[top] = files.get(top, 0) + size
                print("\n  by the file of the allocating line:")
                for top, size in sorted(files.items(), key=lambda kv: -kv[1])[: args.top // 2]:
                    print(f"  {size / args.streams:8.0f} B  {top}")
                types = found["types"]
                print(f"\n  objects the collector tracks, per held stream ({len(types)} types changed):")
                for kind, (n, size) in sorted(types.items(), key=lambda kv: -kv[1][1])[: args.top]:
                    print(f"  {size / args.streams:8.0f} B {n / args.streams:6.2f} objects  {kind}")


if __name__ == "__main__":
    main()
