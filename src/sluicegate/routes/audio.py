"""OpenAI's audio endpoints (issue 45): POST /v1/audio/transcriptions, /v1/audio/translations
and /v1/audio/speech, and GET /v1/audio/voices.

A model that hears or speaks (`Engine.tasks`) runs the work itself on an admitted instance
(queued, loaded just in time, its idle clock restarted: `Model.admit_task`, `Instance.slot`); one that
relays (an `openai` upstream) hands the request on as the client sent it. Uploads are decoded in
a worker thread within `[server]`'s audio limits; a client that leaves closes the engine's stream,
which stops the engine after the window or sentence in hand.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import orjson
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Send

from sluicegate.core.audio import AudioLimits
from sluicegate.core.audio_encode import MEDIA_TYPES, Encoder
from sluicegate.core.audio_files import decode_upload
from sluicegate.core.errors import EngineFailure, ErrorKind, SluicegateError, invalid
from sluicegate.core.pipeline import unless_disconnected
from sluicegate.core.speech import Segment, Transcribed, TranscriptionRequest, TranscriptionTask, Upload
from sluicegate.dialects.openai_audio import (
    TRANSCRIPT_MEDIA_TYPES,
    TranscriptionFields,
    parse_speech_request,
    parse_transcription_fields,
    render_transcript,
    speech_delta_event,
    speech_done_event,
    transcript_delta_event,
    transcript_done_event,
    transcript_text,
)
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.engines.instances import Instance
from sluicegate.engines.models import Model
from sluicegate.routes.common import JSONResponse, app_state, dialect_endpoint, read_json
from sluicegate.routes.jobs import model_for
from sluicegate.turn.http import INSTANCE_HEADER, wait_for_disconnect
from sluicegate.turn.state import AppState

log = logging.getLogger(__name__)

FORM_SLACK = 64 * 1024  # the form's text fields and part headers, beyond the file itself
UPSTREAM_PATHS = {"transcribe": "/audio/transcriptions", "translate": "/audio/translations"}
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _limits(state: AppState) -> AudioLimits:
    s = state.settings
    return AudioLimits(s.max_audio_bytes, s.max_audio_seconds, s.max_audio_per_request)


def _sse(event: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(event) + b"\n\n"


async def _form(request: Request, limits: AudioLimits) -> Upload:
    """The multipart form's text fields and its `file`, read within the size limit."""
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise invalid("Send the audio as multipart/form-data with a 'file' field.", param="file")
    form = await _bounded_form(request, limits.max_bytes + FORM_SLACK)
    fields: dict[str, list[str]] = {}
    upload: Upload | None = None
    for key, value in form.multi_items():
        if isinstance(value, UploadFile):
            if key == "file":
                data = await value.read()
                kind = value.content_type or "application/octet-stream"
                upload = Upload(fields, value.filename or "audio", kind, data)
            await value.close()
        else:
            fields.setdefault(key, []).append(value)
    if upload is None:
        raise invalid("The form has no 'file' field.", param="file")
    return upload


async def _bounded_form(request: Request, max_bytes: int) -> Any:
    """Starlette's form parser over a body read first within `max_bytes` (a 413 past it)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise invalid(  # a 400, as OpenAI answers an oversize upload
                f"The upload is larger than this server accepts ({max_bytes} bytes with the form; "
                "max_audio_bytes).",
                param="file",
                code="audio_too_large",
            )
        chunks.append(chunk)
    body = b"".join(chunks)
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    buffered = Request(request.scope, receive)
    try:
        return await buffered.form(max_files=4, max_fields=64)
    except Exception as exc:  # starlette's multipart errors (HTTPException 400, MultiPartException)
        detail = getattr(exc, "detail", None) or getattr(exc, "message", None) or "it could not be parsed"
        raise invalid(f"Invalid multipart form: {detail}.", param="file") from None


async def _heard(
    model: Model, instance: Instance, job: TranscriptionRequest
) -> AsyncGenerator[Segment | Transcribed, None]:
    """The engine's transcript events on an admitted instance; logs how much was heard, and
    whether the client left first (the engine stops after the window in hand)."""
    heard = 0.0
    finished = False
    try:
        async with instance.slot():
            events = instance.engine.transcribe(job)
            try:
                async for event in events:
                    if isinstance(event, Segment):
                        heard = event.end
                    else:
                        finished = True
                    yield event
            finally:
                await events.aclose()  # type: ignore[attr-defined]
    finally:
        log.info(
            "transcription %s: %.1f s of %.1f s heard%s",
            model.id,
            job.seconds if finished else heard,
            job.seconds,
            "" if finished else " (stopped)",
        )


async def _transcript(model: Model, job: TranscriptionRequest) -> tuple[list[Segment], Transcribed, str]:
    instance = model.admit_task()
    segments: list[Segment] = []
    done: Transcribed | None = None
    events = _heard(model, instance, job)
    try:
        async for event in events:
            if isinstance(event, Segment):
                segments.append(event)
            else:
                done = event
    finally:
        await events.aclose()
    if done is None:
        raise SluicegateError(
            ErrorKind.ENGINE, f"model {model.id!r} ended without a transcript", code="engine_error"
        )
    return segments, done, instance.instance_id


async def _transcribe(request: Request, task: TranscriptionTask) -> Response:
    state = app_state(request)
    limits = _limits(state)
    upload = await _form(request, limits)
    fields = parse_transcription_fields(upload.fields, task)
    model = model_for(state, fields.model, "transcription")
    model.engine.check_transcription(fields.words)  # before it is queued or loaded
    relayed = model.engine.relay_audio(UPSTREAM_PATHS[task], upload)
    if relayed is not None:
        media_type = "text/event-stream" if fields.stream else TRANSCRIPT_MEDIA_TYPES[fields.response_format]
        return await _started(request, relayed, media_type, {})
    samples, seconds = await asyncio.to_thread(decode_upload, upload.data, limits)
    job = TranscriptionRequest(
        model=fields.model,
        samples=samples,
        seconds=seconds,
        task=task,
        language=fields.language,
        prompt=fields.prompt,
        temperature=fields.temperature,
        words=fields.words,
    )
    if fields.stream:
        return await _stream_transcript(request, model, job)
    try:
        segments, done, instance = await unless_disconnected(
            _transcript(model, job), lambda: wait_for_disconnect(request)
        )
    except EngineFailure as exc:  # the engine failed: its error, in OpenAI's shape (not a 500)
        raise SluicegateError(ErrorKind.ENGINE, str(exc), code=exc.code or "engine_error") from None
    return _rendered(fields, segments, done, instance)


def _rendered(
    fields: TranscriptionFields, segments: list[Segment], done: Transcribed, instance: str
) -> Response:
    body, media_type = render_transcript(fields, segments, done)
    headers = {INSTANCE_HEADER: instance} if instance else None
    if isinstance(body, dict):
        return JSONResponse(body, headers=headers)
    return Response(body, media_type=media_type, headers=headers)


async def _stream_transcript(request: Request, model: Model, job: TranscriptionRequest) -> Response:
    instance = model.admit_task()  # refused (503) now, before the status line

    async def events() -> AsyncGenerator[bytes, None]:
        parts: list[Segment] = []
        stream = _heard(model, instance, job)
        try:
            async for event in stream:
                if isinstance(event, Segment):
                    delta = event.text if parts else event.text.lstrip()
                    parts.append(event)
                    if delta:
                        yield _sse(transcript_delta_event(delta))
                else:
                    tokens = event.tokens if event.tokens is not None else sum(len(s.tokens) for s in parts)
                    yield _sse(transcript_done_event(transcript_text(parts), event, tokens))
        finally:
            await stream.aclose()

    return await _started(request, events(), "text/event-stream", {INSTANCE_HEADER: instance.instance_id})


@dialect_endpoint("audio", openai_error)
async def create_transcription(request: Request) -> Response:
    return await _transcribe(request, "transcribe")


@dialect_endpoint("audio", openai_error)
async def create_translation(request: Request) -> Response:
    return await _transcribe(request, "translate")


@dialect_endpoint("audio", openai_error)
async def create_speech(request: Request) -> Response:
    state = app_state(request)
    raw = await read_json(request, state.settings.max_body_bytes)
    fields = parse_speech_request(raw)  # the same 400s for every engine, before an upstream sees it
    model = model_for(state, fields.request.model, "speech")
    relayed = model.engine.relay_audio("/audio/speech", raw)
    if relayed is not None:
        sse_type = "text/event-stream" if fields.sse else MEDIA_TYPES[fields.response_format]
        return await _started(request, relayed, sse_type, {})
    instance = model.admit_task()
    sse = fields.sse

    async def body() -> AsyncGenerator[bytes, None]:
        async with instance.slot():
            stream = instance.engine.synthesize(fields.request)
            encoder: Encoder | None = None
            timings: list[float] = []  # the engine's own seconds per sentence, for the log
            finished = False
            stopped = " (stopped: the client left)"
            try:
                async for voiced in stream:
                    timings.append(voiced.synthesis_seconds)
                    if encoder is None:
                        encoder = Encoder(fields.response_format, voiced.sample_rate)
                    audio = await asyncio.to_thread(encoder.feed, voiced.pcm)  # CPU work: off the loop
                    if audio:
                        yield _sse(speech_delta_event(audio)) if sse else audio
                if encoder is not None and (tail := await asyncio.to_thread(encoder.finish)):
                    yield _sse(speech_delta_event(tail)) if sse else tail
                if sse:
                    yield _sse(speech_done_event(len(fields.request.input)))
                finished = True
            except Exception:
                stopped = " (stopped: the engine failed)"
                raise
            finally:
                if encoder is not None:
                    encoder.close()
                await stream.aclose()  # type: ignore[attr-defined]
                log.info(
                    "speech %s: %d sentence(s) synthesised in %s s%s",
                    model.id,
                    len(timings),
                    " + ".join(f"{t:.3f}" for t in timings) or "0",
                    "" if finished else stopped,
                )

    media_type = "text/event-stream" if sse else MEDIA_TYPES[fields.response_format]
    return await _started(request, body(), media_type, {INSTANCE_HEADER: instance.instance_id})


def _failure(exc: BaseException, path: str) -> SluicegateError:
    """An engine's or an upstream's failure as the error the client is told: its own words for
    ours, its type's name (never a stack trace) for anything else."""
    if isinstance(exc, SluicegateError):
        return exc
    if isinstance(exc, EngineFailure):
        return SluicegateError(ErrorKind.ENGINE, str(exc), code=exc.code or "engine_error")
    log.error("the answer of %s failed", path, exc_info=exc)
    return SluicegateError(ErrorKind.ENGINE, f"The engine failed: {type(exc).__name__}.", code="engine_error")


class _Answer(StreamingResponse):
    """A streamed answer whose body's end goes out only when the answer is whole. When the
    engine fails after the status line, the body stops without its end (`cut`) and the server
    closes the connection: a client reading audio or a transcript sees a cut body (an incomplete
    chunked read), never a short one that looks complete."""

    cut = False

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        async for chunk in self.body_iterator:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if not self.cut:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _started(
    request: Request, chunks: AsyncIterator[bytes], media_type: str, headers: dict[str, str]
) -> Response:
    """A streamed answer produced by a task of its own, whose first chunk is awaited before the
    status line: a load, a synthesis or an upstream that fails first is an HTTP error in OpenAI's
    shape. A failure after it ends the answer so that it cannot pass for whole: an SSE stream
    with an error event in OpenAI's shape (`{"error": {...}}`, what openai-python raises as an
    APIError), any other body by cutting the connection (`_Answer`). The response only reads
    what the producer queues (one chunk ahead); when the client leaves — seen by the watcher
    below, or by Starlette cancelling the response — the producer is cancelled once, where it
    waits, and the engine's stream closes and frees its slot."""
    queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue(maxsize=1)

    async def produce() -> None:
        try:
            async for chunk in chunks:
                if chunk:
                    await queue.put(chunk)
            await queue.put(None)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the reader reports it: before the status line, an HTTP error
            await queue.put(exc)
        finally:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()

    producer = asyncio.ensure_future(produce())
    try:
        first = await unless_disconnected(queue.get(), lambda: wait_for_disconnect(request))
    except BaseException:
        producer.cancel()
        raise
    if isinstance(first, BaseException):
        producer.cancel()
        raise _failure(first, request.url.path) from None
    sse = media_type == "text/event-stream"

    async def rest() -> AsyncIterator[bytes]:
        watcher = asyncio.ensure_future(wait_for_disconnect(request))
        try:
            item: bytes | BaseException | None = first
            while isinstance(item, bytes):
                yield item
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait({getter, watcher}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():  # the client left while the engine worked
                    getter.cancel()
                    return
                item = getter.result()
            if isinstance(item, BaseException):  # after the status line
                error = _failure(item, request.url.path)
                log.warning("the answer of %s failed mid-stream: %s", request.url.path, error.info.message)
                if sse:
                    yield _sse(openai_error(error.info))
                else:
                    response.cut = True
        finally:
            watcher.cancel()
            producer.cancel()  # no await: this may run inside a cancelled scope

    response = _Answer(rest(), media_type=media_type, headers={**SSE_HEADERS, **headers})
    return response


@dialect_endpoint("audio", openai_error)
async def list_voices(request: Request) -> Response:
    """The voices of one model (`?model=`) or of every speech model."""
    state = app_state(request)
    wanted = request.query_params.get("model")
    models = (
        [model_for(state, wanted, "speech")]
        if wanted
        else [m for m in state.registry.models.values() if "speech" in m.engine.tasks()]
    )
    data = [
        {"id": v.id, "name": v.name, "model": m.id, **({"language": v.language} if v.language else {})}
        for m in models
        for v in m.engine.voices()
    ]
    return JSONResponse({"object": "list", "data": data, "voices": [d["id"] for d in data]})


ROUTES = [
    Route("/v1/audio/transcriptions", create_transcription, methods=["POST"]),
    Route("/v1/audio/translations", create_translation, methods=["POST"]),
    Route("/v1/audio/speech", create_speech, methods=["POST"]),
    Route("/v1/audio/voices", list_voices, methods=["GET"]),
]
