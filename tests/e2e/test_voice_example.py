"""The contract for checks from outside the test suite (issue 45): with the voice extra
installed, `sluicegate serve --config examples/voice.toml` serves a transcription model with id
`whisper-base` and a speech model with id `piper-en`, their paths resolved from the installed
packages: what one says, the other hears."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest
from e2e_support import run_server
from voice_support import need_voice, word_error_rate

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "voice.toml"


def test_the_example_serves_whisper_base_and_piper_en(tmp_path: Path) -> None:
    need_voice()
    # Only the cache moves (the joined Whisper weights), as a user's SLUICEGATE_CACHE_DIR would.
    with run_server(tmp_path, EXAMPLE, env={"SLUICEGATE_CACHE_DIR": str(tmp_path / "cache")}) as server:
        models = {m["id"]: m for m in httpx.get(server.api_url + "/models", timeout=30).json()["data"]}
        assert models["whisper-base"]["meta"]["type"] == "stt" and models["piper-en"]["meta"]["type"] == "tts"
        with openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0, timeout=120.0) as sdk:
            saying = "Please call me back tomorrow morning."
            audio = sdk.audio.speech.create(
                model="piper-en", voice="alloy", input=saying, response_format="wav"
            )
            heard = sdk.audio.transcriptions.create(
                model="whisper-base", file=("s.wav", audio.content), language="en"
            )
    assert word_error_rate(saying, heard.text) <= 0.30, heard.text
