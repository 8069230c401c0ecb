"""Audio clips for the tests: a WAV tone (stdlib `wave`) and a silent MP3 (hand-made frames)."""

from __future__ import annotations

import io
import math
import struct
import wave

# An MPEG-1 Layer III frame header: 128 kbit/s, 44.1 kHz, mono, no CRC; 417 bytes a frame.
_MP3_HEADER = bytes([0xFF, 0xFB, 0x90, 0xC0])
_MP3_FRAME = 144 * 128_000 // 44_100


def tone_wav(
    frequency: float, *, seconds: float = 1.0, rate: int = 22_050, width: int = 2, format_code: int = 1
) -> bytes:
    """A sine tone as a mono PCM WAV (`format_code` patched in after, to make one no decoder reads)."""
    frames = max(1, round(seconds * rate))
    peak = (1 << (8 * width - 1)) - 1
    kind = {2: "<h", 4: "<i"}[width]
    samples = b"".join(
        struct.pack(kind, round(0.5 * peak * math.sin(2 * math.pi * frequency * i / rate)))
        for i in range(frames)
    )
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(width)
        writer.setframerate(rate)
        writer.writeframes(samples)
    data = bytearray(out.getvalue())
    data[20:22] = struct.pack("<H", format_code)
    return bytes(data)


def silent_mp3(*, seconds: float = 1.0) -> bytes:
    """Frames of silence (zero side information), as many as play `seconds`."""
    frames = max(1, round(seconds * 44_100 / 1152))
    frame = _MP3_HEADER + bytes(_MP3_FRAME - len(_MP3_HEADER))
    return frame * frames
