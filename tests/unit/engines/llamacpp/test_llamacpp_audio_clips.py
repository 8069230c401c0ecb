"""The demo audio pair loads in the installed libmtmd and hears clips: counting, reuse, refusals."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pytest
from PIL import Image

from audio_support import silent_mp3, tone_wav
from engine_events import checked_reply
from sluicegate.core.audio import AudioLimits, Sound, decode_audio
from sluicegate.core.errors import SluicegateError
from sluicegate.core.request import ChatRequest, ContentPart, Message, SamplingParams
from sluicegate.demo.audio import TOKENS_PER_WINDOW, make_demo_audio
from sluicegate.engines.llamacpp.engine import LlamaCppEngine
from sluicegate.engines.llamacpp.vision import projector_senses


def sound(data: bytes, fmt: str = "wav") -> Sound:
    return decode_audio(base64.b64encode(data).decode(), fmt, AudioLimits())


def request(*clips: Sound, text: str = "What is it?") -> ChatRequest:
    parts = [ContentPart("text", text=text)]
    for clip in clips:
        part = ContentPart("audio", audio_data="(checked)", audio_format=clip.format)
        part.sound = clip
        parts.append(part)
    return ChatRequest(
        model="ear",
        messages=[Message("user", parts)],
        sampling=SamplingParams(temperature=0.0, max_tokens=10),
    )


@pytest.fixture(scope="module")
def ear(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = tmp_path_factory.mktemp("ear") / "ear.gguf"
    projector = make_demo_audio(model, ends_replies=False)
    assert projector_senses(projector) == (False, True)
    return model


@pytest.mark.parametrize("batching", [True, False])
async def test_the_clip_matters_and_its_tokens_are_counted(ear: Path, batching: bool) -> None:
    table = {"id": "ear", "engine": "llamacpp", "path": str(ear), "context_length": 512, "batch_size": 16}
    engine = LlamaCppEngine.from_config({**table, "batching": batching}, ear.parent)
    low, high = sound(tone_wav(220.0)), sound(tone_wav(1760.0))
    try:
        engine.check(request(low))  # counted before the load: the projector on the tokenizer alone
        await engine.load(lambda _: None)
        first, usage = await checked_reply(engine, request(low))
        again, cached = await checked_reply(engine, request(low))
        assert again == first and cached.cached_tokens == usage.prompt_tokens - 1  # the clip reused too
        _, plain_usage = await checked_reply(engine, request())
        assert usage.audio_tokens == TOKENS_PER_WINDOW and plain_usage.audio_tokens == 0
        assert usage.prompt_tokens >= plain_usage.prompt_tokens + TOKENS_PER_WINDOW
        other, other_usage = await checked_reply(engine, request(high))
        assert other != first and other_usage.cached_tokens < usage.prompt_tokens - TOKENS_PER_WINDOW
        mp3, mp3_usage = await checked_reply(engine, request(sound(silent_mp3(), "mp3")))
        assert mp3 and mp3_usage.audio_tokens == TOKENS_PER_WINDOW
    finally:
        await engine.aclose()


async def test_a_long_clip_is_a_window_every_30_seconds_each_its_own(ear: Path) -> None:
    engine = LlamaCppEngine.from_config({"id": "ear", "engine": "llamacpp", "path": str(ear)}, ear.parent)
    try:
        await engine.load(lambda _: None)
        projector = engine._runtime.projector if engine._runtime else None
        assert projector is not None and projector.audio and not projector.vision
        media = projector.tokenize("x <__media__> y", [sound(tone_wav(440.0, seconds=61.0, rate=8_000))])
        try:
            assert media.audio_tokens == 3 * TOKENS_PER_WINDOW and len(media.images) == 3
            starts = sorted(media.images)
            ids = {media.tokens[start] for start in starts}
            assert len(ids) == 3 and all(i < 0 for i in ids)  # one placeholder per window
            assert all(span.audio for span in media.images.values())
        finally:
            media.free()
        assert media.audio_tokens == 3 * TOKENS_PER_WINDOW  # kept for the usage after the chunks go
    finally:
        await engine.aclose()


async def test_what_libmtmd_cannot_use_is_a_400(ear: Path) -> None:
    engine = LlamaCppEngine.from_config({"id": "ear", "engine": "llamacpp", "path": str(ear)}, ear.parent)
    try:
        await engine.load(lambda _: None)
        # A header fine, a coding none reads (core/audio.py refuses it first; the engine too).
        unreadable = Sound(tone_wav(440.0, format_code=0x1234), "wav", 1.0, "cd" * 32)
        one_sample = sound(tone_wav(440.0, seconds=0))  # libmtmd's preprocessor asserts on it
        for clip in (unreadable, one_sample):
            with pytest.raises(SluicegateError) as caught:
                engine.check(request(clip))
            assert caught.value.info.code == "invalid_audio" and caught.value.info.status == 400
        # Bytes the helper would take for an image: never an image in place of a clip.
        png = io.BytesIO()
        Image.new("RGB", (256, 256), (200, 0, 0)).save(png, "PNG")  # wide: not too few "samples"
        with pytest.raises(SluicegateError) as caught:
            engine.check(request(Sound(png.getvalue(), "wav", 1.0, "ab" * 32)))
        assert caught.value.info.code == "invalid_audio"
        text, _ = await checked_reply(engine, request(sound(tone_wav(440.0))))
        assert text  # the engine is fine after them
    finally:
        await engine.aclose()


def test_an_audio_projector_hears_and_does_not_see(ear: Path) -> None:
    capabilities = (
        LlamaCppEngine.from_config({"id": "ear", "engine": "llamacpp", "path": str(ear)}, ear.parent)
        .info()
        .capabilities
    )
    assert capabilities.audio and not capabilities.vision


def test_a_projector_header_that_cannot_be_read_counts_as_vision(tmp_path: Path) -> None:
    broken = tmp_path / "mmproj-x.gguf"
    broken.write_bytes(b"not a gguf")
    assert projector_senses(broken) == (True, False)
