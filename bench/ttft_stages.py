"""Where a burst's first bytes wait: stage timestamps of every request of a 64-stream burst.

    python bench/ttft_stages.py [--burst 64] [--bursts 3] [--warm 16] [--pure]

Processes: the fake upstream (`bench/fast_upstream.py`, 5 ms between tokens like
`bench/gateway.py`'s latency runs) and Sluicegate (`engine = "openai"` → the upstream), started
through this script's `serve` launcher, which wraps a few methods of the server with recorders
before it runs `python -m sluicegate serve` (so the server's own code has no switch to pay for,
and the wrappers cost what they cost only here). The client is `bench/load_client.py`'s
connection, in this process: `--burst` keep-alive connections, then (after `--warm` streams at
a time have warmed the upstream pool, as `gateway.py`'s c = 16 runs leave it) `--bursts` bursts,
each of `--burst` requests written in one go, the next when every stream of the last has ended.

Clocks: `time.perf_counter()` in every process (CLOCK_MONOTONIC, one clock for the machine), so
a stage of the server and the client's send of the same request subtract. The server keys its
stages by the client's port (its connection), carried in a context variable into the request's
task, and by the upstream connection a request writes on. Per request, ms after the client's
write:

  recv      the server's protocol got the request's bytes (`data_received`)
  task      the request's task ran its first step (`Cycle.run_asgi`)
  conn0/1   a new upstream connection was asked for / made (absent: a kept one was used)
  up_write  the request was written upstream (`_Connection.start`)
  up_head   the upstream's answer head parsed (`on_headers_complete` of the upstream connection)
  up_body   the upstream's first body bytes (its `data_received` with a body)
  resumed   the request's task resumed with the upstream's answer (`HttpPool._exchange` returns)
  head_out  the response head written to the client
  frame     the first write to the client that holds the first token's frame
  ttft      the client's first content-bearing frame (what `gateway.py` reports)

and `flow`: each upstream read of a stream whose first frame is out (the tokens of streams
already flowing, which compete with the burst's starts for the loop).

Printed per burst: for the requests ranked by TTFT (p50, p90, p99 = the burst's last ones), each
stage's time; and the order in which the server ran stages across the burst, compressed (e.g.
`recvx64 taskx64 up_writex64 …`): a stage of the last request waiting behind the whole burst's
earlier stages shows there. The raw stages go to `--json`.

`--calls FROM,TO`: every Python and C call the server makes between two stages of one request
(`--calls-request`, default the 41st: the 9th of the first burst, on a kept connection), counted
by module — what a stage costs, in a figure the machine's load does not move.

On a compiled tree the upstream client's stages (conn0 to resumed) go unrecorded: compiled code
calls a compiled class's methods directly, past any wrapper. The server's own (recv, task,
head_out, frame: app/http_protocol.py is not compiled), the client's TTFT and the CPU figure
remain. `--calls` needs the pure-Python tree (or `--pure`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

STAGES = ("recv", "task", "conn0", "conn1", "up_write", "up_head", "up_body", "resumed", "head_out", "frame")


# --- the server side: `python bench/ttft_stages.py serve OUT -- <sluicegate serve args>` ----------


def serve(out: str, argv: list[str]) -> None:
    """Run `sluicegate serve` with recorders on the request path; the records go to `out` at
    exit (on SIGTERM too)."""
    import atexit
    import runpy
    import signal

    from sluicegate.app import http_protocol
    from sluicegate.engines.upstream import http

    clock, cpu = time.perf_counter, time.thread_time  # (the loop's thread: its CPU, not the load's)
    records: list[tuple[str, int, float, float]] = []
    port: contextvars.ContextVar[int] = contextvars.ContextVar("port", default=0)
    upstream: dict[int, int] = {}  # id(upstream connection) → the client's port
    first_frame: set[int] = set()  # client ports whose first token's frame was seen
    MARK, EMPTY = b'"content":"', b'"content":""'  # a frame with a token (load_client's test)
    sizes: list[tuple[int, float, int]] = []  # tokens in each first frame's write
    bodied: set[int] = set()  # upstream connections whose answer's body began

    def peer(protocol: Any) -> int:
        client = protocol.client
        return int(client[1]) if client else 0

    def wrap(cls: Any, name: str, before: Any = None, after: Any = None) -> None:
        original = getattr(cls, name)

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            if before is not None:
                before(self, *args)
            result = original(self, *args, **kwargs)
            if after is not None:
                after(self, *args)
            return result

        patch(cls, name, wrapper)

    def patch(cls: Any, name: str, value: Any) -> None:
        try:
            setattr(cls, name, value)
        except TypeError:  # a compiled class that refuses it: its stages go unrecorded
            unrecorded.add(f"{cls.__name__}.{name}")

    unrecorded: set[str] = set()
    calls: list[str] = []
    tracing = {"on": 0, "done": 0, "tasks": 0}
    between = os.environ.get("TTFT_CALLS", "").split(",")  # --calls

    def profiler(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            calls.append(
                f"{code.co_filename.rsplit('/src/', 1)[-1]}:{code.co_firstlineno} {code.co_qualname}"
            )
        elif event == "c_call":
            calls.append(f"C {getattr(arg, '__qualname__', arg)}")

    after = int(os.environ.get("TTFT_CALLS_AFTER", "0"))  # tasks before the traced one

    def mark(name: str, key: int) -> None:
        if name == "task":
            tracing["tasks"] += 1
        if len(between) == 2 and not tracing["done"] and key:
            if name == between[0] and not tracing["on"] and tracing["tasks"] > after:
                tracing["on"] = key
                calls.append(f"--- {name} {key}")
                sys.setprofile(profiler)
            elif name == between[1] and tracing["on"] == key:
                sys.setprofile(None)
                tracing["on"] = 0
                tracing["done"] += 1
                calls.append(f"--- {name} {key}")
        records.append((name, key, clock(), cpu()))

    def written(key: int, data: bytes) -> None:
        if key not in first_frame:
            tokens = sum(1 for f in data.split(b"\n\n") if f.find(MARK) >= 0 and f.find(EMPTY) < 0)
            if tokens:
                first_frame.add(key)
                mark("frame", key)
                sizes.append((key, records[-1][2], tokens))

    # the client's connection
    wrap(http_protocol.JSONHttpToolsProtocol, "data_received",
         before=lambda self, data: records.append(("recv", peer(self), clock(), cpu())))  # fmt: skip

    original_run = http_protocol.Cycle.run_asgi

    async def run_asgi(self: Any, app: Any) -> None:
        key = int(self.scope["client"][1])
        first_frame.discard(key)
        port.set(key)
        mark("task", key)
        await original_run(self, app)

    http_protocol.Cycle.run_asgi = run_asgi  # type: ignore[method-assign]

    def head_out(self: Any, message: Any) -> None:
        mark("head_out", int(self.scope["client"][1]))

    wrap(http_protocol.Cycle, "_send_head", before=head_out)
    wrap(http_protocol.Cycle, "_send_body",
         before=lambda self, body, more: written(int(self.scope["client"][1]), body))  # fmt: skip
    wrap(http_protocol.CycleWriter, "write",
         before=lambda self, body, **kw: written(int(self._cycle.scope["client"][1]), body))  # fmt: skip

    # the upstream side
    original_connect = http.HttpPool._connect

    async def connect(self: Any) -> Any:
        key = port.get()
        records.append(("conn0", key, clock(), cpu()))
        conn = await original_connect(self)
        records.append(("conn1", key, clock(), cpu()))
        return conn

    patch(http.HttpPool, "_connect", connect)

    original_exchange = http.HttpPool._exchange

    async def exchange(self: Any, request: bytes) -> Any:
        response = await original_exchange(self, request)
        mark("resumed", port.get())
        return response

    patch(http.HttpPool, "_exchange", exchange)

    def up_write(self: Any, request: bytes) -> None:
        key = port.get()
        upstream[id(self)] = key
        bodied.discard(id(self))
        mark("up_write", key)

    wrap(http._Connection, "start", before=up_write)
    wrap(http._Connection, "on_headers_complete",
         after=lambda self: records.append(("up_head", upstream.get(id(self), 0), clock(), cpu())))  # fmt: skip

    def up_body(self: Any, body: bytes) -> None:
        if id(self) not in bodied:
            bodied.add(id(self))
            records.append(("up_body", upstream.get(id(self), 0), clock(), cpu()))

    def up_read(self: Any, data: bytes) -> None:
        # a read of a stream already flowing (its first token's frame written): the work that
        # competes with the burst's starts
        key = upstream.get(id(self), 0)
        if key in first_frame:
            records.append(("flow", key, clock(), cpu()))

    wrap(http._Connection, "on_body", before=up_body)
    wrap(http._Connection, "data_received", before=up_read)

    def dump() -> None:
        if unrecorded:
            print(f"ttft_stages: compiled, not recorded: {', '.join(sorted(unrecorded))}", flush=True)
        Path(out).write_text(json.dumps({"records": records, "first_write_tokens": sizes}))
        if calls:
            Path(out + ".calls").write_text("\n".join(calls))

    atexit.register(dump)
    # uvicorn raises the SIGTERM it caught again once it has shut down: dump, then exit
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sys.argv = ["sluicegate", *argv]
    runpy.run_module("sluicegate", run_name="__main__", alter_sys=True)


# --- the client side and the report ---------------------------------------------------------------


async def bursts(args: argparse.Namespace, port: int, body: bytes) -> list[list[dict[str, Any]]]:
    import load_client

    ns = argparse.Namespace(host="127.0.0.1", port=port, dialect="chat")
    request = load_client.build_request("127.0.0.1", port, "/v1/chat/completions", body)
    conns = [await load_client.connect(ns, keep_itl=False) for _ in range(args.burst)]
    for _ in range(2):  # warm: the upstream pool holds `--warm` connections, as gateway.py leaves it
        await asyncio.gather(*(c.send(request) for c in conns[: args.warm]))
    out = []
    for _ in range(args.bursts):
        await asyncio.sleep(0.2)
        dones = [c.send(request) for c in conns]
        streams = await asyncio.gather(*dones)
        out.append(
            [
                {
                    "port": c.transport.get_extra_info("sockname")[1],  # type: ignore[union-attr]
                    "sent": s.sent,
                    "first": s.first,
                    "tokens": s.tokens,
                    "error": s.error,
                }
                for c, s in zip(conns, streams, strict=True)
            ]
        )
    for c in conns:
        c.transport.close()  # type: ignore[union-attr]
    return out


def order(stages: list[tuple[Any, ...]]) -> str:
    """The server's stages in time order, runs of one stage compressed: `recvx64 taskx3 …`."""
    runs: list[list[Any]] = []
    for name, *_ in sorted(stages, key=lambda r: r[2]):
        if runs and runs[-1][0] == name:
            runs[-1][1] += 1
        else:
            runs.append([name, 1])
    return " ".join(f"{n}x{k}" if k > 1 else n for n, k in runs)


def report(
    burst: list[dict[str, Any]], records: list[tuple[Any, ...]], sizes: list[list[Any]]
) -> dict[str, Any]:
    start = min(r["sent"] for r in burst)
    end = max(r["first"] for r in burst) + 0.05
    window = [r for r in records if start - 0.001 <= r[2] <= end]
    by_port: dict[int, dict[str, float]] = {}
    for name, key, t, _ in window:
        by_port.setdefault(key, {}).setdefault(name, t)  # a stage's first time in the burst
    rows = []
    for r in burst:
        stages = by_port.get(r["port"], {})
        rows.append(
            {
                "ttft": (r["first"] - r["sent"]) * 1e3,
                **{name: (stages[name] - r["sent"]) * 1e3 for name in STAGES if name in stages},
            }
        )
    rows.sort(key=lambda row: row["ttft"])
    n = len(rows)
    picks = {"first": 0, "p50": n // 2, "p90": int(n * 0.9), "p99": min(n - 1, int(n * 0.99)), "last": n - 1}
    print(f"  {'':<6}" + "".join(f"{s:>9}" for s in (*STAGES, "ttft")))
    for label, i in picks.items():
        row = rows[i]
        print(
            f"  {label:<6}"
            + "".join(f"{row[s]:9.2f}" if s in row else f"{'-':>9}" for s in (*STAGES, "ttft"))
        )
    sent_spread = (max(r["sent"] for r in burst) - start) * 1e3
    print(f"  the client wrote the burst over {sent_spread:.2f} ms; ttft p50 "
          f"{statistics.median(r['ttft'] for r in rows):.2f} ms, max {rows[-1]['ttft']:.2f} ms")  # fmt: skip
    frames = [(t, c) for name, _, t, c in window if name == "frame"]
    last, last_cpu = max(frames) if frames else (end, 0.0)
    flows = sum(1 for name, _, t, _ in window if name == "flow" and t < last)
    first_cpu = min(c for name, _, t, c in window if name == "recv")
    busy = (last_cpu - first_cpu) * 1e3
    print(f"  the server's CPU from the burst's first read to its last first frame: {busy:.1f} ms")
    print(f"  reads of streams already flowing, before the burst's last first frame: {flows}")
    tokens = [n for _, t, n in sizes if start <= t <= end]
    if tokens:
        print(f"  tokens in the first frame's write: mean {statistics.mean(tokens):.1f}, max {max(tokens)}")
    print(f"  order: {order(window)}")
    return {
        "rows": rows,
        "order": order(window),
        "sent_spread_ms": sent_spread,
        "flow_reads_before_last": flows,
        "cpu_ms_to_last_frame": busy,
        "first_write_tokens": tokens,
    }


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[4:] if sys.argv[3:4] == ["--"] else sys.argv[3:])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--burst", type=int, default=64)
    parser.add_argument("--bursts", type=int, default=3)
    parser.add_argument("--warm", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--delay-ms", type=float, default=5.0)
    parser.add_argument("--pure", action="store_true", help="SLUICEGATE_PURE_PYTHON=1 for the server")
    parser.add_argument("--json", help="write every stage and row here")
    parser.add_argument(
        "--calls",
        metavar="FROM,TO",
        help="trace the Python and C calls the server makes between two stages of one request "
        "(e.g. task,up_write or resumed,frame), and count them by module",
    )
    parser.add_argument(
        "--calls-request",
        type=int,
        default=41,
        help="which request --calls traces (1-based, warm-ups included)",
    )
    args = parser.parse_args()
    if args.calls:
        os.environ["TTFT_CALLS"] = args.calls
        os.environ["TTFT_CALLS_AFTER"] = str(args.calls_request - 1)

    from gateway_targets import free_port, start, start_sluicegate, wait_ready

    folder = Path(tempfile.mkdtemp(prefix="ttft-stages-"))
    print(f"(logs and raw stages in {folder})")
    up_port = free_port()
    upstream = start(
        "upstream", [sys.executable, str(HERE / "fast_upstream.py"), "--port", str(up_port)], folder
    )
    records_file = folder / "stages.json"
    model = f"fake-d{args.delay_ms:g}"
    env = {"SLUICEGATE_PURE_PYTHON": "1"} if args.pure else {}
    try:
        wait_ready(upstream, f"http://127.0.0.1:{up_port}/health")
        server, port = start_sluicegate(
            folder,
            up_port,
            [model],
            env=env,
            launcher=[sys.executable, str(Path(__file__).resolve()), "serve", str(records_file), "--"],
        )
        body = json.dumps(
            {
                "model": model,
                "messages": [{"role": "user", "content": "hi"}],
                "stream": True,
                "max_tokens": args.tokens,
            }
        ).encode()
        try:
            import uvloop

            results = uvloop.run(bursts(args, port, body))
        except ImportError:
            results = asyncio.run(bursts(args, port, body))
        server.stop()
    finally:
        upstream.stop()
    raw = json.loads(records_file.read_text())
    records = [tuple(r) for r in raw["records"]]
    sizes = raw["first_write_tokens"]
    out = []
    print(f"Stages, ms after the client's write ({args.burst} streams at once, {os.cpu_count()} cores)")
    for i, burst in enumerate(results):
        errors = [r["error"] for r in burst if r["error"]]
        print(f"\nburst {i + 1}{' (errors: ' + '; '.join(errors[:3]) + ')' if errors else ''}")
        out.append(report(burst, records, sizes))
    if args.json:
        Path(args.json).write_text(json.dumps({"bursts": out, **raw}))
    calls_file = Path(str(records_file) + ".calls")
    if args.calls and calls_file.exists():
        call_summary(calls_file.read_text().splitlines())


def call_summary(lines: list[str]) -> None:
    """Calls between the two stages of the traced request, by module (Python) and in C."""
    python = [line for line in lines if not line.startswith(("C ", "---"))]
    c_calls = sum(1 for line in lines if line.startswith("C "))
    print(f"\ncalls traced ({' → '.join(line[4:] for line in lines if line.startswith('---'))}): "
          f"{len(python)} Python, {c_calls} C")  # fmt: skip
    by_module: dict[str, int] = {}
    for line in python:
        module = line.split(":", 1)[0].rsplit("site-packages/", 1)[-1]
        by_module[module] = by_module.get(module, 0) + 1
    for module, n in sorted(by_module.items(), key=lambda kv: -kv[1])[:15]:
        print(f"  {n:5d}  {module}")


if __name__ == "__main__":
    main()
