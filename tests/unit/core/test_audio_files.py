"""Uploads to /v1/audio/transcriptions: named by their magic, decoded within the limits (issue 45)."""

from __future__ import annotations

import io
import struct
import wave

import pytest

from sluicegate.core.audio import AudioLimits
from sluicegate.core.audio_encode import Encoder, wav_header
from sluicegate.core.audio_files import decode_upload, sniff
from sluicegate.core.errors import SluicegateError

av = pytest.importorskip("av")


def _wav(seconds: float, rate: int = 8000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(bytes(int(rate * seconds) * 2))
    return out.getvalue()


@pytest.mark.parametrize(
    ("head", "demuxer"),
    [
        (b"RIFF\0\0\0\0WAVEfmt ", "wav"),
        (b"fLaC\0\0\0\x22", "flac"),
        (b"OggS\0\x02", "ogg"),
        (b"\x1a\x45\xdf\xa3\x01", "matroska"),
        (b"\0\0\0\x20ftypM4A ", "mov"),
        (b"ID3\x04\0\0", "mp3"),
        (b"\xff\xfb\x90\xc0", "mp3"),
        (b"\xff\xf1\x50\x80", "aac"),
    ],
)
def test_sniffed_by_magic(head: bytes, demuxer: str) -> None:
    assert sniff(head + bytes(16)) == demuxer


@pytest.mark.parametrize(
    "data", [b"", b"#EXTM3U\nhttp://127.0.0.1/x.wav\n", b"<html></html>", b"ffconcat version 1.0"]
)
def test_anything_else_is_a_400(data: bytes) -> None:
    with pytest.raises(SluicegateError) as caught:
        sniff(data)
    assert caught.value.info.status == 400 and caught.value.info.param == "file"


def test_decoded_to_16k_mono_float() -> None:
    samples, seconds = decode_upload(_wav(1.5), AudioLimits())
    assert seconds == pytest.approx(1.5, abs=0.01) and len(samples) == pytest.approx(
        1.5 * 16000 * 4, rel=0.01
    )


def test_the_duration_limit_is_on_what_decodes() -> None:
    # A streamed WAV's header says nothing of its length: the samples are counted as they decode.
    data = wav_header(8000) + bytes(8000 * 2 * 12)
    with pytest.raises(SluicegateError) as caught:
        decode_upload(data, AudioLimits(max_seconds=10))
    assert caught.value.info.code == "audio_too_long"
    assert decode_upload(data, AudioLimits(max_seconds=13))[1] == pytest.approx(12, abs=0.01)


def test_a_header_that_claims_more_than_the_file_is_a_400() -> None:
    data = bytearray(_wav(1.0))
    struct.pack_into("<I", data, 40, 8000 * 2 * 3600)  # an hour
    with pytest.raises(SluicegateError) as caught:
        decode_upload(bytes(data), AudioLimits())
    assert caught.value.info.code == "invalid_audio"


def test_too_many_bytes_refused_before_decoding() -> None:
    with pytest.raises(SluicegateError) as caught:
        decode_upload(b"not even audio" * 100, AudioLimits(max_bytes=100))
    assert caught.value.info.code == "audio_too_large"


def test_garbage_after_a_real_magic_is_a_400() -> None:
    with pytest.raises(SluicegateError) as caught:
        decode_upload(b"fLaC" + bytes(range(256)) * 4, AudioLimits())
    assert caught.value.info.status == 400


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac", "wav"])
def test_encoded_speech_decodes_back(fmt: str) -> None:
    encoder = Encoder(fmt, 22050)  # type: ignore[arg-type]
    tone = struct.pack("<" + "h" * 22050, *[(i * 37 % 2000) - 1000 for i in range(22050)])
    data = encoder.feed(tone[: len(tone) // 2]) + encoder.feed(tone[len(tone) // 2 :]) + encoder.finish()
    _, seconds = decode_upload(data, AudioLimits())
    assert seconds == pytest.approx(1.0, abs=0.1)


def test_pcm_is_24k() -> None:
    encoder = Encoder("pcm", 22050)
    data = encoder.feed(bytes(22050 * 2)) + encoder.finish()
    assert len(data) / 2 / 24000 == pytest.approx(1.0, abs=0.01)
