"""Transcription by a chat model that hears (a llama.cpp model whose projector has an audio
encoder: Ultravox, Qwen2-Audio, Voxtral...), for `POST /v1/audio/transcriptions` (issue 45).

The clip goes to the model as Chat's audio input, a float WAV of the decoded samples, with an
instruction to write down (or translate) what is said; the answer's text is the transcript. Such
a model has no timestamps of its own: its whole answer is one segment spanning the clip, sent as
pieces that share the segment's id (the stream's deltas; `render_transcript` joins them), and
word timestamps are refused before the model is queued or loaded.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import AsyncIterator

from sluicegate.core.audio import Sound
from sluicegate.core.checks import off_loop
from sluicegate.core.errors import invalid
from sluicegate.core.events import ItemKind, RawBatch, RawEvent, TextDelta, UsageReport
from sluicegate.core.request import ChatRequest, ContentPart, Message, SamplingParams
from sluicegate.core.speech import (
    SAMPLE_RATE,
    Segment,
    Transcribed,
    TranscriptEvent,
    TranscriptionRequest,
)
from sluicegate.engines.base import Engine

INSTRUCTIONS = {
    "transcribe": "Transcribe the speech in this audio. Answer with the words spoken and nothing else.",
    "translate": (
        "Translate the speech in this audio into English. Answer with the English translation "
        "and nothing else."
    ),
}
TOKENS_PER_WINDOW = 448  # Whisper's own bound on the text of a 30-second window
UNKNOWN_LANGUAGE = "unknown"  # what verbose_json says when none was asked for: the model tells none


def check_heard(model_id: str, words: bool) -> None:
    """What a chat model cannot give: word timestamps (a 400 before it is queued or loaded)."""
    if words:
        raise invalid(
            f"Model {model_id!r} hears audio through a chat model's projector and has no word "
            "timestamps; ask for timestamp_granularities 'segment' (its whole answer is one "
            "segment), or use a Whisper model.",
            param="timestamp_granularities",
            code="unsupported_parameter",
        )


def float_wav(samples: bytes) -> bytes:
    """16 kHz mono float32 samples as a WAV file (IEEE float): no conversion, no loss."""
    fmt = struct.pack("<HHIIHH", 3, 1, SAMPLE_RATE, SAMPLE_RATE * 4, 4, 32)
    header = b"WAVEfmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(samples))
    return b"RIFF" + struct.pack("<I", len(header) + len(samples)) + header + samples


def transcription_chat(model_id: str, request: TranscriptionRequest) -> ChatRequest:
    """The chat that asks the model to transcribe (or translate) the clip."""
    text = INSTRUCTIONS[request.task]
    if request.language and request.task == "transcribe":
        text += f" The speech is in the language with ISO-639-1 code '{request.language}'."
    if request.prompt:  # OpenAI's `prompt`: earlier words, names, spelling to follow
        text += f"\n\nContext for the spelling of names and words: {request.prompt}"
    wav = float_wav(request.samples)
    audio = ContentPart(type="audio", audio_format="wav")
    audio.sound = Sound(wav, "wav", request.seconds, hashlib.sha256(wav).hexdigest())
    windows = max(1, math.ceil(request.seconds / 30))
    return ChatRequest(
        model=model_id,
        messages=[Message(role="user", content=[ContentPart(type="text", text=text), audio])],
        sampling=SamplingParams(temperature=request.temperature, max_tokens=TOKENS_PER_WINDOW * windows),
    )


def _flat(event: RawEvent) -> list[RawEvent]:
    return event.events if isinstance(event, RawBatch) else [event]


async def heard_transcript(engine: Engine, request: TranscriptionRequest) -> AsyncIterator[TranscriptEvent]:
    """The model's answer as pieces of one segment, then the end; closing this stops the model."""
    check_heard(engine.model_id, request.words)
    chat = transcription_chat(engine.model_id, request)
    if engine.heavy_checks:  # the prompt through the projector: not on the event loop
        await off_loop(lambda: engine.check(chat))
    else:
        engine.check(chat)
    events = engine.generate(chat)
    tokens = 0
    try:
        async for batch in events:
            for event in _flat(batch):
                if type(event) is TextDelta and event.channel is ItemKind.MESSAGE and event.text:
                    yield Segment(id=0, start=0.0, end=request.seconds, text=event.text)
                elif type(event) is UsageReport:
                    tokens = event.usage.completion_tokens
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()
    yield Transcribed(request.language or UNKNOWN_LANGUAGE, request.seconds, tokens)
