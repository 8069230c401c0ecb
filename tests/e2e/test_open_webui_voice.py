"""Open WebUI (from PyPI, unchanged) with Sluicegate as its OpenAI connection and as its
speech-to-text and text-to-speech engine ("OpenAI" with Sluicegate's URL), driven in a real
headless Chromium (issue 45): the microphone records an espeak-ng sentence (Chromium's fake
capture device), Open WebUI sends the recording to Sluicegate's /v1/audio/transcriptions and the
words land in its message box; sent to a scripted chat model, the answer's "Read Aloud" button
fetches /v1/audio/speech and the browser plays what Piper said.

Open WebUI pulls a few GB of dependencies, so it lives in its own virtual environment: `.ci/run`
installs it into `.tools/open-webui`; `$SLUICEGATE_OPEN_WEBUI` names another `open-webui`
executable. The module is skipped when there is none."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import httpx
import pytest
from conftest import StartServer
from e2e_support import DEFAULT_REPLY, Server, free_port, poll, scripted
from voice_support import SENTENCES, espeak, need_voice, voice_models, words

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-open-webui"  # Sluicegate asks for it, so each of Open WebUI's three connections must send it
WAIT = 180.0  # an upper bound for waits in the page, never a pass condition
STARTUP = 900.0  # Open WebUI's first start migrates its database and imports torch: slow on 2 cores


def open_webui_cli() -> str | None:
    """`$SLUICEGATE_OPEN_WEBUI`, the copy `.ci/run` installs, or `open-webui` on PATH."""
    for candidate in (
        os.environ.get("SLUICEGATE_OPEN_WEBUI"),
        str(ROOT / ".tools/open-webui/bin/open-webui"),
    ):
        if candidate and Path(candidate).exists():
            return candidate
    return shutil.which("open-webui")


OPEN_WEBUI = open_webui_cli()
if OPEN_WEBUI is None:
    pytest.skip(
        "Open WebUI is not installed (.ci/run puts it in .tools/open-webui; or set $SLUICEGATE_OPEN_WEBUI)",
        allow_module_level=True,
    )

webdriver = pytest.importorskip("selenium.webdriver")
from browser_support import chromium, fake_microphone  # noqa: E402  (skips the module without Chromium)
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.remote.webelement import WebElement  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402

SAID = SENTENCES[0]  # the fox: the chat script's default reply answers it (no keyword in it)


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need_voice()
    folder = tmp_path_factory.mktemp("owui-mic")
    espeak(SAID, folder, "fox")
    return folder / "fox.wav"


@pytest.fixture(scope="module")
def sluicegate(start_server: StartServer, tmp_path_factory: pytest.TempPathFactory) -> Server:
    need_voice()
    models, env = voice_models(tmp_path_factory.mktemp("owui-speech-cache"))
    return start_server({"api_key": KEY}, [scripted("chat", "chat.yaml"), *models], env=env)


def open_webui_env(sluicegate: Server, folder: Path) -> dict[str, str]:
    """Open WebUI's settings, as its environment (the names of its config.py): every connection
    points at Sluicegate, and nothing reaches for the network or a hub."""
    api = sluicegate.api_url
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TZ")}
    return env | {
        "HOME": str(folder / "home"),
        "DATA_DIR": str(folder / "data"),  # its SQLite database, caches and uploads
        "WEBUI_SECRET_KEY": "sluicegate-e2e",
        "WEBUI_AUTH": "False",  # one local user, no sign-in page
        "OFFLINE_MODE": "true",  # no version check, no model downloads (sets HF_HUB_OFFLINE)
        "ENABLE_OLLAMA_API": "False",
        "OPENAI_API_BASE_URL": api,
        "OPENAI_API_KEY": KEY,
        "DEFAULT_MODELS": "chat",
        # Its document search embeds through an API rather than loading a hub model at start.
        "RAG_EMBEDDING_ENGINE": "openai",
        "RAG_OPENAI_API_BASE_URL": api,
        "RAG_OPENAI_API_KEY": KEY,
        "AUDIO_STT_ENGINE": "openai",
        "AUDIO_STT_OPENAI_API_BASE_URL": api,
        "AUDIO_STT_OPENAI_API_KEY": KEY,
        "AUDIO_STT_MODEL": "whisper-base",
        "AUDIO_TTS_ENGINE": "openai",
        "AUDIO_TTS_OPENAI_API_BASE_URL": api,
        "AUDIO_TTS_OPENAI_API_KEY": KEY,
        "AUDIO_TTS_MODEL": "piper-en",
        "AUDIO_TTS_VOICE": "alloy",
        # BYPASS_PYDUB_PREPROCESSING is left off, as installed: with no ffmpeg beside it, Open WebUI
        # cannot probe the recording and sends the browser's WebM as it is (Sluicegate decodes it).
        # Only the one chat request the test sends, no background tasks on the chat model.
        "ENABLE_TITLE_GENERATION": "False",
        "ENABLE_FOLLOW_UP_GENERATION": "False",
        "ENABLE_TAGS_GENERATION": "False",
        "ENABLE_AUTOCOMPLETE_GENERATION": "False",
    }


@pytest.fixture(scope="module")
def open_webui(sluicegate: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh Open WebUI (new data folder) on a loopback port; its URL."""
    assert OPEN_WEBUI is not None
    folder = tmp_path_factory.mktemp("open-webui")
    (folder / "home").mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = folder / "open-webui.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [OPEN_WEBUI, "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=folder,
            env=open_webui_env(sluicegate, folder),
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def healthy() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"open-webui exited with {process.returncode}:\n{_tail(log_path)}")
        try:
            return httpx.get(url + "/health", timeout=2.0).status_code == 200
        except httpx.TransportError:
            return False

    try:
        if not poll(healthy, STARTUP, interval=0.5):
            raise AssertionError(f"open-webui did not answer /health within {STARTUP} s:\n{_tail(log_path)}")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)


def _tail(path: Path, lines: int = 60) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory, clip: Path) -> Iterator[WebDriver]:
    profile = tmp_path_factory.mktemp("chromium-owui")
    with chromium(profile, *fake_microphone(clip), window="1300,1000") as driver:
        yield driver


def _shown(browser: WebDriver, by: str, value: str) -> WebElement | Literal[False]:
    """The last element found that is displayed, for a wait."""
    found = [e for e in browser.find_elements(by, value) if e.is_displayed()]
    return found[-1] if found else False


def _recorded_seconds(browser: WebDriver) -> int:
    """The recording timer Open WebUI shows beside its confirm button ("0:07")."""
    text = browser.execute_script(
        "const b = document.getElementById('confirm-recording-button');"
        "return b && b.parentElement && b.parentElement.parentElement"
        " ? b.parentElement.parentElement.innerText : '';"
    )
    match = re.search(r"(\d+):(\d\d)", text or "")
    return int(match[1]) * 60 + int(match[2]) if match else -1


# The audio elements the page plays, recorded as it starts each one: Open WebUI plays the speech
# in an Audio it makes for the purpose, not one in the document.
_WATCH_PLAY = """
window.__played = [];
const play = HTMLMediaElement.prototype.play;
HTMLMediaElement.prototype.play = function () { window.__played.push(this); return play.call(this); };
"""
_PLAYED = """
return window.__played.map(a => ({src: a.src, duration: a.duration, time: a.currentTime,
                                  error: a.error ? a.error.code : null}));
"""


def _access(server: Server, path: str) -> list[tuple[int, str]]:
    """Sluicegate's request log: (status, model) of every POST to `path`."""
    return [
        (int(status), model)
        for status, model in re.findall(rf'"POST {re.escape(path)}" (\d+) model=(\S+)', server.output())
    ]


@pytest.mark.timeout(STARTUP + 4 * WAIT)  # Open WebUI's start is in the test's fixtures
def test_open_webui_microphone_and_read_aloud(
    sluicegate: Server, open_webui: str, browser: WebDriver, clip: Path
) -> None:
    # Svelte re-renders the chat as it streams: an element found a moment ago may be gone.
    wait = WebDriverWait(browser, WAIT, ignored_exceptions=[StaleElementReferenceException])
    lets_go = '//button[normalize-space()="Okay, Let\'s Go!"]'
    browser.get(open_webui + "/")
    # A fresh data folder: Open WebUI opens with its release notes, which cover the page.
    wait.until(lambda b: _shown(b, By.XPATH, lets_go)).click()
    wait.until(lambda b: not _shown(b, By.XPATH, lets_go))

    # The microphone: record until a whole copy of the looped clip is in, then confirm.
    wait.until(lambda b: _shown(b, By.ID, "voice-input-button")).click()
    seconds = (clip.stat().st_size - 44) / 2 / 22050  # espeak-ng: 22.05 kHz 16-bit mono
    wait.until(lambda b: _recorded_seconds(b) >= 2 * seconds + 1)
    wait.until(lambda b: _shown(b, By.ID, "confirm-recording-button")).click()
    text = wait.until(lambda b: b.find_element(By.ID, "chat-input").text.strip())
    assert len(set(words(text)) & set(words(SAID))) >= 4, text
    heard = poll(lambda: _access(sluicegate, "/v1/audio/transcriptions"), 30, fail=True)
    assert heard == [(200, "whisper-base")], sluicegate.output()

    # Sent to the chat model; its answer read aloud.
    browser.execute_script(_WATCH_PLAY)
    wait.until(lambda b: (s := _shown(b, By.ID, "send-message-button")) and s.is_enabled() and s).click()
    wait.until(lambda b: (a := _shown(b, By.ID, "response-content-container")) and DEFAULT_REPLY in a.text)
    wait.until(lambda b: _shown(b, By.CSS_SELECTOR, "button[aria-label='Read Aloud']")).click()
    # Played: decoded to a real length, and its clock has moved (the browser is playing it).
    wait.until(
        lambda b: [
            a for a in b.execute_script(_PLAYED) if a["duration"] > 1 and a["time"] > 0 and not a["error"]
        ]
    )
    spoken = poll(lambda: _access(sluicegate, "/v1/audio/speech"), 30, fail=True)
    assert all(entry == (200, "piper-en") for entry in spoken), sluicegate.output()
    assert _access(sluicegate, "/v1/chat/completions") == [(200, "chat")], sluicegate.output()
