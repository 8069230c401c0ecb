"""Benchmark: where one request's wall time goes at c = 1, Sluicegate against llama-server.

Run from the repository root (venv active), with the `llama-server` of bench/batching.py:

    python bench/request_split.py --llama-server PATH --model demo --requests 8

The servers and config of `bench/batching.py` (same GGUF, threads, batch, sequences, context).
One streaming chat completion at a time, alternating between the servers, each with the
bench's distinct prompt (`round R c1 request 0. STORY`). Per request, from the client:

- sent -> response head -> first content delta (TTFT) -> last content delta -> the stream's end;
- the prompt tokens each server says it decoded (llama-server's `timings.prompt_n`,
  Sluicegate's usage prompt_tokens - cached_tokens) and the completion tokens;
- llama-server's own `timings`: `prompt_ms` (its prompt's decode) and `predicted_ms`;
- the server process's minor and major page faults during the request (load-independent: a
  page of the KV cache touched for the first time, a buffer grown);
- both servers' `llamacpp:prompt_seconds_total` (the prompt from its admission to its last
  decode) and `n_decode_total` read before and after the request (llama-server with
  `--metrics`);
- Sluicegate's own view, from its access log (served at `log_level = "info"`): `ttft` and
  `total`, measured from the request's arrival.

So a request's wall time splits into: before the prompt's decode (HTTP, template, tokenizing,
slot lookup: client TTFT - prompt_ms, llama-server; for Sluicegate, client TTFT - the server's
ttft is the HTTP path outside the request's own clock), the first token, the decode of the rest
(last delta - first delta), and the end (stream end - last delta). The aggregate tok/s at c = 1
of batching.py is completion tokens / (last delta - sent).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from batch_counts import metrics
from batching import SHAPES, STORY, gemma_gguf, llama_server_command, sluicegate_config, stream
from local_engine import free_port, serving
from sluicegate.demo.model import make_demo_gguf

ACCESS = re.compile(r"ttft=([0-9.]+)s total=([0-9.]+)s")


def timed(base_url: str, content: str, max_tokens: int, extra: dict[str, Any]) -> dict[str, float]:
    """One streaming chat completion's client-side times (ms, from sent) and the servers' counts."""
    evaluated: list[int] = []
    reply = stream(base_url, content, max_tokens, evaluated, extra)
    sent, deltas, timings = reply.sent, reply.times, reply.timings
    out = {
        "head ms": (reply.head - sent) * 1000,
        "TTFT ms": (deltas[0] - sent) * 1000,
        "decode ms (first to last delta)": (deltas[-1] - deltas[0]) * 1000,
        "end ms (last delta to stream end)": (reply.end - deltas[-1]) * 1000,
        "wall ms (sent to last delta)": (deltas[-1] - sent) * 1000,
        "completion tokens": float(reply.tokens),
        "prompt tokens": float(reply.usage.get("prompt_tokens", 0)),
        "prompt tokens decoded": float(evaluated[0]),
    }
    out["aggregate tok/s"] = out["completion tokens"] / (deltas[-1] - sent)
    out["one stream tok/s"] = (out["completion tokens"] - 1) / (deltas[-1] - deltas[0])
    if "prompt_ms" in timings:
        out["server: prompt decode ms"] = float(timings["prompt_ms"])
        out["server: generation ms"] = float(timings["predicted_ms"])
        out["TTFT - prompt decode ms"] = out["TTFT ms"] - out["server: prompt decode ms"]
    return out


def faults(pid: int) -> tuple[int, int]:
    """The process's minor and major page faults so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[7]), int(fields[9])


def access_times(log: Path, seen: int) -> tuple[list[tuple[float, float]], int]:
    """Sluicegate's access-log (ttft, total) in seconds of the chat completions after line `seen`."""
    lines = log.read_text(errors="replace").splitlines()
    found = []
    for line in lines[seen:]:
        match = ACCESS.search(line)
        if match and "/v1/chat/completions" in line:
            found.append((float(match[1]), float(match[2])))
    return found, len(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--llama-server", required=True, help="the llama-server binary")
    parser.add_argument("--model", choices=sorted(SHAPES), default="demo")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--requests", type=int, default=8, help="per server, alternating")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--extra-config", default="", help="more lines for Sluicegate's [[models]] entry")
    args = parser.parse_args()
    args.parallel, args.context = SHAPES[args.model]
    args.prompt_cache, args.llama_server_arg = False, ["--metrics"]
    real = args.model != "demo"
    extra: dict[str, Any] = {"temperature": 0} if real else {}
    with tempfile.TemporaryDirectory(prefix="sluicegate-split-") as tmp:
        folder = Path(tmp)
        gguf = (
            gemma_gguf() if real else make_demo_gguf(folder / "bench.gguf", size="bench", ends_replies=False)
        )
        config = folder / "sluicegate.toml"
        text = sluicegate_config(gguf, args.context, args.threads, args.batch, args.parallel)
        config.write_text(text.replace('log_level = "warning"', 'log_level = "info"') + args.extra_config)
        ours_url = f"http://127.0.0.1:{free_port()}"
        ref_url = f"http://127.0.0.1:{free_port()}"
        env = {**os.environ, "XDG_DATA_HOME": str(folder / "data")}
        env.pop("SLUICEGATE_CONFIG", None)
        ours_cmd = [sys.executable, "-m", "sluicegate", "serve", "--config", str(config)]
        ours_cmd += ["--port", ours_url.rsplit(":", 1)[1]]
        ref_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
        ours_log = folder / "sluicegate.log"
        results: dict[str, dict[str, list[float]]] = {"sluicegate": {}, "llama-server": {}}
        with (
            serving(ours_cmd, ours_url, ours_log, env) as ours_pid,
            serving(
                llama_server_command(args, gguf, ref_url, real), ref_url, folder / "ref.log", ref_env
            ) as ref_pid,
        ):
            pids = {"sluicegate": ours_pid, "llama-server": ref_pid}
            for url in (ours_url, ref_url):
                timed(url, "warm-up", 8, extra)
            _, seen = access_times(ours_log, 0)
            for i in range(args.requests):
                for name, url in (("sluicegate", ours_url), ("llama-server", ref_url)):
                    before, counted = faults(pids[name]), metrics(url)
                    row = timed(url, f"round {i} c1 request 0. {STORY}", args.max_tokens, extra)
                    after, counts = faults(pids[name]), metrics(url)
                    # Both servers' own clock of the prompt, from its admission to its last
                    # decode (llama-server's `prompt_seconds_total`; Sluicegate's same name).
                    seconds = counts["prompt_seconds_total"] - counted["prompt_seconds_total"]
                    row["server: prompt seconds (metrics) ms"] = seconds * 1000
                    row["decodes"] = counts["n_decode_total"] - counted["n_decode_total"]
                    row["minor page faults"] = float(after[0] - before[0])
                    row["major page faults"] = float(after[1] - before[1])
                    if name == "sluicegate":
                        time.sleep(0.2)  # the access line is written after the stream's end
                        found, seen = access_times(ours_log, seen)
                        if found:
                            ttft, total = found[-1]
                            row["server: ttft ms (from arrival)"] = ttft * 1000
                            row["server: total ms"] = total * 1000
                            row["TTFT - server ttft ms (HTTP outside)"] = row["TTFT ms"] - ttft * 1000
                    for key, value in row.items():
                        results[name].setdefault(key, []).append(value)
                    print(f"{name:13} {i}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()), flush=True)
    print(f"\nGGUF {gguf.name}, c = 1, {args.requests} requests each, medians (min)")
    keys = list(dict.fromkeys([*results["sluicegate"], *results["llama-server"]]))
    print(f"{'':40}{'sluicegate':>20}{'llama-server':>20}")
    for key in keys:
        cells = []
        for name in results:
            values = results[name].get(key)
            cells.append(
                f"{statistics.median(values):10.1f} ({min(values):6.1f})" if values else f"{'-':>20}"
            )
        print(f"{key:40}" + "".join(f"{cell:>20}" for cell in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
