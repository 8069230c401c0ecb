"""An engine that fails mid-transcription or mid-speech, after the first events or bytes went
out: the answer ends so that no client can take it for whole — an SSE stream with an error event
in OpenAI's shape (the official SDK raises it), an audio body cut short of its end (an incomplete
chunked read) — and the model is free again afterwards (issue 45).

The scripted engine injects the faults: `failures.yaml` picks a reply by the request's
transcription `prompt` or speech `input`; "fail-mid" fails after three words, "fail-first"
before any.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import httpx
import openai
import pytest
from conftest import StartServer
from e2e_support import Server, metric, poll, scripted

from audio_support import tone_wav

pytestmark = pytest.mark.e2e

MODEL = "ears"
CLIP = ("tone.wav", tone_wav(440.0, seconds=3.0, rate=16_000))


@pytest.fixture(scope="module")
def server(start_server: StartServer) -> Server:
    pytest.importorskip("av")  # the upload's decoder
    return start_server({}, [{**scripted(MODEL, "failures.yaml"), "tasks": ["transcription", "speech"]}])


@pytest.fixture
def sdk(server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0, timeout=60.0) as client:
        yield client


def _free(server: Server) -> None:
    poll(
        lambda: metric(server.base_url, "sluicegate_generations_active", MODEL) == 0, timeout=30.0, fail=True
    )


def test_a_transcript_stream_that_fails_ends_with_an_error_event(sdk: openai.OpenAI, server: Server) -> None:
    stream = sdk.audio.transcriptions.create(model=MODEL, file=CLIP, prompt="fail-mid", stream=True)
    deltas: list[str] = []
    with pytest.raises(openai.APIError) as caught:
        for event in stream:
            assert event.type == "transcript.text.delta", event  # never a done event
            deltas.append(event.delta)
    assert "".join(deltas) == "one two three"
    assert caught.value.message == "failed mid-answer"
    assert caught.value.body == {  # OpenAI's error object, as in a chat stream
        "message": "failed mid-answer",
        "type": "api_error",
        "param": None,
        "code": "scripted_failure",
    }
    _free(server)
    whole = sdk.audio.transcriptions.create(model=MODEL, file=CLIP, prompt="fine", stream=True)
    events = list(whole)
    assert events[-1].type == "transcript.text.done" and events[-1].text == "All good."


def test_a_transcription_that_fails_is_an_error_not_a_short_text(sdk: openai.OpenAI, server: Server) -> None:
    for fmt in ("json", "text", "srt", "verbose_json"):
        with pytest.raises(openai.InternalServerError) as caught:
            sdk.audio.transcriptions.create(model=MODEL, file=CLIP, prompt="fail-mid", response_format=fmt)
        assert caught.value.code == "scripted_failure" and caught.value.message.endswith(
            "- failed mid-answer"
        )
    # Before the first event: the status line says it (no 200 with an error inside).
    with pytest.raises(openai.InternalServerError):
        sdk.audio.transcriptions.create(model=MODEL, file=CLIP, prompt="fail-first", stream=True)
    _free(server)


def _speech(http: httpx.Client, text: str, **extra: str) -> httpx.Response:
    body = {"model": MODEL, "input": text, "response_format": "pcm", **extra}
    return http.post("/v1/audio/speech", json=body)


def test_speech_events_that_fail_end_with_an_error_event(server: Server) -> None:
    with httpx.Client(base_url=server.base_url, timeout=60.0) as http:
        response = _speech(http, "fail-mid", stream_format="sse")
    assert response.status_code == 200
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    *deltas, last = events
    assert [e["type"] for e in deltas] == ["speech.audio.delta"] * 3
    assert all(base64.b64decode(e["audio"]) for e in deltas)
    assert last == {
        "error": {
            "message": "failed mid-answer",
            "type": "api_error",
            "param": None,
            "code": "scripted_failure",
        }
    }
    _free(server)


def test_speech_audio_that_fails_is_cut_not_ended(server: Server) -> None:
    with httpx.Client(base_url=server.base_url, timeout=60.0) as http:
        whole = _speech(http, "fine")  # the same audio, whole, reads to its end
        assert whole.status_code == 200 and len(whole.content) > 0
        received = b""
        with (
            pytest.raises(httpx.RemoteProtocolError),
            http.stream(
                "POST",
                "/v1/audio/speech",
                json={"model": MODEL, "input": "fail-mid", "response_format": "pcm"},
            ) as response,
        ):
            assert response.status_code == 200
            for chunk in response.iter_raw():
                received += chunk
        assert received  # the three words went out before the failure
        # Before the first byte: an HTTP error in OpenAI's shape.
        first = _speech(http, "fail-first")
        assert first.status_code == 500 and first.json()["error"]["code"] == "scripted_failure"
    _free(server)
    with httpx.Client(base_url=server.base_url, timeout=60.0) as http:
        again = _speech(http, "fine", response_format="wav")
    assert again.status_code == 200 and again.content[:4] == b"RIFF"
