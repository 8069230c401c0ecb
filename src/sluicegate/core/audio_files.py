"""Uploaded audio files (POST /v1/audio/transcriptions) decoded to what transcription hears.

The container is named by its first bytes, never by probing every demuxer FFmpeg has (some open
other files or URLs a playlist names), and decoded with PyAV (FFmpeg, which faster-whisper uses
too) to 16 kHz mono float32. The duration limit applies to what is decoded, not to what a header
claims: decoding stops, and the upload is refused, as soon as the samples pass it, so a small
file that decodes to hours (a decompression bomb) costs no more than the limit. Every failure is
a 400 in the caller's dialect; this runs in a worker thread (it is CPU work).
"""

from __future__ import annotations

import io
import struct
from typing import Any

from sluicegate.core.audio import AudioLimits
from sluicegate.core.errors import SluicegateError, invalid
from sluicegate.core.speech import SAMPLE_RATE

# Containers by their magic, as FFmpeg's demuxers are named; what browsers and phones upload.
ACCEPTED = "flac, m4a, mp3, mp4, mpeg, mpga, oga, ogg, opus, wav, webm, aac"


def _bad(message: str, code: str = "invalid_audio") -> SluicegateError:
    return invalid(f"Invalid audio file: {message}", param="file", code=code)


def sniff(data: bytes) -> str:
    """The FFmpeg demuxer for `data`, from its first bytes; a 400 for anything else."""
    if not data:
        raise _bad("the file is empty.")
    head = data[:16]
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "wav"
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"OggS":
        return "ogg"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "matroska"  # WebM (a browser's MediaRecorder) and Matroska
    if head[4:8] == b"ftyp":
        return "mov"  # MP4, M4A
    if head[:3] == b"ID3":
        return "mp3"
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0:
        # MPEG audio frame sync: layer bits 00 is ADTS (AAC), anything else MPEG audio (MP3).
        return "aac" if head[1] & 0x06 == 0 else "mp3"
    raise _bad(f"not an audio format this server decodes ({ACCEPTED}).", code="unsupported_audio_format")


def _check_wav(data: bytes) -> None:
    """A WAV whose header claims more samples than it carries is cut short: refused (a
    streamed WAV's 'unknown' sizes, 0 or 0xFFFFFFFF, are fine: read to the end)."""
    at = 12
    while at + 8 <= len(data):
        kind, size = data[at : at + 4], struct.unpack_from("<I", data, at + 4)[0]
        if kind == b"data":
            if size not in (0, 0xFFFFFFFF) and size > len(data) - at - 8:
                raise _bad(
                    f"the WAV's header claims {size} bytes of samples; the file has {len(data) - at - 8}."
                )
            return
        at += 8 + size + (size & 1)
    raise _bad("the WAV file has no data chunk.")


def decode_upload(data: bytes, limits: AudioLimits) -> tuple[bytes, float]:
    """`data` as 16 kHz mono float32 samples and how long they play, within `limits`."""
    if len(data) > limits.max_bytes:
        raise invalid(
            f"The audio file is {len(data)} bytes, more than this server accepts ({limits.max_bytes}).",
            param="file",
            code="audio_too_large",
        )
    fmt = sniff(data)
    if fmt == "wav":
        _check_wav(data)
    import av  # PyAV: installed with the voice extra

    max_samples = int(limits.max_seconds * SAMPLE_RATE)
    out = bytearray()
    try:
        with av.open(io.BytesIO(data), mode="r", format=fmt, metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise _bad("the file has no audio stream.")
            resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
            for frame in container.decode(audio=0):
                _take(resampler.resample(frame), out, max_samples, limits)
            _take(resampler.resample(None), out, max_samples, limits)
    except SluicegateError:
        raise
    except (av.error.FFmpegError, ValueError, IndexError, EOFError, OSError) as exc:
        raise _bad(f"it could not be decoded as {fmt} ({type(exc).__name__}).") from None
    if not out:
        raise _bad("it holds no audio samples.")
    return bytes(out), len(out) / 4 / SAMPLE_RATE


def _take(frames: Any, out: bytearray, max_samples: int, limits: AudioLimits) -> None:
    for frame in frames:
        out += memoryview(frame.planes[0])[: frame.samples * 4]  # one copy: into `out`
        if len(out) > max_samples * 4:
            raise invalid(
                f"The audio plays longer than this server accepts ({limits.max_seconds:g} s, "
                "max_audio_seconds).",
                param="file",
                code="audio_too_long",
            )
