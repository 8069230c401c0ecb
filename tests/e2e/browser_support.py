"""Debian's headless Chromium for the page tests, driven by Selenium (`browser`, a module-scoped
fixture). A module that imports it is skipped where Chromium or its driver is missing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")

webdriver = pytest.importorskip("selenium.webdriver")
if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    pytest.skip("needs Debian's chromium and chromium-driver (see .ci/run)", allow_module_level=True)

from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402

# What every page test's Chromium starts with: headless, and none of its calls to Google's
# services (refused on this machine's closed network, many at a time).
ARGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
)


def fake_microphone(clip: Path) -> tuple[str, ...]:
    """Arguments for a microphone that plays `clip` (looped), allowed without a prompt, and
    audio that plays without a click."""
    return (
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={clip}",
        "--autoplay-policy=no-user-gesture-required",
    )


@contextmanager
def chromium(profile: Path, *extra: str, window: str = "1100,1300") -> Iterator[WebDriver]:
    """Debian's Chromium with a new profile in `profile`, quit on the way out."""
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (*ARGS, f"--window-size={window}", *extra, f"--user-data-dir={profile}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    with chromium(tmp_path_factory.mktemp("chromium-profile")) as driver:
        yield driver
