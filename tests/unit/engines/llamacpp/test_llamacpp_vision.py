"""The demo vision pair loads in the installed libmtmd and sees images; decoding and limits."""

from __future__ import annotations

import asyncio
import io
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import llama_cpp
import pytest
from PIL import Image

from engine_events import checked_reply, engine_events
from sluicegate.core.errors import SluicegateError
from sluicegate.core.events import TextDelta
from sluicegate.core.images import ImageLimits, Picture, data_url_bytes, decode_image
from sluicegate.core.request import ChatRequest, ContentPart, Message, SamplingParams
from sluicegate.demo.vision import IMAGE_TOKENS, make_demo_vision, projector_path
from sluicegate.engines.llamacpp.engine import LlamaCppEngine
from sluicegate.engines.llamacpp.runtime import Job, LlamaRuntime
from sluicegate.engines.llamacpp.vision import MARKER, ImageSpan, MediaPrompt, find_projector
from sluicegate.parsing import OutputParser


def encoded(color: object, fmt: str = "PNG", size: tuple[int, int] = (40, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, fmt)  # type: ignore[arg-type]
    return out.getvalue()


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> LlamaRuntime:
    model = tmp_path_factory.mktemp("vision") / "eye.gguf"
    mmproj = make_demo_vision(model, ends_replies=False)
    assert mmproj == projector_path(model) and find_projector(model) == mmproj
    return LlamaRuntime(
        model,
        context_length=512,
        n_gpu_layers=0,
        threads=2,
        batch_size=8,  # the text around the image takes several batches
        flash_attention=None,
        on_progress=lambda _: None,
        mmproj=mmproj,
    )


def reply(runtime: LlamaRuntime, picture: Picture) -> tuple[str, int, int]:
    events: list[object] = []
    job = Job(
        tokens=[],
        sampling=SamplingParams(temperature=0, max_tokens=12),
        seed=0,
        parser=OutputParser(reasoning=None),
        emit=events.extend,
        tokens_key=("test", ()),
        pictures=[picture],
    )
    job.tokens = runtime.prompt_tokens(
        job, f"<|im_start|>user\nLook: {MARKER} ok?<|im_end|>\n<|im_start|>assistant\n"
    )
    try:
        runtime.generate(job)
    finally:
        job.free()
    text = "".join(str(getattr(e, "text", "")) for e in events)
    return text, job.usage.prompt_tokens, job.usage.cached_tokens


def test_libmtmd_loads_the_demo_projector_and_the_image_matters(runtime: LlamaRuntime) -> None:
    red = decode_image(encoded((220, 10, 10)), ImageLimits())
    blue = decode_image(encoded((10, 10, 220)), ImageLimits())
    first, prompt_tokens, cached = reply(runtime, red)
    assert cached == 0 and first
    text_only = len(runtime.tokenize("<|im_start|>user\nLook:  ok?<|im_end|>\n<|im_start|>assistant\n"))
    assert prompt_tokens >= text_only + IMAGE_TOKENS - 1  # the image's 16 positions
    again, _, cached = reply(runtime, red)
    assert again == first and cached == prompt_tokens - 1  # all reused, the image too
    other, _, cached = reply(runtime, blue)
    assert other != first and cached < prompt_tokens - IMAGE_TOKENS  # a new image: decoded anew


def _os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _until(condition: Callable[[], bool], seconds: float = 30) -> bool:
    """Whether `condition` holds within `seconds` (a thread's exit is not observable otherwise)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_the_encoder_thread_ends_with_its_last_image(runtime: LlamaRuntime) -> None:
    """The encoder's thread, and the OpenMP pool it starts, end once no image is left: while
    they live, libgomp counts more OpenMP threads than CPUs and makes every team in the
    process, the decode's too, sleep at its barriers instead of spinning (vision.py)."""
    projector = runtime.projector
    assert projector is not None
    before = _os_threads()
    spans: list[ImageSpan] = []
    medias = []
    for color in ((200, 30, 30), (30, 200, 30)):  # two images: one thread takes both in turn
        media = projector.tokenize(f"Look: {MARKER} ok?", [decode_image(encoded(color), ImageLimits())])
        medias.append(media)
        spans.extend(media.images.values())
    ended = threading.Semaphore(0)
    try:
        for span in spans:
            projector.encode_soon(span, runtime.n_embd, ended.release)
        for _ in spans:
            assert ended.acquire(timeout=120)
        for span in spans:
            assert span.encoding is not None
            span.encoding.result()
            assert span.embeddings is not None and span.embeddings.shape == (IMAGE_TOKENS, runtime.n_embd)
        assert _until(lambda: not any(t.name.startswith("mtmd-encoder") for t in threading.enumerate()))
        assert _until(lambda: _os_threads() <= before)  # its OpenMP pool thread is gone too
        # And the next image starts a thread again.
        spans[0].embeddings = None
        projector.encode_soon(spans[0], runtime.n_embd, ended.release)
        assert ended.acquire(timeout=120) and spans[0].embeddings is not None
    finally:
        for media in medias:
            media.free()


def test_a_cached_prefix_never_ends_inside_an_image() -> None:
    media = MediaPrompt([1, 2, -5, -5, -5, -5, 3], {2: ImageSpan(None, 4, 4)})
    assert [media.snap(k) for k in (1, 2, 3, 5, 6, 7)] == [1, 2, 2, 2, 6, 7]
    assert media.next_image(0) == 2 and media.next_image(3) is None


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "GIF"])
def test_formats_decode_to_rgb(fmt: str) -> None:
    picture = decode_image(encoded((0, 128, 255), fmt), ImageLimits())
    assert (picture.width, picture.height) == (40, 30) and len(picture.rgb) == 40 * 30 * 3
    assert decode_image(encoded((0, 128, 255), fmt), ImageLimits()).digest == picture.digest


def test_limits_and_broken_images_are_400s() -> None:
    with pytest.raises(SluicegateError) as caught:
        decode_image(encoded(0, size=(100, 100)), ImageLimits(max_pixels=9_999))
    assert caught.value.info.code == "image_too_large"
    with pytest.raises(SluicegateError) as caught:
        decode_image(encoded(0), ImageLimits(max_bytes=10))
    assert caught.value.info.code == "image_too_large"
    for broken in (b"not an image", encoded(0)[:40]):
        with pytest.raises(SluicegateError) as caught:
            decode_image(broken, ImageLimits())
        assert caught.value.info.code == "invalid_image"
    with pytest.raises(SluicegateError):
        data_url_bytes("data:image/png;base64,***")
    assert data_url_bytes("data:image/png;base64,aGk=") == b"hi"


def test_find_projector_prefers_the_one_named_after_the_model(tmp_path: Path) -> None:
    model = tmp_path / "model-Q4.gguf"
    model.write_bytes(b"")
    assert find_projector(model) is None
    (tmp_path / "mmproj-other.gguf").write_bytes(b"")
    (tmp_path / "mmproj-model-Q4-f16.gguf").write_bytes(b"")
    assert find_projector(model) == tmp_path / "mmproj-model-Q4-f16.gguf"


# --- the engine, batched and not ------------------------------------------------------------


def _image_request(picture: Picture) -> ChatRequest:
    part = ContentPart("image", image_url="data:image/png;base64,")
    part.picture = picture
    return ChatRequest(
        model="eye",
        messages=[Message("user", [ContentPart("text", text="What is it?"), part])],
        sampling=SamplingParams(temperature=0.0, max_tokens=10),
    )


async def test_the_scheduler_decodes_an_image_a_prompt_chunk_at_a_time(tmp_path: Path) -> None:
    model = tmp_path / "eye.gguf"
    make_demo_vision(model, ends_replies=False)
    table = {"id": "eye", "engine": "llamacpp", "path": str(model), "context_length": 512}
    single = LlamaCppEngine.from_config({**table, "batching": False}, tmp_path)
    batched = LlamaCppEngine.from_config({**table, "parallel": 2}, tmp_path)
    red = decode_image(encoded((220, 10, 10)), ImageLimits())
    try:
        for engine in (single, batched):
            await engine.load(lambda _: None)
        scheduler = batched._scheduler
        assert scheduler is not None
        scheduler.prefill_chunk = 4  # the image's 16 embeddings: 4 steps, after the encoder's
        runtime = batched._runtime
        assert runtime is not None
        parts: list[tuple[int, int]] = []
        decode_part = runtime.decode_image_part

        def noted(span: Any, *, done: int, count: int, position: int, seq_id: int) -> None:
            parts.append((done, count))
            decode_part(span, done=done, count=count, position=position, seq_id=seq_id)

        runtime.decode_image_part = noted
        expected, usage = await checked_reply(single, _image_request(red))
        text, batched_usage = await checked_reply(batched, _image_request(red))
        assert text == expected and batched_usage.prompt_tokens == usage.prompt_tokens
        assert parts == [(0, 4), (4, 4), (8, 4), (12, 4)]  # one prompt chunk a step
        again, cached = await checked_reply(batched, _image_request(red))
        assert again == expected and cached.cached_tokens == usage.prompt_tokens - 1
    finally:
        for engine in (single, batched):
            await engine.aclose()


async def test_other_sequences_decode_while_an_image_is_encoded(tmp_path: Path) -> None:
    """The encoder runs beside the decode loop: held at work on an image, a text request still
    runs to its end; released, the image's reply is the one it gets alone."""
    model = tmp_path / "eye.gguf"
    make_demo_vision(model, ends_replies=False)
    table = {"id": "eye", "engine": "llamacpp", "path": str(model), "context_length": 512, "parallel": 2}
    engine = LlamaCppEngine.from_config(table, tmp_path)
    blue = decode_image(encoded((10, 10, 220)), ImageLimits())
    try:
        await engine.load(lambda _: None)
        alone, _ = await checked_reply(engine, _image_request(blue))
        runtime = engine._runtime
        assert runtime is not None and runtime.projector is not None
        projector = runtime.projector
        encode = projector.encode
        started, held = threading.Event(), threading.Event()
        waited_out: list[bool] = []

        def held_encode(span: Any, n_embd: int) -> None:
            started.set()
            waited_out.append(not held.wait(120))  # True: nothing released it (the others waited)
            encode(span, n_embd)

        projector.encode = held_encode  # type: ignore[method-assign]
        green = decode_image(encoded((10, 220, 10)), ImageLimits())  # not cached: encoded again
        image = asyncio.ensure_future(checked_reply(engine, _image_request(green)))
        assert await asyncio.to_thread(started.wait, 120)
        text_request = ChatRequest(
            model="eye",
            messages=[Message("user", "Talk a little.")],
            sampling=SamplingParams(temperature=0.0, max_tokens=12),
        )
        _, usage = await checked_reply(engine, text_request)
        held.set()
        assert usage.completion_tokens > 0
        await image
        assert waited_out == [False]  # the text request ended while the encoder was held
        projector.encode = encode  # type: ignore[method-assign]
        again, _ = await checked_reply(engine, _image_request(blue))
        assert again == alone
    finally:
        await engine.aclose()


async def test_the_text_after_an_image_goes_in_the_step_of_its_last_piece(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The image's last embeddings are decoded at the start of a step; the text after them
    goes in that same step's batch, beside the other sequences' tokens (as in llama-server),
    not a step later with a batch of the others' tokens alone in between."""
    model = tmp_path / "eye.gguf"
    make_demo_vision(model, ends_replies=False)
    table = {"id": "eye", "engine": "llamacpp", "path": str(model), "context_length": 512, "parallel": 2}
    engine = LlamaCppEngine.from_config(table, tmp_path)
    red = decode_image(encoded((220, 10, 10)), ImageLimits())
    try:
        await engine.load(lambda _: None)
        alone, _ = await checked_reply(engine, _image_request(red))
        scheduler = engine._scheduler
        assert scheduler is not None
        decodes: list[tuple[bool, set[int]]] = []  # (embeddings?, sequence ids), every decode
        decode = llama_cpp.llama_decode

        def noted(ctx: Any, batch: Any) -> int:
            rows = range(batch.n_tokens)
            decodes.append((bool(batch.embd), {batch.seq_id[i][0] for i in rows}))
            return int(decode(ctx, batch))

        monkeypatch.setattr(llama_cpp, "llama_decode", noted)
        talk = ChatRequest(
            model="eye",
            messages=[Message("user", "Talk.")],
            sampling=SamplingParams(temperature=0, max_tokens=400),
        )
        engine.check(talk)
        stream = engine_events(engine, talk)
        async for event in stream:  # decoding, one token a step, in its slot
            if isinstance(event, TextDelta):
                break
        talking = next(s.id for s in scheduler.slots if s.sequence is not None)
        try:
            # The same pixels under another digest: not cached, so encoded and decoded again.
            text, _ = await checked_reply(engine, _image_request(replace(red, digest="f" * 64)))
        finally:
            await stream.aclose()
        assert text == alone
        last = max(i for i, (embeddings, _) in enumerate(decodes) if embeddings)
        image_slot = next(iter(decodes[last][1]))
        assert image_slot != talking
        assert decodes[last + 1] == (False, {talking, image_slot})  # the tail beside the other's token
    finally:
        await engine.aclose()
