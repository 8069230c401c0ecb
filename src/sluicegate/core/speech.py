"""Speech requests and what engines answer them with, in our own terms (issue 45).

A transcription engine gets decoded samples (16 kHz mono, 32-bit float, little-endian: what
Whisper hears) and yields `Segment`s as it recognises them, then one `Transcribed`. A speech
engine gets text and yields one `Voiced` per sentence as soon as it is synthesised, so the
route can start sending audio before the rest of the text is spoken. Dialects render these in
OpenAI's shapes (`dialects/openai_audio.py`); engines know nothing of HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

SAMPLE_RATE = 16000  # what transcription engines are given: 16 kHz mono float32

TranscriptionTask = Literal["transcribe", "translate"]


@dataclass(frozen=True, slots=True)
class TranscriptionRequest:
    model: str
    samples: bytes  # 16 kHz mono float32 (little-endian), decoded within the server's limits
    seconds: float  # how long they play
    task: TranscriptionTask = "transcribe"  # translate: into English
    language: str | None = None  # ISO-639-1; None: detected
    prompt: str | None = None
    temperature: float = 0.0
    words: bool = False  # word timestamps asked for (`timestamp_granularities[]=word`)


@dataclass(frozen=True, slots=True)
class Word:
    word: str
    start: float
    end: float
    probability: float = 1.0


@dataclass(frozen=True, slots=True)
class Segment:
    """One stretch of recognised speech, as Whisper segments it."""

    id: int
    start: float
    end: float
    text: str
    tokens: list[int] = field(default_factory=list)
    temperature: float = 0.0
    avg_logprob: float = 0.0
    compression_ratio: float = 0.0
    no_speech_prob: float = 0.0
    seek: int = 0
    words: list[Word] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Transcribed:
    """The end of a transcription: the language heard (or asked for) and the audio's length."""

    language: str
    duration: float
    tokens: int | None = None  # text tokens decoded, when segments do not carry them (a chat model)


TranscriptEvent = Segment | Transcribed


@dataclass(frozen=True, slots=True)
class Voice:
    """A voice a speech model has (GET /v1/audio/voices)."""

    id: str
    name: str
    language: str | None = None


@dataclass(frozen=True, slots=True)
class SpeechRequest:
    model: str
    input: str
    voice: str | None = None  # a voice of the model's; None or unknown: its default voice
    speed: float = 1.0  # 0.25 .. 4.0
    instructions: str | None = None


@dataclass(frozen=True, slots=True)
class Voiced:
    """One sentence spoken: 16-bit signed little-endian mono PCM at `sample_rate`, and how long
    the engine took to synthesise it (what shows that streaming starts before the end)."""

    pcm: bytes
    sample_rate: int
    text: str = ""
    synthesis_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Upload:
    """A transcription form as the client sent it, for an engine that hands it on (an upstream):
    its text fields (each with all its values, in order) and its file."""

    fields: dict[str, list[str]]
    filename: str
    content_type: str
    data: bytes
