"""Profile a running Sluicegate under load with py-spy, and print where its CPU goes.

    python bench/profile_gateway.py --pid <sluicegate pid> --port <its port> [--tokens 2000]

It streams requests at concurrency 16 for `--seconds` (`bench/load_client.py`), records the
server with `py-spy record --nonblocking -f raw` meanwhile, and prints:

- the top functions by self time (share of samples), and the server's CPU time per token
  and per request from /proc over the same window;
- the share of samples inside `TurnEndpoint.prepare` (request body read → parse → model →
  admission → tools → engine opened → upstream request written and its answer awaited), and
  that share of the server's CPU time per request: the new-request cost. Use `--tokens 1` to
  measure it, so that streaming does not dilute it.

py-spy is on PyPI (`pip install py-spy`); it needs ptrace rights over the server process.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_load(
    port: int, body_json: str, concurrency: int, seconds: float, extra: list[str] | None = None
) -> subprocess.Popen[bytes]:
    """`load_client.py` streaming `body_json` at `concurrency` for `seconds` (and 2 s more, so it
    outlasts the recording), connected and started, after a second of warm-up."""
    cmd = [sys.executable, str(HERE / "load_client.py"), "run", "--port", str(port), *(extra or [])]
    cmd += ["--body", body_json, "--concurrency", str(concurrency), "--requests", "0"]
    cmd += ["--duration", str(seconds + 2)]
    client = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert client.stdin is not None and client.stdout is not None
    client.stdout.readline()  # CONNECTED
    client.stdin.write(b"go\n")
    client.stdin.flush()
    time.sleep(1.0)
    return client


def body(dialect: str, tokens: int, model: str = "fake-d0") -> str:
    if dialect == "chat":
        return json.dumps(
            {
                "model": model,
                "messages": [{"role": "user", "content": "Tell me a long story."}],
                "stream": True,
                "stream_options": {"include_usage": True},
                "max_tokens": tokens,
            }
        )
    return json.dumps(
        {
            "model": model,
            "input": "Tell me a long story.",
            "stream": True,
            "max_output_tokens": tokens,
            "store": False,
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dialect", choices=["chat", "responses", "lmstudio"], default="chat")
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument(
        "--model", default="fake-d0", help="fake-d5: the upstream paces tokens 5 ms apart (one per read)"
    )
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--py-spy", default="py-spy")
    parser.add_argument(
        "--native",
        action="store_true",
        help="also sample C frames: the compiled hot path (docs/compiled.md) runs as C, "
        "each sample is then charged to its innermost Python or compiled (CPyDef_) function",
    )
    args = parser.parse_args()
    path = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "lmstudio": "/api/v1/chat"}[
        args.dialect
    ]
    client = start_load(
        args.port,
        body(args.dialect, args.tokens, args.model),
        args.concurrency,
        args.seconds,
        ["--path", path, "--dialect", args.dialect],
    )
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "profile.txt"
        before = cpu_seconds(args.pid)
        started = time.perf_counter()
        subprocess.run(
            [
                args.py_spy,
                "record",
                "-p",
                str(args.pid),
                "-d",
                str(int(args.seconds)),
                "-r",
                "200",
                "-f",
                "raw",
                "-o",
                str(raw),
                # native stacks need the process paused per sample (py-spy's rule)
                *(["--native"] if args.native else ["--nonblocking"]),
            ],
            check=True,
            capture_output=True,
        )
        cpu = cpu_seconds(args.pid) - before
        window = time.perf_counter() - started
        lines = raw.read_text().splitlines()
    out = json.loads(client.communicate(timeout=60)[0].splitlines()[-1])
    rate = out["received"] / out["wall"]  # tokens/s over the client's run
    requests = len(out["streams"]) / out["wall"]
    own: collections.Counter[str] = collections.Counter()
    total = prepare = 0
    for line in lines:
        stack, _, n = line.rstrip().rpartition(" ")
        samples = int(n)
        total += samples
        frames = stack.split(";")
        leaf = frames[-1]
        if args.native:  # the innermost frame that is Python code or a compiled function
            leaf = next((f for f in reversed(frames) if ".py:" in f or "CPyDef_" in f), leaf)
        own[re.sub(r":\d+\)", ")", leaf)] += samples
        if any("TurnEndpoint.prepare" in f for f in frames):
            prepare += samples
    tokens, done = rate * window, requests * window
    print(f"{out['received']:,} tokens, {len(out['streams'])} requests in {out['wall']:.1f} s")
    print(
        f"server CPU {cpu:.2f} s over {window:.1f} s: {cpu * 1e6 / tokens:.2f} µs/token, {cpu * 1e6 / max(done, 1):.0f} µs/request"
    )
    share = prepare / max(total, 1)
    print(
        f"TurnEndpoint.prepare: {share:.1%} of samples = {share * cpu * 1e6 / max(done, 1):.0f} µs of CPU per request"
    )
    if args.native:  # where the compiled hot path stands among the rest
        groups: collections.Counter[str] = collections.Counter()
        for name, samples in own.items():
            if "CPyDef_" in name:
                groups["compiled hot path (CPyDef_)"] += samples
            elif "sluicegate/" in name:
                groups["sluicegate, Python"] += samples
            elif "uvicorn/" in name:
                groups["uvicorn (its send: the socket write)"] += samples
            elif "asyncio/" in name or "concurrent/" in name:
                groups["asyncio, the event loop (epoll and its callbacks)"] += samples
            else:
                groups["other"] += samples
        print("\nself time by part:")
        for group, samples in groups.most_common():
            print(f"  {samples / total:6.1%}  {group}")
    print("\nself time, top functions:")
    for name, samples in own.most_common(args.top):
        print(f"  {samples / total:6.1%}  {name[:120]}")


if __name__ == "__main__":
    main()
