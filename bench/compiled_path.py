"""What compiling the hot path buys, in process: the relay's per-read work compiled against
the same code with SLUICEGATE_PURE_PYTHON=1, in alternating processes.

    python bench/compiled_path.py [--rounds 5] [--tokens 4000]

Each process runs the gateway's path without the network (`tests/compiled_frames.py`) on the
bytes `bench/fast_upstream.py` sends: upstream body reads → SSEReader → ChunkDecoder → segmenter → turn pipeline (accumulator, Chat
Completions or Responses encoder) → SSE bytes; once with one token per read (a paced model:
every read pays the whole per-read path) and once with 16 tokens per read (bulk). The figure is
the process's CPU time (`time.process_time`) per token, the least sensitive to other load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import asyncio, json, sys, time
sys.path.insert(0, {tests!r})
import compiled_frames as cf
from sluicegate import _compiled

sys.path.insert(0, {bench!r})
from fast_upstream import Frames  # the bench upstream's bytes: vLLM's compact chunks

tokens = {tokens}
frames = Frames("fake", tokens)
def sse(chunked):  # one HTTP/1.1 chunk → the SSE frame the body reader hands on
    return chunked.split(b"\r\n", 1)[1][:-2]
words = [sse(t) for t in frames.tokens]
tail = [sse(frames.finish), sse(frames.usage(tokens)), b"data: [DONE]\n\n"]
shapes = {{"paced": words + tail, "bulk": [b"".join(words[i:i + 16]) for i in range(0, tokens, 16)] + tail}}
dialects = {{"chat": cf.DIALECTS[0], "responses": cf.DIALECTS[2]}}

async def main():
    out = {{"mode": _compiled.mode}}
    for shape, reads in shapes.items():
        for name, (dialect, body, framing) in dialects.items():
            await cf.wire_bytes(dialect, body, framing, reads[:50] + tail, None)  # warm
            started = time.process_time()
            await cf.wire_bytes(dialect, body, framing, reads, None)
            out[f"{{name}} {{shape}}"] = (time.process_time() - started) * 1e6 / tokens
    print(json.dumps(out))

asyncio.run(main())
"""


def run(pure: bool, tokens: int) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k != "SLUICEGATE_PURE_PYTHON"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    if pure:
        env["SLUICEGATE_PURE_PYTHON"] = "1"
    code = CHILD.format(tests=str(ROOT / "tests"), bench=str(ROOT / "bench"), tokens=tokens)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=True)
    result: dict[str, float] = json.loads(out.stdout.decode().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=4000)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    rounds: dict[str, list[dict[str, float]]] = {"compiled": [], "pure": []}
    for i in range(args.rounds):
        for mode in ("compiled", "pure") if i % 2 == 0 else ("pure", "compiled"):
            result = run(mode == "pure", args.tokens)
            if mode == "compiled" and result["mode"] != "compiled":
                sys.exit(f"not compiled: {result['mode']} (python setup.py build_ext --inplace)")
            rounds[mode].append(result)
    print(f"CPU µs per token, medians of {args.rounds} alternating rounds (min-max)")
    print(f"  {'path':<18}{'compiled':<20}{'pure':<20}pure / compiled")
    for key in (k for k in rounds["compiled"][0] if k != "mode"):
        c = [r[key] for r in rounds["compiled"]]
        p = [r[key] for r in rounds["pure"]]
        ratio = statistics.median(p) / statistics.median(c)
        print(
            f"  {key:<18}{statistics.median(c):6.2f} ({min(c):.2f}-{max(c):.2f})   "
            f"{statistics.median(p):6.2f} ({min(p):.2f}-{max(p):.2f})   {ratio:.2f}x"
        )
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
