"""OpenAI's audio API (issue 45): the fields of a transcription or translation upload and of a
speech request, checked into our own requests; transcripts rendered in every `response_format`;
the SSE events of both streams (`transcript.text.*`, `speech.audio.*`).

Field names and event shapes follow openai-python's types (`types/audio/`): what the official
SDK sends and parses. Unknown fields are ignored; a bad value is a 400 naming its field.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from sluicegate.core.audio_encode import FORMATS as SPEECH_FORMATS
from sluicegate.core.audio_encode import SpeechFormat
from sluicegate.core.errors import invalid
from sluicegate.core.speech import Segment, SpeechRequest, Transcribed, TranscriptionTask, Word

TranscriptFormat = Literal["json", "text", "srt", "verbose_json", "vtt"]
TRANSCRIPT_FORMATS: tuple[TranscriptFormat, ...] = ("json", "text", "srt", "verbose_json", "vtt")
TRANSCRIPT_MEDIA_TYPES: dict[str, str] = {
    "json": "application/json",
    "verbose_json": "application/json",
    "text": "text/plain; charset=utf-8",
    "srt": "text/plain; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
}
MAX_SPEECH_INPUT = 4096  # characters, as OpenAI's speech endpoint takes
# Whisper's encoder hears 50 positions a second (1500 per 30 s window): the usage's audio tokens.
AUDIO_TOKENS_PER_SECOND = 50

# Whisper's language names for the codes it reports, as OpenAI's verbose_json says them.
LANGUAGE_NAMES = {
    "en": "english", "de": "german", "es": "spanish", "fr": "french", "it": "italian",
    "pt": "portuguese", "nl": "dutch", "ru": "russian", "zh": "chinese", "ja": "japanese",
    "ko": "korean", "pl": "polish", "tr": "turkish", "sv": "swedish", "ar": "arabic",
    "hi": "hindi", "uk": "ukrainian", "cs": "czech", "fi": "finnish", "da": "danish",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class TranscriptionFields:
    """A transcription or translation upload's fields (the file itself comes separately)."""

    model: str
    task: TranscriptionTask
    response_format: TranscriptFormat
    language: str | None
    prompt: str | None
    temperature: float
    words: bool  # `timestamp_granularities[]` includes `word`
    segments: bool  # ... includes `segment` (the default)
    stream: bool


def _one(fields: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = fields.get(name)
    return values[-1] if values else None


def _flag(value: str | None, name: str) -> bool:
    if value is None or value.lower() in ("false", "0", ""):
        return False
    if value.lower() in ("true", "1"):
        return True
    raise invalid(f"'{name}' must be true or false, not {value!r}.", param=name)


def parse_transcription_fields(
    fields: Mapping[str, Sequence[str]], task: TranscriptionTask
) -> TranscriptionFields:
    """The form's text fields (each with all its values, in order) → checked fields."""
    model = _one(fields, "model")
    if not model:
        raise invalid("you must provide a model parameter", param="model")
    fmt = _one(fields, "response_format") or "json"
    if fmt not in TRANSCRIPT_FORMATS:
        raise invalid(
            f"response_format {fmt!r} is not one of {', '.join(TRANSCRIPT_FORMATS)}.",
            param="response_format",
        )
    temperature_text = _one(fields, "temperature")
    try:
        temperature = float(temperature_text) if temperature_text else 0.0
    except ValueError:
        raise invalid("'temperature' must be a number.", param="temperature") from None
    if not 0.0 <= temperature <= 1.0 or math.isnan(temperature):
        raise invalid("'temperature' must be between 0 and 1.", param="temperature")
    granularities = [*fields.get("timestamp_granularities[]", ()), *fields.get("timestamp_granularities", ())]
    for granularity in granularities:
        if granularity not in ("word", "segment"):
            raise invalid(
                f"timestamp_granularities {granularity!r} is not 'word' or 'segment'.",
                param="timestamp_granularities",
            )
    if granularities and fmt != "verbose_json":
        raise invalid(
            "timestamp_granularities needs response_format 'verbose_json'.", param="timestamp_granularities"
        )
    language = _one(fields, "language") or None
    if task == "translate":
        language = None  # a translation hears any language and speaks English
    elif language is not None and not (language.isascii() and language.isalpha() and 2 <= len(language) <= 3):
        raise invalid(f"language {language!r} is not an ISO-639-1 code such as 'en'.", param="language")
    stream = _flag(_one(fields, "stream"), "stream")
    return TranscriptionFields(
        model=model,
        task=task,
        response_format=fmt,  # checked above
        language=language.lower() if language else None,
        prompt=_one(fields, "prompt") or None,
        temperature=temperature,
        words="word" in granularities,
        segments="segment" in granularities or not granularities,
        stream=stream,
    )


def transcript_text(segments: Sequence[Segment]) -> str:
    return "".join(s.text for s in segments).strip()


def _usage_duration(seconds: float) -> dict[str, Any]:
    return {"type": "duration", "seconds": math.ceil(seconds)}


def _stamp(seconds: float, sep: str) -> str:
    millis = round(seconds * 1000)
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{sep}{millis:03d}"


def _segment_body(s: Segment) -> dict[str, Any]:
    return {
        "id": s.id,
        "seek": s.seek,
        "start": s.start,
        "end": s.end,
        "text": s.text,
        "tokens": s.tokens,
        "temperature": s.temperature,
        "avg_logprob": s.avg_logprob,
        "compression_ratio": s.compression_ratio,
        "no_speech_prob": s.no_speech_prob,
    }


def _word_body(w: Word) -> dict[str, Any]:
    return {"word": w.word.strip(), "start": w.start, "end": w.end}


def whole_segments(segments: Sequence[Segment]) -> list[Segment]:
    """Pieces of one segment (consecutive, the same id: a chat model's deltas) joined into it."""
    joined: list[Segment] = []
    for s in segments:
        if joined and joined[-1].id == s.id:
            last = joined[-1]
            s = replace(
                last, text=last.text + s.text, tokens=last.tokens + s.tokens, end=max(last.end, s.end)
            )
            joined[-1] = s
        else:
            joined.append(s)
    return joined


def render_transcript(
    fields: TranscriptionFields, pieces: Sequence[Segment], done: Transcribed
) -> tuple[str | dict[str, Any], str]:
    """The body in the asked `response_format` (a dict is JSON) and its media type."""
    segments = whole_segments(pieces)
    text = transcript_text(segments)
    fmt = fields.response_format
    if fmt == "json":
        return {"text": text, "usage": _usage_duration(done.duration)}, "application/json"
    if fmt == "text":
        return text + "\n", "text/plain; charset=utf-8"
    if fmt == "srt":
        blocks = [
            f"{i}\n{_stamp(s.start, ',')} --> {_stamp(s.end, ',')}\n{s.text.strip()}\n"
            for i, s in enumerate(segments, 1)
        ]
        return "\n".join(blocks) + ("\n" if blocks else ""), "text/plain; charset=utf-8"
    if fmt == "vtt":
        blocks = [f"{_stamp(s.start, '.')} --> {_stamp(s.end, '.')}\n{s.text.strip()}\n" for s in segments]
        return "WEBVTT\n\n" + "\n".join(blocks) + ("\n" if blocks else ""), "text/vtt; charset=utf-8"
    body: dict[str, Any] = {
        "task": fields.task,
        "language": LANGUAGE_NAMES.get(done.language, done.language),
        "duration": done.duration,
        "text": text,
    }
    if fields.segments:
        body["segments"] = [_segment_body(s) for s in segments]
    if fields.words:
        body["words"] = [_word_body(w) for s in segments for w in s.words]
    body["usage"] = _usage_duration(done.duration)
    return body, "application/json"


def transcript_delta_event(delta: str) -> dict[str, Any]:
    return {"type": "transcript.text.delta", "delta": delta}


def transcript_done_event(text: str, done: Transcribed, output_tokens: int) -> dict[str, Any]:
    audio_tokens = math.ceil(done.duration * AUDIO_TOKENS_PER_SECOND)
    return {
        "type": "transcript.text.done",
        "text": text,
        "usage": {
            "type": "tokens",
            "input_tokens": audio_tokens,
            "input_token_details": {"audio_tokens": audio_tokens, "text_tokens": 0},
            "output_tokens": output_tokens,
            "total_tokens": audio_tokens + output_tokens,
        },
    }


# --- speech -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SpeechFields:
    request: SpeechRequest
    response_format: SpeechFormat
    sse: bool  # `stream_format: "sse"`; otherwise the audio itself, chunked


def parse_speech_request(body: Any) -> SpeechFields:
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("you must provide a model parameter", param="model")
    text = body.get("input")
    if not isinstance(text, str) or not text.strip():
        raise invalid("'input' must be a non-empty string.", param="input")
    if len(text) > MAX_SPEECH_INPUT:
        raise invalid(f"'input' is longer than {MAX_SPEECH_INPUT} characters.", param="input")
    voice = body.get("voice")
    if isinstance(voice, dict):  # a custom voice object: {"id": ...}
        voice = voice.get("id")
    if voice is not None and not isinstance(voice, str):
        raise invalid("'voice' must be a string (or an object with an 'id').", param="voice")
    fmt = body.get("response_format", "mp3")
    if fmt not in SPEECH_FORMATS:
        raise invalid(
            f"response_format {fmt!r} is not one of {', '.join(SPEECH_FORMATS)}.", param="response_format"
        )
    speed = body.get("speed", 1.0)
    if isinstance(speed, bool) or not isinstance(speed, int | float) or not 0.25 <= speed <= 4.0:
        raise invalid("'speed' must be a number from 0.25 to 4.0.", param="speed")
    stream_format = body.get("stream_format", "audio")
    if stream_format not in ("audio", "sse"):
        raise invalid("stream_format must be 'audio' or 'sse'.", param="stream_format")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise invalid("'instructions' must be a string.", param="instructions")
    return SpeechFields(
        SpeechRequest(model, text, voice or None, float(speed), instructions or None),
        fmt,
        stream_format == "sse",
    )


def speech_delta_event(audio: bytes) -> dict[str, Any]:
    return {"type": "speech.audio.delta", "audio": base64.b64encode(audio).decode("ascii")}


def speech_done_event(input_chars: int) -> dict[str, Any]:
    # A local voice counts no tokens; the input's characters stand for them, no output tokens.
    return {
        "type": "speech.audio.done",
        "usage": {"input_tokens": input_chars, "output_tokens": 0, "total_tokens": input_chars},
    }
