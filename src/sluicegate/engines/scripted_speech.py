"""The scripted engine's speech tasks (`tasks = ["transcription", "speech"]`): a script's reply
heard or spoken a word at a time, with its pacing and its `error_after_deltas`, so a client
(or a test) sees a transcript or a voice fail mid-stream on demand (issue 45).

The reply is picked as for a chat whose user message is the transcription's `prompt` or the
speech's `input` (`when: {user_contains: ...}` chooses it). A transcript's segment is a word,
half a second of the clip each; a voice's sentence is a word, a tenth of a second of a tone.
"""

from __future__ import annotations

import asyncio
import math
import struct
from collections.abc import AsyncIterator

from sluicegate.core.errors import EngineFailure
from sluicegate.core.request import ChatRequest, Message
from sluicegate.core.speech import (
    Segment,
    SpeechRequest,
    Transcribed,
    TranscriptEvent,
    TranscriptionRequest,
    Voiced,
)

WORD_SECONDS = 0.5  # how much of the clip a scripted word "hears"
TONE_RATE = 16_000
TONE_SECONDS = 0.1  # what a scripted word "says": a 440 Hz tone
_TONE = b"".join(
    struct.pack("<h", round(8000 * math.sin(2 * math.pi * 440 * i / TONE_RATE)))
    for i in range(round(TONE_RATE * TONE_SECONDS))
)


class ScriptedReply:
    """What the speech tasks need of a picked reply: its words, pacing and failure."""

    __slots__ = ("error_after", "error_code", "error_message", "token_delay", "words")

    def __init__(
        self,
        words: list[str],
        token_delay: float,
        error_after: int | None,
        error_message: str | None,
        error_code: str | None,
    ) -> None:
        self.words = words
        self.token_delay = token_delay
        self.error_after = error_after
        self.error_message = error_message
        self.error_code = error_code

    def fail_at(self, count: int) -> None:
        if self.error_after is not None and count >= self.error_after:
            raise EngineFailure(
                self.error_message or f"scripted failure after {count} deltas",
                code=self.error_code or "scripted_failure",
            )


def as_chat(model: str, text: str) -> ChatRequest:
    """The chat a speech request is matched as: one user message."""
    return ChatRequest(model=model, messages=[Message(role="user", content=text)])


async def scripted_transcript(
    reply: ScriptedReply, request: TranscriptionRequest
) -> AsyncIterator[TranscriptEvent]:
    for count, word in enumerate(reply.words):
        reply.fail_at(count)
        await asyncio.sleep(reply.token_delay if count else 0)  # a turn of the loop per word
        start = min(count * WORD_SECONDS, request.seconds)
        end = min(start + WORD_SECONDS, request.seconds)
        yield Segment(id=count, start=start, end=end, text=word, tokens=[count])
    yield Transcribed(request.language or "en", request.seconds)


async def scripted_voice(reply: ScriptedReply, request: SpeechRequest) -> AsyncIterator[Voiced]:
    for count, word in enumerate(reply.words):
        reply.fail_at(count)
        await asyncio.sleep(reply.token_delay if count else 0)
        yield Voiced(_TONE, TONE_RATE, word)
