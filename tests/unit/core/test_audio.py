"""Audio input checked from its header, before any decoder sees it: format, size, duration."""

from __future__ import annotations

import base64
import struct

import pytest

from audio_support import silent_mp3, tone_wav
from sluicegate.core.audio import AudioLimits, decode_audio, mp3_seconds, wav_seconds
from sluicegate.core.errors import SluicegateError


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def refusal(encoded: str, fmt: str = "wav", limits: AudioLimits | None = None, says: str = "") -> str | None:
    with pytest.raises(SluicegateError) as caught:
        decode_audio(encoded, fmt, limits or AudioLimits())
    assert caught.value.info.status == 400 and says in caught.value.info.message
    return caught.value.info.code


def test_a_wav_plays_as_long_as_its_samples() -> None:
    assert wav_seconds(tone_wav(440.0, seconds=1.5, rate=16_000)) == pytest.approx(1.5)
    assert wav_seconds(tone_wav(440.0, seconds=2.0, rate=48_000, width=4)) == pytest.approx(2.0)
    sound = decode_audio(b64(tone_wav(440.0)), "wav", AudioLimits())
    assert sound.format == "wav" and sound.seconds == pytest.approx(1.0)
    assert sound.digest == decode_audio(b64(tone_wav(440.0)), "wav", AudioLimits()).digest
    assert sound.digest != decode_audio(b64(tone_wav(880.0)), "wav", AudioLimits()).digest


def test_a_wav_chunk_before_the_samples_is_skipped() -> None:
    wav = tone_wav(440.0, rate=8_000)
    extra = b"LIST" + struct.pack("<I", 3) + b"abc\x00"  # odd-sized: padded to even
    patched = wav[:36] + extra + wav[36:]
    patched = patched[:4] + struct.pack("<I", len(patched) - 8) + patched[8:]
    assert wav_seconds(patched) == pytest.approx(1.0)


def test_an_mp3_plays_as_long_as_its_frames() -> None:
    assert mp3_seconds(silent_mp3(seconds=2.0)) == pytest.approx(2.0, abs=0.03)
    tagged = b"ID3\x04\x00\x00\x00\x00\x00\x05hello" + silent_mp3(seconds=1.0)  # a 5-byte ID3v2 tag
    assert mp3_seconds(tagged) == pytest.approx(1.0, abs=0.03)
    assert decode_audio(b64(silent_mp3()), "mp3", AudioLimits()).format == "mp3"


def test_what_is_not_the_named_format_is_invalid_audio() -> None:
    assert refusal(b64(b"RIFF\x00\x00\x00\x00WAVEjunk")) == "invalid_audio"  # no data chunk
    assert refusal(b64(b"hello, not a wav at all")) == "invalid_audio"
    assert refusal(b64(silent_mp3())) == "invalid_audio"  # an MP3 sent as "wav"
    assert refusal(b64(tone_wav(440.0)), "mp3", says="not an MP3") == "invalid_audio"  # the other way round
    assert refusal(b64(tone_wav(440.0)), "flac") == "invalid_audio"
    assert refusal("***") == "invalid_audio"
    header_only = tone_wav(440.0)[:44]
    assert refusal(b64(header_only)) == "invalid_audio"  # its header claims samples it lacks
    empty = tone_wav(440.0)[:40] + struct.pack("<I", 0)
    assert refusal(b64(empty)) == "invalid_audio"  # no samples


def test_limits_are_400s_before_decoding() -> None:
    long = b64(tone_wav(440.0, seconds=3.0, rate=8_000))
    assert refusal(long, limits=AudioLimits(max_seconds=2.5)) == "audio_too_long"
    assert refusal(long, limits=AudioLimits(max_bytes=1000)) == "audio_too_large"
    for size in (3000, 3001, 3002):  # every base64 padding: the exact size counts
        clip = b"RIFF" + bytes(size - 4)
        assert refusal(b64(clip), limits=AudioLimits(max_bytes=size - 1)) == "audio_too_large"
        assert refusal(b64(clip), limits=AudioLimits(max_bytes=size)) == "invalid_audio"  # not too large
    assert refusal(b64(silent_mp3(seconds=3.0)), "mp3", AudioLimits(max_seconds=2.0)) == "audio_too_long"
    assert decode_audio(long, "wav", AudioLimits(max_seconds=3.0)).seconds == pytest.approx(3.0)


# MPEG-2.5 Layer III, 8 kbit/s, 8 kHz, mono: 72 bytes that play 0.072 s, the most audio per byte.
_SLOW_FRAME = bytes([0xFF, 0xE3, 0x18, 0xC0]) + bytes(68)


def test_a_junk_byte_does_not_hide_the_frames_behind_it() -> None:
    """One frame, one junk byte, 160,000 more frames: a header check that stopped at the junk
    measured 0.07 s, and the decoder, which resyncs, heard 11,520 s."""
    crafted = _SLOW_FRAME + b"\x00" + _SLOW_FRAME * 160_000
    assert len(crafted) < AudioLimits().max_bytes  # inside the size limit: only the duration refuses it
    assert refusal(b64(crafted), "mp3", says="11520.1 s") == "audio_too_long"
    # Within the limit, the decoder gets the frames alone: nothing it could hear beyond them.
    sound = decode_audio(b64(_SLOW_FRAME + b"junk" + _SLOW_FRAME * 9), "mp3", AudioLimits())
    assert sound.seconds == pytest.approx(0.72) and sound.data == _SLOW_FRAME * 10


def test_a_wav_plays_by_its_sample_width_not_its_block_align() -> None:
    """blockAlign 65535 on 327 s of 16-bit mono: 0.016 s by the header's frame size, 327 s as
    a decoder reads the samples (channels x width)."""
    wav = bytearray(tone_wav(0.0, seconds=327.0, rate=1_000))
    wav[32:34] = struct.pack("<H", 65535)
    assert refusal(b64(bytes(wav)), says="327.0 s") == "audio_too_long"
    short = bytearray(tone_wav(440.0, seconds=2.0, rate=8_000))
    short[32:34] = struct.pack("<H", 65535)
    sound = decode_audio(b64(bytes(short)), "wav", AudioLimits())
    assert sound.seconds == pytest.approx(2.0)
    assert struct.unpack_from("<H", sound.data, 32)[0] == 2  # the decoder gets a canonical header
    assert sound.data[44:] == bytes(short[44:])


def test_a_compressed_wav_is_refused_rather_than_mismeasured() -> None:
    adpcm = tone_wav(440.0, format_code=2)  # MS ADPCM: its frames are not channels x width
    assert refusal(b64(adpcm), says="not PCM") == "invalid_audio"
