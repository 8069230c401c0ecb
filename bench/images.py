"""Benchmark: images on a local model with a projector (libmtmd), against the same text alone.

Run from the repository root (venv active):

    python bench/images.py                       # the demo vision pair, Sluicegate alone
    python bench/images.py --llama-server PATH   # and llama-server --mmproj on the same files
    python bench/images.py --gguf M.gguf --mmproj P.gguf   # a real vision model
    python bench/images.py --audio [--llama-server PATH]  # audio clips (Chat input_audio) instead

By default both servers load the demo vision pair (`make_demo_vision(size="bench")`: the ~70 MB
demo model and a tiny LLaVA-style projector, 16 tokens an image), with the same threads, batch
and sequences. Rounds alternate between the servers. Measured, medians over the rounds:

- TTFT of one request with a fresh image (a colour no round used, so no cache serves it) against
  the same request without the image (a fresh tag, so no cache either): what an image costs to
  encode and decode, as a ratio;
- TTFT of the image request repeated (its prefix, image included, is cached);
- aggregate tokens/s of 4 concurrent streams where one carries an image, against 4 text streams;
- RSS of each server with the projector against the same server serving the model alone: the
  memory the projector adds;
- "sleeps per token": the server's voluntary context switches over both batches, per token.
  Load-independent where tokens/s is not: OpenMP decode threads that sleep at their barriers
  instead of spinning show as ~50 a token (bench/README.md, images.py), spinning ones as < 1.

With `--llama-server`, the last lines are Sluicegate / llama-server ratios (>= 1.0: Sluicegate
as fast or faster): TTFT with one image, and tokens/s of the batch with an image. Servers that
only serve the model alone take no part in the rounds (their RSS is read after the warm-up).

The demo projector's ViT is tiny: its image costs little next to a real one (hundreds of tokens
and a ViT of ~400M parameters); point --gguf/--mmproj at a real pair for real numbers.

With `--audio`, every "image" above is a 2-second WAV tone (a frequency no other round uses) in
an `input_audio` part, and the demo pair is the audio one (`make_demo_audio`: an Ultravox-style
projector, 50 tokens a 30-second window); --gguf/--mmproj then name a model whose projector hears.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from PIL import Image

from batching import rss_mib
from local_engine import free_port, serving, voluntary_switches
from sluicegate.demo.audio import make_demo_audio
from sluicegate.demo.vision import make_demo_vision

MODEL = "bench"
AUDIO = False  # --audio: the media are WAV clips, not pictures


def media(index: int) -> dict[str, Any]:
    """A content part no other index gets: a picture, or with --audio a clip."""
    return clip(index) if AUDIO else {"type": "image_url", "image_url": {"url": picture(index)}}


def clip(index: int) -> dict[str, Any]:
    """A 2-second 16 kHz WAV tone of a frequency no other index gets, as an `input_audio` part."""
    from audio_support import tone_wav  # the tests' writer (tests/ is on the path below)

    data = tone_wav(200.0 + index * 7 % 3000, seconds=2.0, rate=16_000)
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": "wav"}}


def picture(index: int) -> str:
    """A 320x240 PNG of a colour no other index gets, as a data URL."""
    out = io.BytesIO()
    Image.new("RGB", (320, 240), (index * 37 % 256, index * 91 % 256, index * 53 % 256)).save(out, "PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def ttft(url: str, text: str, image: dict[str, Any] | None, max_tokens: int = 8) -> tuple[float, int]:
    """Time to the first content delta, and the completion tokens."""
    content: Any = text
    if image is not None:
        content = [{"type": "text", "text": text}, image]
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    first = 0.0
    tokens = 0
    with httpx.Client(timeout=600) as client:
        sent = time.perf_counter()
        with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = httpx.Response(200, content=line[6:]).json()
                if chunk.get("choices") and chunk["choices"][0]["delta"].get("content") and not first:
                    first = time.perf_counter() - sent
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
    return first, tokens


def batch(url: str, tag: str, image: dict[str, Any] | None, max_tokens: int) -> float:
    """Aggregate tokens/s of 4 streams at once; the first carries `image` if given."""
    start = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        futures = [
            pool.submit(
                ttft, url, f"{tag} stream {i}: tell me a story.", image if i == 0 else None, max_tokens
            )
            for i in range(4)
        ]
        tokens = sum(f.result()[1] for f in futures)
    return tokens / (time.perf_counter() - start)


def config(gguf: Path, mmproj: Path | None, threads: int, port: int) -> str:
    line = f'mmproj = "{mmproj}"\n' if mmproj is not None else ""
    return (
        f'[server]\nlog_level = "warning"\nport = {port}\n\n[[models]]\nid = "{MODEL}"\nengine = "llamacpp"\n'
        f'path = "{gguf}"\n{line}threads = {threads}\ncontext_length = 2048\nparallel = 4\n'
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--llama-server", help="the llama-server binary (without: Sluicegate alone)")
    parser.add_argument(
        "--llama-server-args", default="", help="more llama-server flags, e.g. '--poll 0' (split on spaces)"
    )
    parser.add_argument("--gguf", type=Path, help="a vision model (default: the demo pair)")
    parser.add_argument("--mmproj", type=Path, help="its projector")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=64, help="per stream in the batch measurement")
    parser.add_argument("--audio", action="store_true", help="audio clips (input_audio) instead of images")
    args = parser.parse_args()
    global AUDIO
    AUDIO = args.audio
    if AUDIO:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

    with tempfile.TemporaryDirectory(prefix="sluicegate-bench-") as tmp:
        folder = Path(tmp)
        if args.gguf is not None and args.mmproj is not None:
            gguf, mmproj = args.gguf.resolve(), args.mmproj.resolve()
        else:
            (folder / "pair").mkdir()
            gguf = folder / "pair" / "bench.gguf"
            make_pair = make_demo_audio if AUDIO else make_demo_vision
            mmproj = make_pair(gguf, size="bench", ends_replies=False)
        env = {**os.environ, "XDG_DATA_HOME": str(folder / "data")}
        env.pop("SLUICEGATE_CONFIG", None)
        targets: dict[str, tuple[list[str], str, dict[str, str]]] = {}
        for name, projector in (("sluicegate", mmproj), ("sluicegate, no projector", None)):
            port = free_port()
            path = folder / f"{name.replace(' ', '_').replace(',', '')}.toml"
            # Without a projector: the model from another folder, so none is found beside it.
            model = gguf
            if projector is None:
                (folder / "alone").mkdir()
                model = folder / "alone" / gguf.name
                model.symlink_to(gguf)
            path.write_text(config(model, projector, args.threads, port))
            command = [sys.executable, "-m", "sluicegate", "serve", "--config", str(path)]
            targets[name] = (command, f"http://127.0.0.1:{port}", env)
        if args.llama_server:
            for name, projector in (("llama-server", mmproj), ("llama-server, no projector", None)):
                port = free_port()
                command = [
                    args.llama_server, "-m", str(gguf), "--alias", MODEL,
                    "--host", "127.0.0.1", "--port", str(port), "-c", str(2048 * 4), "-np", "4",
                    "--no-kv-unified", "-t", str(args.threads), "-tb", str(args.threads), "--jinja",
                    "--cache-ram", "0", "--no-repack",
                ]  # fmt: skip
                command += ["--mmproj", str(projector)] if projector is not None else ["--no-mmproj"]
                command += args.llama_server_args.split()
                targets[name] = (
                    command,
                    f"http://127.0.0.1:{port}",
                    {k: v for k, v in env.items() if k != "PYTHONPATH"},
                )
        results: dict[str, dict[str, list[float]]] = {name: {} for name in targets}
        with contextlib.ExitStack() as stack:
            pids = {}
            for name, (command, url, target_env) in targets.items():
                pids[name] = stack.enter_context(serving(command, url, folder / f"{name}.log", target_env))
                ttft(url, "warm-up", None)  # loads the model (just in time in Sluicegate)
                if "no projector" not in name:
                    ttft(url, "warm-up", media(10_000))  # the projector's first use
                else:  # serves nothing more: its memory now
                    results[name]["RSS MiB"] = [rss_mib(pids[name])[0]]
            sighted = [name for name in targets if "no projector" not in name]
            for round_ in range(args.rounds):
                for name in sighted:
                    url, out = targets[name][1], results[name]
                    text = f"Round {round_} on {name}: what is in this picture?"
                    image = media(round_ * 7 + len(name))
                    out.setdefault("TTFT text ms", []).append(ttft(url, text, None)[0] * 1000)
                    out.setdefault("TTFT one image ms", []).append(
                        ttft(url, text + " (again)", image)[0] * 1000
                    )
                    out.setdefault("TTFT same image again ms", []).append(
                        ttft(url, text + " (again)", image)[0] * 1000
                    )
                    switched = voluntary_switches(pids[name])
                    out.setdefault("4 streams tok/s", []).append(
                        batch(url, f"{name} {round_} t", None, args.max_tokens)
                    )
                    out.setdefault("4 streams, one image, tok/s", []).append(
                        batch(
                            url, f"{name} {round_} i", media(round_ * 11 + 500 + len(name)), args.max_tokens
                        )
                    )
                    out.setdefault("sleeps per token, batches", []).append(
                        (voluntary_switches(pids[name]) - switched) / (8 * args.max_tokens)
                    )
                    print(
                        f"{name:12} round {round_}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in out.items()),
                        flush=True,
                    )
            for name in sighted:
                results[name]["RSS MiB"] = [rss_mib(pids[name])[0]]

    print(
        f"\nGGUF {gguf.name} + {mmproj.name}, threads {args.threads}, 4 sequences, {args.rounds} rounds (medians)"
        + (", audio clips for images" if AUDIO else "")
    )
    for name in sighted:
        medians = {k: statistics.median(v) for k, v in results[name].items()}
        print(f"\n{name}")
        for key, value in medians.items():
            print(f"  {key:32} {value:9.1f}")
        print(
            f"  {'image TTFT / text TTFT':32} {medians['TTFT one image ms'] / medians['TTFT text ms']:9.2f}x"
        )
        print(
            f"  {'batch with an image / without':32} "
            f"{medians['4 streams, one image, tok/s'] / medians['4 streams tok/s']:9.2f}x"
        )
    print()
    for name in sighted:
        added = results[name]["RSS MiB"][0] - results[f"{name}, no projector"]["RSS MiB"][0]
        print(f"the projector adds {added:.1f} MiB of RSS to {name}")
    if "llama-server" in results:
        ours, theirs = results["sluicegate"], results["llama-server"]
        for key in (
            "TTFT one image ms",
            "TTFT same image again ms",
            "4 streams, one image, tok/s",
            "4 streams tok/s",
        ):
            ratio = statistics.median(theirs[key]) / statistics.median(ours[key])
            if "tok/s" in key:
                ratio = 1 / ratio
            print(f"{key}: Sluicegate vs llama-server {ratio:.2f}x (>= 1.0: Sluicegate as fast or faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
