"""The playground's voice buttons in a real headless Chromium (issue 45): the microphone records
(Chromium's fake capture device plays an espeak-ng sentence), the real Whisper model transcribes
it into the message box; the play button reads an answer aloud with the real Piper voice, an MP3
the browser decodes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import StartServer
from e2e_support import Server, scripted
from voice_support import SENTENCES, espeak, need_voice, voice_models, words

pytestmark = pytest.mark.e2e
WAIT = 120.0  # an upper bound for waits, never a pass condition

webdriver = pytest.importorskip("selenium.webdriver")
from browser_support import chromium, fake_microphone  # noqa: E402  (skips the module without Chromium)
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need_voice()
    folder = tmp_path_factory.mktemp("mic")
    espeak(SENTENCES[0], folder, "fox")
    return folder / "fox.wav"


@pytest.fixture(scope="module")
def voice_browser(tmp_path_factory: pytest.TempPathFactory, clip: Path) -> Iterator[WebDriver]:
    with chromium(tmp_path_factory.mktemp("chromium-voice"), *fake_microphone(clip)) as driver:
        yield driver


@pytest.fixture(scope="module")
def server(start_server: StartServer, tmp_path_factory: pytest.TempPathFactory) -> Server:
    need_voice()
    models, env = voice_models(tmp_path_factory.mktemp("speech-cache"))
    return start_server({}, [scripted("chat", "chat.yaml"), *models], env=env)


def test_mic_and_play(server: Server, voice_browser: WebDriver, clip: Path) -> None:
    browser = voice_browser
    browser.get(server.base_url + "/")
    wait = WebDriverWait(browser, WAIT)
    mic = wait.until(lambda b: (m := b.find_element(By.ID, "mic")).is_displayed() and m)
    mic.click()
    # Recorded until the capture has run past the clip's length (the fake device loops it).
    seconds = (clip.stat().st_size - 44) / 2 / 22050
    wait.until(lambda b: b.execute_script("return voice.captured") >= 4 * (2 * seconds + 0.5))
    mic.click()
    text = wait.until(lambda b: b.find_element(By.ID, "prompt").get_attribute("value"))
    assert len(set(words(text)) & set(words(SENTENCES[0]))) >= 4, text
    # Send it to a chat model, then read the answer aloud.
    Select(browser.find_element(By.ID, "model")).select_by_value("chat")
    browser.find_element(By.ID, "prompt").send_keys("\n")
    play = wait.until(
        lambda b: (p := b.find_elements(By.CSS_SELECTOR, ".turn.assistant.finished button.play")) and p[-1]
    )
    assert play.is_displayed()
    play.click()
    duration = wait.until(
        lambda b: b.execute_script("return voice.audio && voice.audio.duration > 1 && voice.audio.duration")
    )
    assert duration > 1
