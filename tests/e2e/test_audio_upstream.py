"""The `openai` engine relays OpenAI's audio endpoints to an upstream that has them (a fake one
here, speaking the real wire format): the official SDK's requests go through with the upstream's
model name, answers and streams come back as they are, refusals keep their status, a dead replica
fails over (issue 45)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import httpx
import openai
import pytest
from conftest import StartServer
from e2e_support import Server
from fake_audio import AUDIO_PIECES, TRANSCRIPT
from fake_upstream import FakeUpstream, Scenario
from upstream_support import dead_url, upstream_model

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream(name="voice") as upstream:
        upstream.scenarios["refuses"] = Scenario(
            status=400,
            body=b'{"error":{"message":"unsupported audio","type":"invalid_request_error","code":"bad_audio"}}',
        )
        yield upstream


@pytest.fixture(scope="module")
def relay_server(start_server: StartServer, fake: FakeUpstream) -> Server:
    return start_server(
        {},
        [
            upstream_model("stt", fake, scenario="whisper-large"),
            upstream_model("tts", fake, scenario="kokoro"),
            upstream_model("refusing", fake, scenario="refuses"),
            upstream_model("failover", dead_url(), fake.base_url, scenario="whisper-large"),
        ],
    )


@pytest.fixture
def sdk(relay_server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=relay_server.api_url, api_key="unused", max_retries=0, timeout=60.0) as c:
        yield c


WAV = b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x40\x1f\x00\x00\x80\x3e\x00\x00\x02\x00\x10\x00data\x00\x00\x00\x00"


def test_transcription_relayed_with_the_upstream_model(sdk: openai.OpenAI, fake: FakeUpstream) -> None:
    result = sdk.audio.transcriptions.create(model="stt", file=("clip.wav", WAV), language="en", prompt="Hi")
    assert result.text == TRANSCRIPT
    sent = fake.requests[-1]
    assert sent.path == "/v1/audio/transcriptions" and sent.body["model"] == ["whisper-large"]
    assert sent.body["language"] == ["en"] and sent.body["prompt"] == ["Hi"]
    assert sent.body["file"] == {"filename": "clip.wav", "size": len(WAV)}
    text = sdk.audio.transcriptions.create(model="stt", file=("clip.wav", WAV), response_format="text")
    assert text.strip() == TRANSCRIPT
    stream = list(sdk.audio.transcriptions.create(model="stt", file=("clip.wav", WAV), stream=True))
    assert [e.type for e in stream][-1] == "transcript.text.done" and stream[-1].text == TRANSCRIPT
    assert "".join(e.delta for e in stream if e.type == "transcript.text.delta") == TRANSCRIPT


def test_speech_relayed_as_it_comes(sdk: openai.OpenAI, relay_server: Server, fake: FakeUpstream) -> None:
    audio = sdk.audio.speech.create(model="tts", voice="alloy", input="Hello.", response_format="mp3")
    assert audio.content == b"".join(AUDIO_PIECES)
    assert fake.requests[-1].path == "/v1/audio/speech" and fake.requests[-1].body["model"] == "kokoro"
    with httpx.Client(base_url=relay_server.base_url, timeout=60.0) as http:
        body = {"model": "tts", "voice": "alloy", "input": "Hello.", "stream_format": "sse"}
        events = [
            json.loads(line[6:])
            for line in http.post("/v1/audio/speech", json=body).text.splitlines()
            if line.startswith("data: ")
        ]
    assert [e["type"] for e in events] == ["speech.audio.delta"] * 3 + ["speech.audio.done"]
    assert b"".join(base64.b64decode(e["audio"]) for e in events[:3]) == b"".join(AUDIO_PIECES)


def test_refusals_keep_their_status_and_a_dead_replica_fails_over(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.audio.transcriptions.create(model="refusing", file=("clip.wav", WAV))
    assert "unsupported audio" in caught.value.message
    assert sdk.audio.transcriptions.create(model="failover", file=("clip.wav", WAV)).text == TRANSCRIPT
    # Our own checks come first: the upstream never sees a bad field.
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.audio.transcriptions.create(model="stt", file=("clip.wav", WAV), response_format="mp4")  # type: ignore[arg-type]
    assert caught.value.body["param"] == "response_format"  # type: ignore[index]
