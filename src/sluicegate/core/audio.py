"""Audio a request carries (Chat's `input_audio`), checked once within the server's limits.

The engine that hears it (llama.cpp with an audio projector) decodes the samples itself, with
libmtmd's decoder, which resamples them to what its encoder takes. What is checked here, before
any decoding, is that the bytes are the WAV or MP3 the client named and how long they play, so a
clip over the duration cap (or a WAV whose header claims more samples than it carries, which a
decoder would allocate for) is refused without decoding it. Every failure is a 400.

The duration is the one the decoder will hear, not the one a header claims: the file is
rewritten into what was measured (`Sound.data`) — a WAV with a canonical header (its frame size
from channels and sample width, as decoders read it, never the header's `blockAlign`), an MP3
as exactly the frames counted (junk between frames dropped; a decoder skips it and reads on).
A decoder can then not find more audio than the limit allowed. This runs in a worker thread
(`turn/images.py`), never on the event loop.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from dataclasses import dataclass

from sluicegate.core.errors import SluicegateError, invalid
from sluicegate.core.images import MIB

FORMATS = ("wav", "mp3")  # what Chat Completions' `input_audio.format` allows


@dataclass(frozen=True, slots=True)
class AudioLimits:
    """`[server]` max_audio_bytes, max_audio_seconds, max_audio_per_request."""

    max_bytes: int = 16 * MIB
    max_seconds: float = 300.0
    max_clips: int = 16


@dataclass(frozen=True, slots=True)
class Sound:
    data: bytes  # the file as measured (WAV or MP3): what the decoder gets
    format: str
    seconds: float  # how long it plays, by its header
    digest: str  # SHA-256 of the file (hex): what identifies it in a KV cache


def _bad(message: str) -> SluicegateError:
    return invalid(f"Invalid audio: {message}", code="invalid_audio")


def decode_audio(encoded: str, fmt: str, limits: AudioLimits) -> Sound:
    """The base64 `encoded` file, checked against its format and the limits."""
    if fmt not in FORMATS:
        raise invalid(
            f"Unsupported audio format {fmt!r}; send 'wav' or 'mp3'.",
            param="input_audio.format",
            code="invalid_audio",
        )
    size = len(encoded) // 4 * 3 - encoded[-2:].count("=")  # exact for valid base64 (no whitespace)
    if size > limits.max_bytes:  # refused before base64 makes a copy of it
        raise _too_large(size, limits)
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise _bad("the data is not valid base64.") from None
    seconds, data = measured_wav(data) if fmt == "wav" else measured_mp3(data)
    if seconds <= 0:
        raise _bad("the clip has no samples.")
    if seconds > limits.max_seconds:
        raise invalid(
            f"An audio clip plays {seconds:.1f} s, longer than this server accepts ({limits.max_seconds:g} s).",
            code="audio_too_long",
        )
    return Sound(data, fmt, seconds, hashlib.sha256(data).hexdigest())


def _too_large(size: int, limits: AudioLimits) -> SluicegateError:
    return invalid(
        f"An audio clip is {size} bytes, more than this server accepts ({limits.max_bytes}).",
        code="audio_too_large",
    )


_PCM, _FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE


def wav_seconds(data: bytes) -> float:
    """A RIFF/WAVE file's duration, as a decoder hears it."""
    return measured_wav(data)[0]


def measured_wav(data: bytes) -> tuple[float, bytes]:
    """A RIFF/WAVE file's duration, from its `fmt ` and `data` chunks, and the file rewritten
    with a canonical header: PCM or float samples, a frame being channels x sample width (what
    a decoder reads, whatever `blockAlign` claims), no chunk but those two."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise _bad("the data is not a WAV file (no RIFF/WAVE header).")
    at, frame, fmt = 12, 0, b""
    while at + 8 <= len(data):
        kind, size = data[at : at + 4], struct.unpack_from("<I", data, at + 4)[0]
        body = at + 8
        if kind == b"fmt ":
            if size < 16 or body + 16 > len(data):
                raise _bad("the WAV's format chunk is cut short.")
            code, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", data, body)
            if code == _EXTENSIBLE and size >= 40 and body + 26 <= len(data):
                code = struct.unpack_from("<H", data, body + 24)[0]  # the sub-format's GUID starts with it
            if not channels or not rate or not bits:
                raise _bad("the WAV's format chunk has no channels, rate or sample size.")
            if code not in (_PCM, _FLOAT) or bits % 8 or bits > 64:
                raise _bad("the WAV's samples are not PCM or floating point (compressed WAVs are not read).")
            frame = channels * (bits // 8)
            fmt = struct.pack("<HHIIHH", code, channels, rate, rate * frame, frame, bits)
        elif kind == b"data":
            if not frame:
                raise _bad("the WAV has its data before its format chunk.")
            if size > len(data) - body:
                raise _bad(
                    f"the WAV's header claims {size} bytes of samples; the file has {len(data) - body}."
                )
            frames = size // frame
            rate = struct.unpack_from("<I", fmt, 4)[0]
            samples = data[body : body + frames * frame]
            header = (
                b"WAVE"
                + b"fmt "
                + struct.pack("<I", len(fmt))
                + fmt
                + b"data"
                + struct.pack("<I", len(samples))
            )
            return frames / rate, b"RIFF" + struct.pack("<I", len(header) + len(samples)) + header + samples
        at = body + size + (size & 1)  # chunks are padded to an even length
    raise _bad("the WAV file has no data chunk.")


# MPEG audio Layer III frame headers: bitrates (kbit/s) by version, sample rates by version.
_BITRATES = {
    1: (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    2: (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


def mp3_seconds(data: bytes) -> float:
    """An MP3's duration, as a decoder hears it."""
    return measured_mp3(data)[0]


def _frame(data: bytes, at: int) -> tuple[int, float] | None:
    """The Layer III frame at `at`: its length in bytes and the seconds it plays, or None."""
    if at + 4 > len(data):
        return None
    b1, b2 = data[at + 1], data[at + 2]
    version, layer = (b1 >> 3) & 3, (b1 >> 1) & 3
    bitrate_index, rate_index = b2 >> 4, (b2 >> 2) & 3
    if data[at] != 0xFF or b1 & 0xE0 != 0xE0 or version == 1 or layer != 1:
        return None  # not a Layer III frame
    if bitrate_index in (0, 15) or rate_index == 3:
        return None
    rate = _RATES[version][rate_index]
    bitrate = _BITRATES[1 if version == 3 else 2][bitrate_index] * 1000
    samples = 1152 if version == 3 else 576
    return samples // 8 * bitrate // rate + ((b2 >> 1) & 1), samples / rate


def measured_mp3(data: bytes) -> tuple[float, bytes]:
    """An MP3's duration and its frames alone: counted from the first (after an ID3v2 tag) and,
    past bytes that are no frame, from the next frame header on, as a decoder resyncs (one junk
    byte must not hide the frames behind it)."""
    at = 0
    if data[:3] == b"ID3" and len(data) >= 10:
        tag = (data[6] & 0x7F) << 21 | (data[7] & 0x7F) << 14 | (data[8] & 0x7F) << 7 | (data[9] & 0x7F)
        at = 10 + tag + (10 if data[5] & 0x10 else 0)
    if _frame(data, at) is None:
        raise _bad("the data is not an MP3 file (no MPEG Layer III frame at its start).")
    seconds = 0.0
    frames: list[bytes] = []
    while at + 4 <= len(data):
        found = _frame(data, at)
        if found is None:
            at = data.find(b"\xff", at + 1)  # resync: the next possible frame header
            if at < 0:
                break
            continue
        length, played = found
        frames.append(data[at : at + length])
        seconds += played
        at += length
    return seconds, b"".join(frames)
