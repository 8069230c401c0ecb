"""POST /v1/audio/transcriptions and /translations with a real Whisper model and the official
openai SDK: espeak-ng speaks, Whisper (base, CTranslate2, from PyPI) hears (issue 45)."""

from __future__ import annotations

import re
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from conftest import StartServer
from e2e_support import Server, metric, poll
from voice_support import SENTENCES, espeak, need_voice, reencode, voice_models, word_error_rate, words

pytestmark = pytest.mark.e2e

MODEL = "whisper-base"


@pytest.fixture(scope="module")
def voice_server(start_server: StartServer, tmp_path_factory: pytest.TempPathFactory) -> Server:
    need_voice()
    models, env = voice_models(tmp_path_factory.mktemp("speech-cache"))
    # A low duration cap, so an over-long upload is cheap to make.
    return start_server({"max_audio_seconds": 120, "max_audio_bytes": 4_000_000}, models, env=env)


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    need_voice()
    folder = tmp_path_factory.mktemp("espeak")
    return [espeak(text, folder, f"s{i}") for i, text in enumerate(SENTENCES)]


@pytest.fixture
def sdk(voice_server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=voice_server.api_url, api_key="unused", max_retries=0, timeout=120.0) as c:
        yield c


def _heard(sdk: openai.OpenAI, clip: bytes, fmt: str) -> str:
    """The words of one transcription in `fmt` ("stream": the streamed deltas), markup dropped."""
    if fmt == "stream":
        events = list(
            sdk.audio.transcriptions.create(model=MODEL, file=("s.wav", clip), language="en", stream=True)
        )
        assert events[-1].type == "transcript.text.done"
        return "".join(e.delta for e in events if e.type == "transcript.text.delta")
    result = sdk.audio.transcriptions.create(
        model=MODEL,
        file=("s.wav", clip),
        language="en",
        response_format=fmt,  # type: ignore[call-overload]
    )
    if fmt in ("json", "verbose_json"):
        return str(result.text)
    lines = str(result).splitlines()  # srt and vtt: the cue lines alone (no number, no timing)
    return " ".join(
        line for line in lines if line not in ("WEBVTT", "") and "-->" not in line and not line.isdigit()
    )


@pytest.mark.parametrize("fmt", ["json", "text", "srt", "vtt", "verbose_json", "stream"])
def test_five_sentences_come_back(sdk: openai.OpenAI, clips: list[bytes], fmt: str) -> None:
    heard = [_heard(sdk, clip, fmt) for clip in clips]
    rate = word_error_rate(" ".join(SENTENCES), " ".join(heard))
    assert rate <= 0.30, (rate, heard)


def test_every_response_format(sdk: openai.OpenAI, clips: list[bytes]) -> None:
    clip = ("fox.wav", clips[0])
    plain = sdk.audio.transcriptions.create(model=MODEL, file=clip, response_format="json")
    assert word_error_rate(SENTENCES[0], plain.text) <= 0.30
    assert plain.usage is not None and plain.usage.type == "duration" and plain.usage.seconds >= 1
    text = sdk.audio.transcriptions.create(model=MODEL, file=clip, response_format="text")
    assert isinstance(text, str) and words(text) == words(plain.text)
    srt = sdk.audio.transcriptions.create(model=MODEL, file=clip, response_format="srt")
    assert srt.startswith("1\n00:00:00,") and " --> 00:00:0" in srt and "fox" in srt.lower()
    vtt = sdk.audio.transcriptions.create(model=MODEL, file=clip, response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:00.") and "fox" in vtt.lower()
    verbose = sdk.audio.transcriptions.create(
        model=MODEL, file=clip, response_format="verbose_json", timestamp_granularities=["word", "segment"]
    )
    assert verbose.language == "english" and 2.0 < verbose.duration < 5.0
    assert (
        verbose.segments
        and verbose.segments[0].start == 0.0
        and verbose.segments[-1].end <= verbose.duration + 0.5
    )
    assert verbose.words and [w.word.lower().strip(".") for w in verbose.words][:2] == ["the", "quick"]
    assert all(a.start <= b.start for a, b in zip(verbose.words, verbose.words[1:], strict=False))


def test_streamed_deltas_add_up_to_the_done_text(sdk: openai.OpenAI, clips: list[bytes]) -> None:
    stream = sdk.audio.transcriptions.create(model=MODEL, file=("s.wav", clips[0]), stream=True)
    events = list(stream)
    assert [e.type for e in events][-1] == "transcript.text.done"
    deltas = "".join(e.delta for e in events if e.type == "transcript.text.delta")
    done = events[-1]
    assert deltas == done.text and word_error_rate(SENTENCES[0], done.text) <= 0.30
    # The same words as without streaming (the same decoder, the same audio).
    plain = sdk.audio.transcriptions.create(model=MODEL, file=("s.wav", clips[0]))
    assert words(plain.text) == words(done.text)
    assert done.usage is not None and done.usage.input_tokens > 0 and done.usage.output_tokens > 0
    assert done.usage.total_tokens == done.usage.input_tokens + done.usage.output_tokens


def test_translation_speaks_english(sdk: openai.OpenAI, clips: list[bytes]) -> None:
    result = sdk.audio.translations.create(model=MODEL, file=("s.wav", clips[0]))
    assert word_error_rate(SENTENCES[0], result.text) <= 0.30


@pytest.mark.parametrize(
    ("name", "container", "codec"),
    [
        ("clip.mp3", "mp3", "libmp3lame"),
        ("clip.m4a", "ipod", "aac"),
        ("clip.ogg", "ogg", "libopus"),
        ("clip.flac", "flac", "flac"),
        ("clip.webm", "webm", "libopus"),
    ],
)
def test_uploaded_formats(
    sdk: openai.OpenAI, clips: list[bytes], name: str, container: str, codec: str
) -> None:
    data = reencode(clips[0], container, codec, 48000 if codec == "libopus" else None)
    result = sdk.audio.transcriptions.create(model=MODEL, file=(name, data))
    assert word_error_rate(SENTENCES[0], result.text) <= 0.30, result.text


def _bad(sdk: openai.OpenAI, data: bytes, name: str = "clip.wav") -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.audio.transcriptions.create(model=MODEL, file=(name, data))
    return caught.value


def test_bad_uploads_are_400s(sdk: openai.OpenAI, clips: list[bytes], tmp_path: Path) -> None:
    wav = clips[0]
    assert _bad(sdk, b"").code == "invalid_audio"  # zero bytes
    assert (
        _bad(sdk, b"Hello, this is a text file, not audio.\n" * 20, "notes.txt").code
        == "unsupported_audio_format"
    )
    assert _bad(sdk, wav[: len(wav) // 2]).code == "invalid_audio"  # cut short: its header says more
    assert _bad(sdk, reencode(wav, "mp3", "libmp3lame")[:200], "clip.mp3").code == "invalid_audio"
    # An hour-long header over a few bytes of samples.
    hour = bytearray(wav[:44]) + bytes(1000)
    struct.pack_into("<I", hour, 40, 16000 * 2 * 3600)
    assert _bad(sdk, bytes(hour)).code == "invalid_audio"
    # A decompression bomb: a small FLAC of silence that decodes to far past the 120 s cap.
    bomb = reencode(_silence_wav(tmp_path, seconds=1200), "flac", "flac")
    assert len(bomb) < 1_000_000
    error = _bad(sdk, bomb, "bomb.flac")
    assert error.code == "audio_too_long" and error.body["param"] == "file"  # type: ignore[index]
    # Past max_audio_bytes: refused before it is decoded.
    error = _bad(sdk, wav + bytes(4_000_000))
    assert error.code == "audio_too_large"


def _silence_wav(folder: Path, *, seconds: int) -> bytes:
    import wave

    path = folder / "silence.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(bytes(8000 * 2 * seconds))
    return path.read_bytes()


def test_form_errors_in_openai_shape(voice_server: Server, clips: list[bytes]) -> None:
    with httpx.Client(base_url=voice_server.base_url, timeout=60.0) as http:
        no_file = http.post("/v1/audio/transcriptions", data={"model": MODEL})
        as_json = http.post("/v1/audio/transcriptions", json={"model": MODEL})
        bad_format = http.post(
            "/v1/audio/transcriptions",
            data={"model": MODEL, "response_format": "mp4"},
            files={"file": ("a.wav", clips[0])},
        )
        not_stt = http.post(
            "/v1/audio/transcriptions", data={"model": "piper-en"}, files={"file": ("a.wav", clips[0])}
        )
        unknown = http.post(
            "/v1/audio/transcriptions", data={"model": "nope"}, files={"file": ("a.wav", clips[0])}
        )
        chat = http.post(
            "/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
        )
    for response in (no_file, as_json, bad_format, not_stt, chat):
        assert response.status_code == 400, response.text
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    assert bad_format.json()["error"]["param"] == "response_format"
    assert unknown.status_code == 404


def test_listed_with_its_kind(voice_server: Server) -> None:
    with httpx.Client(base_url=voice_server.base_url, timeout=30.0) as http:
        models = {m["id"]: m for m in http.get("/v1/models").json()["data"]}
        tags = {m["name"] for m in http.get("/api/tags").json()["models"]}
    assert models[MODEL]["meta"]["type"] == "stt" and models["piper-en"]["meta"]["type"] == "tts"
    assert {MODEL, "piper-en"} <= {t.split(":")[0] for t in tags}


HEARD = re.compile(r"transcription whisper-base: ([\d.]+) s of ([\d.]+) s heard( \(stopped\))?")


def test_a_client_that_leaves_frees_the_model(voice_server: Server, tmp_path: Path) -> None:
    """A minute of speech (three 30-second windows) streamed; the client leaves once the model
    has started on it (its slot taken), before any answer: the engine stops after the window in
    hand, having sent nothing, and the model takes the next request."""
    text = " ".join(f"This is sentence number {n} of a long recording." for n in range(1, 25))
    long = espeak(text, tmp_path, "long")
    short = espeak("This is sentence number one.", tmp_path, "short")
    with httpx.Client(base_url=voice_server.base_url, timeout=120.0) as http:  # loaded first
        assert http.post(
            "/v1/audio/transcriptions", data={"model": MODEL}, files={"file": ("s.wav", short)}
        ).is_success
    before = len(HEARD.findall(voice_server.output()))
    boundary = "voice-test-boundary"
    form = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\n{MODEL}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="stream"\r\n\r\ntrue\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="l.wav"\r\n'
            "Content-Type: audio/wav\r\n\r\n"
        ).encode()
        + long
        + f"\r\n--{boundary}--\r\n".encode()
    )
    host, port = voice_server.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as client:
        client.sendall(
            b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\n"
            + f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {len(form)}\r\n\r\n".encode()
            + form
        )
        poll(
            lambda: metric(voice_server.base_url, "sluicegate_generations_active", MODEL) == 1,
            timeout=60.0,
            fail=True,
        )
    # Gone while the first window was being heard.
    found = poll(lambda: HEARD.findall(voice_server.output())[before:], timeout=120.0, fail=True)
    heard, total, stopped = found[0]
    assert stopped and float(heard) <= 30.0 < float(total), found
    poll(
        lambda: metric(voice_server.base_url, "sluicegate_generations_active", MODEL) == 0,
        timeout=60.0,
        fail=True,
    )
    with httpx.Client(base_url=voice_server.base_url, timeout=120.0) as http:
        after = http.post(
            "/v1/audio/transcriptions",
            data={"model": MODEL},
            files={"file": ("s.wav", short)},
        )
    assert after.status_code == 200 and "sentence" in after.json()["text"].lower(), after.text
