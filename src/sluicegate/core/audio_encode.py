"""Synthesised speech encoded as it is made (POST /v1/audio/speech), one sentence at a time.

`Encoder.feed` takes a sentence's 16-bit PCM and returns the bytes that are ready to send, so a
client hears the first sentence while the next is being synthesised. WAV and PCM are written
here (a streamed WAV says its sizes are unknown, 0xFFFFFFFF, as OpenAI's does); MP3, Opus (in
Ogg), AAC (ADTS) and FLAC by FFmpeg's encoders through PyAV, into a sink that is never seeked.
"""

from __future__ import annotations

import contextlib
import struct
from typing import Any, Literal

SpeechFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]
FORMATS: tuple[SpeechFormat, ...] = ("mp3", "opus", "aac", "flac", "wav", "pcm")
PCM_RATE = 24000  # OpenAI's `pcm`: 24 kHz 16-bit signed little-endian mono, without a header

MEDIA_TYPES: dict[str, str] = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
# (container, codec, sample rate or None: the voice's own) for the formats FFmpeg encodes.
_FFMPEG: dict[str, tuple[str, str, int | None]] = {
    "mp3": ("mp3", "libmp3lame", None),
    "opus": ("ogg", "libopus", 48000),
    "aac": ("adts", "aac", None),
    "flac": ("flac", "flac", None),
}


def wav_header(rate: int, size: int = 0xFFFFFFFF) -> bytes:
    """A 16-bit mono WAV header; `size` unknown (streamed) by default."""
    riff = 0xFFFFFFFF if size == 0xFFFFFFFF else 36 + size
    return (
        b"RIFF"
        + struct.pack("<I", riff)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
        + b"data"
        + struct.pack("<I", size)
    )


class _Sink:
    """What the muxer writes into; drained after every sentence. Not seekable, so muxers that
    would go back to patch a header (MP3's Xing, FLAC's STREAMINFO) leave it as first written."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.chunks.append(bytes(data))
        return len(data)

    def drain(self) -> bytes:
        out, self.chunks = b"".join(self.chunks), []
        return out


class Encoder:
    """One response's audio in `fmt`, from 16-bit mono PCM at `rate`."""

    def __init__(self, fmt: SpeechFormat, rate: int) -> None:
        self.fmt = fmt
        self.rate = rate
        self._started = False
        self._container: Any = None
        self._resampler: Any = None
        if (fmt == "pcm" and rate != PCM_RATE) or fmt in _FFMPEG:
            import av  # PyAV: installed with the voice extra

            self._av = av
        if fmt in _FFMPEG:
            container, codec, out_rate = _FFMPEG[fmt]
            self._sink = _Sink()
            self._container = av.open(self._sink, mode="w", format=container)
            self._stream = self._container.add_stream(codec, rate=out_rate or rate, layout="mono")
            encoder_format = self._stream.codec_context.codec.audio_formats[0].name
            self._resampler = av.AudioResampler(format=encoder_format, layout="mono", rate=out_rate or rate)
        elif fmt == "pcm" and rate != PCM_RATE:
            self._resampler = av.AudioResampler(format="s16", layout="mono", rate=PCM_RATE)

    @property
    def media_type(self) -> str:
        return MEDIA_TYPES[self.fmt]

    def _frame(self, pcm: bytes) -> Any:
        import numpy as np

        samples = np.frombuffer(pcm, dtype="<i2").reshape(1, -1)
        frame = self._av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = self.rate
        return frame

    def feed(self, pcm: bytes) -> bytes:
        """The bytes ready to send once `pcm` is encoded (a WAV's header comes first)."""
        if self.fmt == "wav":
            head = b"" if self._started else wav_header(self.rate)
            self._started = True
            return head + pcm
        if not pcm:
            return b""
        if self.fmt == "pcm":
            if self._resampler is None:
                return pcm
            return b"".join(
                bytes(f.planes[0])[: f.samples * 2] for f in self._resampler.resample(self._frame(pcm))
            )
        for frame in self._resampler.resample(self._frame(pcm)):
            for packet in self._stream.encode(frame):
                self._container.mux(packet)
        return self._sink.drain()

    def finish(self) -> bytes:
        """What is left: the encoder's delayed frames and the container's trailer."""
        if self.fmt == "wav":
            return b"" if self._started else wav_header(self.rate, 0)
        if self.fmt == "pcm":
            if self._resampler is None:
                return b""
            return b"".join(bytes(f.planes[0])[: f.samples * 2] for f in self._resampler.resample(None))
        for frame in self._resampler.resample(None):
            for packet in self._stream.encode(frame):
                self._container.mux(packet)
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        return self._sink.drain()

    def close(self) -> None:
        """Free the encoder when the response ends early (the client left)."""
        if self._container is not None:
            with contextlib.suppress(Exception):  # already closed, or the muxer failed: nothing to free
                self._container.close()
            self._container = None
