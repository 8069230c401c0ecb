"""Audio input (Chat `input_audio`) on a local GGUF whose projector has an audio encoder: the
demo audio pair, driven by the official `openai` SDK.

The demo's replies are nonsense, but a function of the sound: at temperature 0 the same clip
gives the same reply and a different one a different reply.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from conftest import StartServer
from e2e_support import Server

from audio_support import silent_mp3, tone_wav
from sluicegate.demo.audio import TOKENS_PER_WINDOW

pytestmark = pytest.mark.e2e

EAR = "ear"  # the audio demo, continuous batching (the default)
EAR_SINGLE = "ear-single"  # the same files, one sequence per context
DEAF = "deaf"  # the text demo: no projector
MAX_SECONDS = 40


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


LOW = b64(tone_wav(220.0))
HIGH = b64(tone_wav(1760.0))
LOW_WAV = tone_wav(220.0)


@pytest.fixture(scope="session")
def audio_server(start_server: StartServer, tmp_path_factory: pytest.TempPathFactory) -> Server:
    from sluicegate.demo.audio import make_demo_audio
    from sluicegate.demo.model import make_demo_gguf

    ear = tmp_path_factory.mktemp("ear") / "ear.gguf"
    make_demo_audio(ear, ends_replies=False)  # writes mmproj-ear.gguf beside it: found there
    deaf = make_demo_gguf(tmp_path_factory.mktemp("deaf") / "deaf.gguf", ends_replies=False)
    common = {"engine": "llamacpp", "path": str(ear), "batch_size": 16, "context_length": 1024}
    return start_server(
        server={"max_audio_seconds": MAX_SECONDS, "max_audio_per_request": 2, "max_audio_bytes": 4_000_000},
        models=[
            {"id": EAR, **common},
            {"id": EAR_SINGLE, **common, "batching": False},
            {"id": DEAF, **common, "path": str(deaf)},
        ],
    )


@pytest.fixture
def sdk(audio_server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=audio_server.api_url, api_key="unused", max_retries=0, timeout=60) as client:
        yield client


def chat(
    sdk: openai.OpenAI, model: str, *clips: str, fmt: str = "wav", text: str = "What do you hear?"
) -> Any:
    content: list[Any] = [{"type": "text", "text": text}]
    content += [{"type": "input_audio", "input_audio": {"data": clip, "format": fmt}} for clip in clips]
    return sdk.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": content}],
        temperature=0,
        max_tokens=12,
    )


@pytest.mark.parametrize("model", [EAR, EAR_SINGLE])
def test_replies_depend_on_the_sound_and_usage_counts_it(sdk: openai.OpenAI, model: str) -> None:
    low = chat(sdk, model, LOW)
    again = chat(sdk, model, LOW)
    high = chat(sdk, model, HIGH)
    assert low.choices[0].message.content == again.choices[0].message.content
    assert low.choices[0].message.content != high.choices[0].message.content
    plain = chat(sdk, model)
    assert low.usage is not None and plain.usage is not None
    assert low.usage.prompt_tokens_details is not None and plain.usage.prompt_tokens_details is not None
    assert low.usage.prompt_tokens_details.audio_tokens == TOKENS_PER_WINDOW
    assert plain.usage.prompt_tokens_details.audio_tokens == 0
    assert low.usage.prompt_tokens >= plain.usage.prompt_tokens + TOKENS_PER_WINDOW
    # A clip longer than 30 s is two windows: twice the tokens.
    long = chat(sdk, model, b64(tone_wav(330.0, seconds=31.0)))
    assert long.usage is not None and long.usage.prompt_tokens_details is not None
    assert long.usage.prompt_tokens_details.audio_tokens == 2 * TOKENS_PER_WINDOW


def test_streamed_usage_counts_audio(sdk: openai.OpenAI) -> None:
    stream = sdk.chat.completions.create(
        model=EAR,
        messages=[
            {
                "role": "user",
                "content": [{"type": "input_audio", "input_audio": {"data": LOW, "format": "wav"}}],
            }
        ],
        temperature=0,
        max_tokens=4,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = [chunk.usage for chunk in stream if chunk.usage is not None]
    assert usage and usage[-1].prompt_tokens_details is not None
    assert usage[-1].prompt_tokens_details.audio_tokens == TOKENS_PER_WINDOW


def test_mp3_is_heard(sdk: openai.OpenAI) -> None:
    reply = chat(sdk, EAR, b64(silent_mp3(seconds=1.0)), fmt="mp3")
    assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
    assert reply.usage.prompt_tokens_details.audio_tokens == TOKENS_PER_WINDOW


def test_a_second_turn_with_the_same_clip_reuses_the_cache(sdk: openai.OpenAI) -> None:
    clip = b64(tone_wav(550.0))
    first_turn = [
        {
            "role": "user",
            "content": [
                {"type": "input_audio", "input_audio": {"data": clip, "format": "wav"}},
                {"type": "text", "text": "And this?"},
            ],
        }
    ]
    first = sdk.chat.completions.create(model=EAR, messages=first_turn, temperature=0, max_tokens=8)
    second = sdk.chat.completions.create(
        model=EAR,
        messages=[
            *first_turn,
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "More."},
        ],
        temperature=0,
        max_tokens=8,
    )
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    assert (second.usage.prompt_tokens_details.cached_tokens or 0) > TOKENS_PER_WINDOW


def refused(
    sdk: openai.OpenAI, model: str, clip: str, fmt: str = "wav", n: int = 1
) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as caught:
        chat(sdk, model, *[clip] * n, fmt=fmt)
    return caught.value


def code(error: openai.BadRequestError) -> str:
    body = error.body
    assert isinstance(body, dict)
    return str(body.get("code"))


def test_bad_audio_is_a_400_in_chats_shape(sdk: openai.OpenAI) -> None:
    assert code(refused(sdk, EAR, b64(b"RIFF\x00\x00\x00\x00WAVEjunk"))) == "invalid_audio"
    assert code(refused(sdk, EAR, b64(b"not audio at all, just text"), fmt="mp3")) == "invalid_audio"
    assert code(refused(sdk, EAR, "***not base64***")) == "invalid_audio"
    assert code(refused(sdk, EAR, LOW, fmt="ogg")) == "invalid_audio"
    # A header that plays on, with its samples cut off: never handed to the decoder.
    assert code(refused(sdk, EAR, b64(tone_wav(440.0)[:2000]))) == "invalid_audio"
    assert code(refused(sdk, EAR, b64(tone_wav(440.0, seconds=MAX_SECONDS + 1)))) == "audio_too_long"
    assert (
        code(refused(sdk, EAR, b64(tone_wav(440.0, seconds=30.0, rate=48000, width=4)))) == "audio_too_large"
    )
    assert code(refused(sdk, EAR, LOW, n=3)) == "too_many_audio_clips"
    # What the header check passes and the decoder cannot read, or cannot use: the engine's 400s.
    assert code(refused(sdk, EAR, b64(tone_wav(440.0, format_code=0x1234)))) == "invalid_audio"
    assert code(refused(sdk, EAR, b64(tone_wav(440.0, seconds=0)))) == "invalid_audio"  # one sample
    assert chat(sdk, EAR, LOW).choices  # the server is fine after all that


def test_the_duration_limit_is_what_the_decoder_hears(sdk: openai.OpenAI) -> None:
    """One MP3 frame, one junk byte, then 1,000 more frames (the decoder resyncs and plays them
    all: 72 s) was checked as 0.07 s; a WAV with blockAlign 65535 as a fraction of its length."""
    frame = bytes([0xFF, 0xE3, 0x18, 0xC0]) + bytes(68)  # MPEG-2.5 Layer III, 8 kbit/s: 0.072 s
    mp3 = frame + b"\x00" + frame * 1_000
    assert code(refused(sdk, EAR, b64(mp3), fmt="mp3")) == "audio_too_long"
    wav = bytearray(tone_wav(0.0, seconds=MAX_SECONDS + 5, rate=1_000))
    wav[32:34] = (65535).to_bytes(2, "little")
    assert code(refused(sdk, EAR, b64(bytes(wav)))) == "audio_too_long"
    within = frame + b"junk" + frame * 100  # 7.3 s: heard, junk and all
    assert chat(sdk, EAR, b64(within), fmt="mp3").choices


def test_a_model_without_an_audio_encoder_refuses_audio(sdk: openai.OpenAI, audio_server: Server) -> None:
    error = refused(sdk, DEAF, LOW)
    assert code(error) == "audio_input_unsupported" and error.status_code == 400
    # The audio projector has no vision encoder: images are refused as on a model without one.
    image = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.chat.completions.create(
            model=EAR,
            messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}}]}],
            max_tokens=4,
        )
    assert code(caught.value) == "image_input_unsupported"


def test_capabilities_say_audio(audio_server: Server) -> None:
    with httpx.Client(base_url=audio_server.base_url, timeout=30) as client:
        models = {m["id"]: m for m in client.get("/v1/models").json()["data"]}
        assert models[EAR]["meta"]["audio"] is True and models[EAR]["meta"]["vision"] is False
        assert models[DEAF]["meta"]["audio"] is False
        shown = client.post("/api/show", json={"model": EAR}).json()
        assert "audio" in shown["capabilities"] and "vision" not in shown["capabilities"]
        lmstudio = {m["key"]: m for m in client.get("/api/v1/models").json()["models"]}
        assert lmstudio[EAR]["capabilities"]["audio"] is True
        assert "audio" not in lmstudio[DEAF]["capabilities"]


# --- /v1/audio/transcriptions on a chat model that hears (issue 45) -------------------------


def transcribe(sdk: openai.OpenAI, clip: bytes, **fields: Any) -> Any:
    return sdk.audio.transcriptions.create(model=EAR, file=("clip.wav", clip), **fields)


def test_a_model_that_hears_transcribes_in_every_format(sdk: openai.OpenAI) -> None:
    """The demo's words are nonsense, but they are the model's answer to the sound: the same
    clip gives the same transcript, another clip another one, in every response_format."""
    low, high = LOW_WAV, tone_wav(1760.0)
    plain = transcribe(sdk, low)
    assert plain.text and plain.text == transcribe(sdk, low).text != transcribe(sdk, high).text
    assert plain.usage is not None and plain.usage.type == "duration" and plain.usage.seconds == 1
    text = transcribe(sdk, low, response_format="text")
    assert text == plain.text + "\n"
    srt = transcribe(sdk, low, response_format="srt")
    assert srt == f"1\n00:00:00,000 --> 00:00:01,000\n{plain.text}\n\n"
    vtt = transcribe(sdk, low, response_format="vtt")
    assert vtt == f"WEBVTT\n\n00:00:00.000 --> 00:00:01.000\n{plain.text}\n\n"
    verbose = transcribe(sdk, low, response_format="verbose_json", timestamp_granularities=["segment"])
    assert verbose.text == plain.text and verbose.duration == 1.0 and verbose.language == "unknown"
    assert verbose.segments is not None and len(verbose.segments) == 1  # its whole answer, one segment
    assert verbose.segments[0].start == 0.0 and verbose.segments[0].end == 1.0
    assert verbose.segments[0].text.strip() == plain.text
    english = sdk.audio.translations.create(model=EAR, file=("clip.wav", low))
    assert english.text  # asked to translate: another instruction, another answer (no check of it)


def test_a_model_that_hears_streams_its_transcript(sdk: openai.OpenAI) -> None:
    clip = LOW_WAV
    events = list(transcribe(sdk, clip, stream=True))
    *deltas, done = events
    assert done.type == "transcript.text.done" and len(deltas) > 1
    assert "".join(e.delta for e in deltas) == done.text == transcribe(sdk, clip).text
    assert done.usage is not None and done.usage.output_tokens > 0
    assert done.usage.input_tokens == 50  # one second: Whisper's encoder positions, 50 a second


def test_a_model_that_hears_has_no_word_timestamps(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        transcribe(sdk, LOW_WAV, response_format="verbose_json", timestamp_granularities=["word"])
    assert code(caught.value) == "unsupported_parameter"
    assert caught.value.body["param"] == "timestamp_granularities"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.audio.transcriptions.create(model=DEAF, file=("clip.wav", LOW_WAV))
    assert code(caught.value) == "model_not_supported"  # no audio encoder: no transcription
