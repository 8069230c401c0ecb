"""Benchmark: Sluicegate's llamacpp engine against llama-cpp-python's own OpenAI-compatible server.

Run from the repository root (venv active), with llama-cpp-python[server] in a second venv:

    python bench/local_engine.py --reference-python /work/venvs/llamacpp/bin/python

Both servers load the same GGUF (by default a ~70 MB random-weight model written by
`make_demo_gguf(size="bench", ends_replies=False)`, so decoding costs real time and every
reply runs to max_tokens), with the same threads, context and batch size, and answer the same
streaming Chat Completions requests with greedy sampling. Runs alternate between the servers.
Each request's user message starts with its run number, so neither server can reuse its KV
cache for the prompt: time to first token includes the whole prompt.

Per request: TTFT = request sent → first content delta; decode tokens/s = (max_tokens - 1) /
(last delta - first delta). It prints the medians and Sluicegate / reference ratios
(target: tokens/s >= 0.97x, TTFT <= 1.0x). Absolute numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import httpx

from sluicegate.demo.model import make_demo_gguf

MODEL = "bench"
STORY = (
    "You are a careful storyteller. Tell me a long story about a lighthouse keeper who finds a "
    "message in a bottle, with every detail of the sea, the weather and the people of the village. "
)


@dataclass
class Target:
    name: str
    base_url: str
    pid: int = 0
    ttft: list[float] = field(default_factory=list)
    rate: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # server CPU seconds (all threads) per token


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def serving(command: list[str], url: str, log: Path, env: dict[str, str]) -> Iterator[int]:
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{command[:3]} exited:\n{log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{command[:3]} did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield process.pid
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


def cpu_seconds(pid: int) -> float:
    """User + system time of a process and all its threads (llama.cpp's included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def voluntary_switches(pid: int) -> int:
    """Voluntary context switches of all a process's threads so far: a thread that sleeps
    (a futex, a socket wait) adds one. OpenMP decode threads that spin at their barriers add
    a few per request; ones that sleep there add ~100 per decode step (bench/README.md)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that just ended
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
    return total


class Streamed(NamedTuple):
    """One streaming chat completion as its client saw it (times from `time.perf_counter`)."""

    sent: float
    head: float  # the response head arrived
    times: list[float]  # of the content deltas
    end: float  # the stream ended
    finish: str | None
    usage: dict[str, Any]  # the usage chunk's, if the server sent one
    timings: dict[str, Any]  # llama-server's own counts (`prompt_n`, `prompt_ms`, ...)

    @property
    def tokens(self) -> int:
        """Completion tokens, as the server's usage counts them (else the content deltas)."""
        return int(self.usage.get("completion_tokens", len(self.times)))


def read_stream(base_url: str, body: dict[str, Any], timeout: float = 900) -> Streamed:
    """POST `body` (`"stream": true`) to /v1/chat/completions and read its SSE to the end: the
    one streamed-request reader of the local-engine benches (batching.py and those built on it)."""
    times: list[float] = []
    finish = None
    usage: dict[str, Any] = {}
    timings: dict[str, Any] = {}
    with httpx.Client(timeout=timeout) as client:
        sent = time.perf_counter()
        with client.stream("POST", base_url + "/v1/chat/completions", json=body) as response:
            head = time.perf_counter()
            response.raise_for_status()
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                for choice in chunk.get("choices", []):
                    if (choice.get("delta") or {}).get("content"):
                        times.append(time.perf_counter())
                    finish = choice.get("finish_reason") or finish
                usage = chunk.get("usage") or usage
                timings = chunk.get("timings") or timings
        end = time.perf_counter()
    return Streamed(sent, head, times, end, finish, usage, timings)


def measure(target: Target, run: int, max_tokens: int) -> tuple[float, float, float]:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"Run {run}. {STORY * 3}"}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    cpu = cpu_seconds(target.pid)
    reply = read_stream(target.base_url, body, timeout=600)
    cpu = cpu_seconds(target.pid) - cpu
    if reply.finish != "length":
        raise RuntimeError(f"{target.name}: the reply ended with {reply.finish!r}, not 'length'")
    times = reply.times
    return times[0] - reply.sent, (max_tokens - 1) / (times[-1] - times[0]), cpu / max_tokens


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reference-python", default="/work/venvs/llamacpp/bin/python")
    parser.add_argument("--gguf", type=Path, help="default: write the bench demo model to a temp folder")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=512)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="sluicegate-bench-") as tmp:
        folder = Path(tmp)
        gguf = args.gguf or make_demo_gguf(folder / "bench.gguf", size="bench", ends_replies=False)
        size_mb = gguf.stat().st_size / 1e6
        config = folder / "sluicegate.toml"
        config.write_text(
            f'[server]\nlog_level = "warning"\n\n[[models]]\nid = "{MODEL}"\nengine = "llamacpp"\n'
            f'path = "{gguf}"\ncontext_length = {args.context}\nthreads = {args.threads}\n'
            f"batch_size = {args.batch}\nflash_attention = false\n"  # as llama_cpp.server defaults
            "parallel = 1\n"  # one sequence, as llama_cpp.server (batching: bench/batching.py)
        )
        ours = Target("sluicegate", f"http://127.0.0.1:{free_port()}")
        ref = Target("llama_cpp.server", f"http://127.0.0.1:{free_port()}")
        env = {**os.environ, "XDG_DATA_HOME": str(folder / "data")}
        env.pop("SLUICEGATE_CONFIG", None)
        sluicegate_cmd = [sys.executable, "-m", "sluicegate", "serve", "--config", str(config)]
        sluicegate_cmd += ["--port", ours.base_url.rsplit(":", 1)[1]]
        reference_cmd = [
            args.reference_python, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", MODEL,
            "--host", "127.0.0.1", "--port", ref.base_url.rsplit(":", 1)[1], "--n_ctx", str(args.context),
            "--n_batch", str(args.batch), "--n_threads", str(args.threads),
            "--n_threads_batch", str(args.threads), "--verbose", "false",
        ]  # fmt: skip
        ref_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
        with (
            serving(sluicegate_cmd, ours.base_url, folder / "sluicegate.log", env) as ours.pid,
            serving(reference_cmd, ref.base_url, folder / "reference.log", ref_env) as ref.pid,
        ):
            for target in (ours, ref):  # warm-up: loads the model (JIT in Sluicegate), fills caches
                measure(target, -1, 8)
            for run in range(args.runs):
                for target in (ours, ref) if run % 2 == 0 else (ref, ours):
                    ttft, rate, cpu = measure(target, run, args.max_tokens)
                    target.ttft.append(ttft)
                    target.rate.append(rate)
                    target.cpu.append(cpu)
                    print(
                        f"run {run} {target.name:17} TTFT {ttft * 1000:7.1f} ms  decode {rate:6.1f} tok/s"
                        f"  server CPU {cpu * 1000:6.2f} ms/token",
                        flush=True,
                    )

    print(f"\nGGUF {gguf.name} ({size_mb:.0f} MB), {args.runs} runs each, alternating,")
    print(
        f"max_tokens {args.max_tokens}, greedy, threads {args.threads}, context {args.context}, batch {args.batch}"
    )
    print(f"{'median':18}{'TTFT':>12}{'decode tok/s':>14}{'server CPU ms/token':>22}")
    for target in (ours, ref):
        ttft, rate, cpu = (statistics.median(v) for v in (target.ttft, target.rate, target.cpu))
        print(f"{target.name:18}{ttft * 1000:9.1f} ms{rate:14.1f}{cpu * 1000:22.2f}")

    def ratio(ours_values: list[float], ref_values: list[float]) -> str:
        of_medians = statistics.median(ours_values) / statistics.median(ref_values)
        # Neighbouring runs share the machine's load of the moment: their ratios are less noisy.
        per_run = statistics.median(a / b for a, b in zip(ours_values, ref_values, strict=True))
        return f"{of_medians:.3f}x (median of per-run ratios {per_run:.3f}x)"

    print("sluicegate / reference:")
    print(f"  decode tokens/s   {ratio(ours.rate, ref.rate)}   target >= 0.97x")
    print(f"  TTFT              {ratio(ours.ttft, ref.ttft)}   target <= 1.0x")
    print(f"  CPU per token     {ratio(ours.cpu, ref.cpu)}   (the wall-clock-free view of overhead)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
