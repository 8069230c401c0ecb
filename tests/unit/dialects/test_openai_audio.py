"""OpenAI's audio fields and transcript formats (issue 45)."""

from __future__ import annotations

import pytest

from sluicegate.core.errors import SluicegateError
from sluicegate.core.speech import Segment, Transcribed, Word
from sluicegate.dialects.openai_audio import (
    parse_speech_request,
    parse_transcription_fields,
    render_transcript,
    transcript_done_event,
)

SEGMENTS = [
    Segment(
        0, 0.0, 1.5, " Hello there.", [1, 2], words=[Word(" Hello", 0.0, 0.6), Word(" there.", 0.6, 1.5)]
    ),
    Segment(1, 1.5, 3725.25, " Goodbye.", [3]),
]
DONE = Transcribed("en", 3725.25)


def _fields(**extra: list[str]) -> dict[str, list[str]]:
    return {"model": ["w"], **extra}


def test_every_format() -> None:
    def render(fmt: str, **extra: list[str]) -> object:
        return render_transcript(
            parse_transcription_fields(_fields(response_format=[fmt], **extra), "transcribe"), SEGMENTS, DONE
        )[0]

    assert render("json") == {"text": "Hello there. Goodbye.", "usage": {"type": "duration", "seconds": 3726}}
    assert render("text") == "Hello there. Goodbye.\n"
    assert render("srt") == (
        "1\n00:00:00,000 --> 00:00:01,500\nHello there.\n\n2\n00:00:01,500 --> 01:02:05,250\nGoodbye.\n\n"
    )
    assert render("vtt") == (
        "WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nHello there.\n\n00:00:01.500 --> 01:02:05.250\nGoodbye.\n\n"
    )
    verbose = render("verbose_json", **{"timestamp_granularities[]": ["word"]})
    assert isinstance(verbose, dict)
    assert verbose["language"] == "english" and verbose["task"] == "transcribe" and "segments" not in verbose
    assert verbose["words"] == [
        {"word": "Hello", "start": 0.0, "end": 0.6},
        {"word": "there.", "start": 0.6, "end": 1.5},
    ]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({}, "model"),
        (_fields(response_format=["mp4"]), "response_format"),
        (_fields(temperature=["hot"]), "temperature"),
        (_fields(temperature=["1.5"]), "temperature"),
        (_fields(**{"timestamp_granularities[]": ["word"]}), "timestamp_granularities"),
        (
            _fields(response_format=["verbose_json"], **{"timestamp_granularities[]": ["char"]}),
            "timestamp_granularities",
        ),
        (_fields(language=["english please"]), "language"),
        (_fields(stream=["maybe"]), "stream"),
    ],
)
def test_bad_fields_name_themselves(fields: dict[str, list[str]], param: str) -> None:
    with pytest.raises(SluicegateError) as caught:
        parse_transcription_fields(fields, "transcribe")
    assert caught.value.info.status == 400 and caught.value.info.param == param


def test_done_event_usage_adds_up() -> None:
    usage = transcript_done_event("Hi.", Transcribed("en", 2.0), 7)["usage"]
    assert usage["type"] == "tokens" and usage["total_tokens"] == usage["input_tokens"] + 7 == 107


def test_speech_fields() -> None:
    fields = parse_speech_request(
        {"model": "p", "input": "Hi.", "voice": {"id": "v1"}, "speed": 2, "stream_format": "sse"}
    )
    assert (
        fields.request.voice == "v1"
        and fields.request.speed == 2.0
        and fields.sse
        and fields.response_format == "mp3"
    )
    for body, param in (
        ({"model": "p", "input": " "}, "input"),
        ({"model": "p", "input": "x" * 4097}, "input"),
        ({"model": "p", "input": "Hi.", "speed": True}, "speed"),
        ({"model": "p", "input": "Hi.", "response_format": "ogg"}, "response_format"),
        ({"model": "p", "input": "Hi.", "stream_format": "ws"}, "stream_format"),
    ):
        with pytest.raises(SluicegateError) as caught:
            parse_speech_request(body)
        assert caught.value.info.param == param


def test_pieces_of_one_segment_are_rendered_as_one() -> None:
    """A chat model's deltas share their segment's id: one segment in every format."""
    pieces = [
        Segment(0, 0.0, 2.0, " Hel", [1]),
        Segment(0, 0.0, 2.0, "lo", [2]),
        Segment(1, 2.0, 3.0, " Bye", []),
    ]
    fields = parse_transcription_fields(_fields(response_format=["verbose_json"]), "transcribe")
    body, _ = render_transcript(fields, pieces, Transcribed("en", 3.0))
    assert isinstance(body, dict) and body["text"] == "Hello Bye"
    assert [(s["id"], s["text"], s["tokens"]) for s in body["segments"]] == [
        (0, " Hello", [1, 2]),
        (1, " Bye", []),
    ]
    srt, _ = render_transcript(
        parse_transcription_fields(_fields(response_format=["srt"]), "transcribe"), pieces, DONE
    )
    assert srt == "1\n00:00:00,000 --> 00:00:02,000\nHello\n\n2\n00:00:02,000 --> 00:00:03,000\nBye\n\n"
