"""Instructions per request start and per paced token, counted by valgrind's callgrind in a
running Sluicegate: user-space work (Python, the compiled hot path, uvloop, libc) that the
machine's load does not move. The kernel's share (the socket syscalls) is not counted.

    python bench/instructions.py [--baseline /path/to/other/src] [--requests 200] [--tokens 64]
        [--concurrency 16] [--delay-ms 5]
        [--floor asgi-floor[,asgi-floor-stock]]

`sluicegate serve` runs under `valgrind --tool=callgrind --instr-atstart=no` (slow: its start
takes a minute or more), optionally a second one with `--baseline`'s code (PYTHONPATH). After a
warm-up, counting is switched on (`callgrind_control -i on`) for `--requests` one-token
requests, then for `--requests` requests of `--tokens` tokens paced 5 ms apart by the fake
upstream (`fake-d5`, one token per read), each measured alone. Per paced token = (the long
load's instructions - the short load's) / (`--tokens` - 1) / requests.

Under callgrind the server runs ~50x slower: at the default `--concurrency 16` it falls behind
the upstream's pace and reads ~6 tokens per upstream read, so per-read costs (the callbacks,
the two syscalls' wrappers, a write) are shared by several tokens. `--concurrency 2` keeps it
at about one token per read, what a paced stream is at full speed (bench/README.md, gateway
"Round fourteen"). To count many streams at one token a read (c = 64 as `gateway.py`'s paced
figure), slow the pace so that the server under callgrind keeps up: `--concurrency 64
--delay-ms 200 --tokens 16` (64 streams at 5 reads a second).

`--floor`: the same two counts for the floor of the stack (`bench/asgi_floor.py`: a raw ASGI
relay on uvicorn served as `sluicegate serve` is; `asgi-floor-stock` on uvicorn's own protocol;
`asgi-static`, uvicorn answering a fixed one-token stream, its start only),
each under callgrind the same way: what no ASGI application on uvicorn can spend less than on
the same request (bench/README.md, gateway "Round fifteen").
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import gateway_targets
from call_counts import body, load
from gateway_targets import Proc, fast_upstream, start_asgi_floor, start_sluicegate, wait_ready

# A server under callgrind takes minutes to start on a loaded machine.
gateway_targets.wait_ready = functools.partial(wait_ready, seconds=1200)

HERE = Path(__file__).resolve().parent
KEEP: Path | None = None  # --keep: where the dumps are copied


def counted(proc: Proc, folder: Path, run: object) -> dict[str, int]:
    """What the server ran during `run()`, by event (`Ir`: instructions; with `--cache-sim`
    also the simulated cache's misses): counters zeroed, counting on, then a dump of what was
    counted (callgrind's `events:` and `totals:` lines)."""
    pid = str(proc.popen.pid)
    subprocess.run(["callgrind_control", "-z", pid], check=True, capture_output=True)
    subprocess.run(["callgrind_control", "-i", "on", pid], check=True, capture_output=True)
    run()  # type: ignore[operator]
    before = set(folder.glob("cg.*"))
    subprocess.run(["callgrind_control", "-d", pid], check=True, capture_output=True)
    subprocess.run(["callgrind_control", "-i", "off", pid], check=True, capture_output=True)
    dumps = sorted(set(folder.glob("cg.*")) - before, key=lambda p: p.stat().st_mtime)
    if not dumps:
        raise RuntimeError("callgrind wrote no dump")
    if KEEP is not None:  # for callgrind_annotate
        shutil.copy(dumps[-1], KEEP / f"{folder.name}-{len(list(KEEP.glob(folder.name + '-*')))}.callgrind")
    events = ["Ir"]
    for line in dumps[-1].read_text(errors="replace").splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
        if line.startswith(("totals:", "summary:")):
            return dict(zip(events, map(int, line.split()[1:]), strict=False))
    raise RuntimeError(f"no totals in {dumps[-1]}")


def measure(
    folder: Path,
    upstream: int,
    env: dict[str, str] | None,
    args: argparse.Namespace,
    floor: str | None = None,
) -> dict[str, float]:
    """The counts of a Sluicegate (`env`: another tree's) or, with `floor`, of that
    `asgi_floor.py` target, each under callgrind."""
    folder.mkdir()
    valgrind = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={folder}/cg.%p",
        *(["--cache-sim=yes"] if args.cache_sim else []), sys.executable,
    ]  # fmt: skip
    if floor is not None:
        proc, port = start_asgi_floor(floor, folder, upstream, launcher=valgrind)
    else:
        launcher = [*valgrind, "-m", "sluicegate"]
        paced = f"fake-d{args.delay_ms:g}"
        proc, port = start_sluicegate(folder, upstream, ["fake-d0", paced], env=env, launcher=launcher)
    streams = floor != "asgi-static"  # it answers one token whatever is asked: a start only
    try:
        short, long = body(1, "fake-d0"), body(args.tokens, f"fake-d{args.delay_ms:g}")
        load(port, short, 50, args.concurrency, 1)
        if streams:
            load(port, long, 10, args.concurrency, args.tokens)
        n = args.requests
        start_ir = counted(proc, folder, lambda: load(port, short, n, args.concurrency, 1))
        if not streams:
            return {"per_request": start_ir["Ir"] / n, "per_token": float("nan")}
        long_ir = counted(proc, folder, lambda: load(port, long, n, args.concurrency, args.tokens))
    finally:
        proc.stop()
    out = {
        "per_request": start_ir["Ir"] / n,
        "per_token": (long_ir["Ir"] - start_ir["Ir"]) / n / (args.tokens - 1),
    }
    # --cache-sim: data misses of the first level and the last level, per start and per paced token
    for name, events in (("d1_misses", ("D1mr", "D1mw")), ("ll_misses", ("DLmr", "DLmw"))):
        if all(e in start_ir for e in events):
            in_starts, in_all = sum(start_ir[e] for e in events), sum(long_ir[e] for e in events)
            out[f"{name}_per_request"] = in_starts / n
            out[f"{name}_per_token"] = (in_all - in_starts) / n / (args.tokens - 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", help="a second Sluicegate with PYTHONPATH=<this>")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument(
        "--cache-sim",
        action="store_true",
        help="also callgrind's simulated cache: data misses per start and per paced token (slower)",
    )
    parser.add_argument(
        "--delay-ms", type=float, default=5.0, help="the paced load's pace (the upstream's `fake-d<ms>`)"
    )
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--floor",
        default="",
        help="also count these asgi_floor.py targets (comma-separated: asgi-floor, asgi-floor-stock, "
        "asgi-static: its start only)",
    )
    parser.add_argument("--keep", help="copy each load's callgrind dump here (callgrind_annotate reads them)")
    args = parser.parse_args()
    global KEEP
    KEEP = Path(args.keep) if args.keep else None
    if KEEP is not None:
        KEEP.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        with fast_upstream(folder) as up_port:
            results = {"this": measure(folder / "this", up_port, None, args)}
            if args.baseline:
                results["baseline"] = measure(
                    folder / "baseline", up_port, {"PYTHONPATH": args.baseline}, args
                )
            for key in filter(None, args.floor.split(",")):
                results[key] = measure(folder / key, up_port, None, args, floor=key)
    for label, r in results.items():
        print(
            f"{label:16} {r['per_request'] / 1e3:9.1f} k instructions per request start, "
            f"{r['per_token'] / 1e3:7.1f} k per paced token"
        )
        if "d1_misses_per_token" in r:
            print(
                f"{'':16} data misses (simulated): first level {r['d1_misses_per_request']:,.0f} a start, "
                f"{r['d1_misses_per_token']:,.0f} a paced token; last level {r['ll_misses_per_request']:,.0f}"
                f" a start, {r['ll_misses_per_token']:,.0f} a paced token"
            )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
