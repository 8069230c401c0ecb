"""The models page (`/models`) in Debian's headless Chromium, against a real server and the fake
Hub: find a repository's files, pick a quantization, download with the progress bar reaching
100%, load the downloaded GGUF and unload it, and cancel a download that is under way. The
screenshots are kept under tests/artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from e2e_support import Server, run_server, scripted, write_config
from fake_hub import FakeHub, FakeRepo
from playground_support import ARTIFACTS

pytestmark = pytest.mark.e2e

webdriver = pytest.importorskip("selenium.webdriver")
from browser_support import browser  # noqa: E402  (a fixture; skips the module without Chromium)
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402

__all__ = ["browser"]

WAIT = 60.0  # an upper bound for waits, never a pass condition
REPO, SLOW_REPO = "acme/Demo-GGUF", "acme/Slow-GGUF"


@pytest.fixture(scope="module")
def slow_repo() -> FakeRepo:
    return FakeRepo({"slow-Q4_K_M.gguf": b"GGUF" + bytes(range(256)) * 4096})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, slow_repo: FakeRepo) -> Iterator[Server]:
    from sluicegate.demo.model import make_demo_gguf

    folder = tmp_path_factory.mktemp("models-page")
    demo = make_demo_gguf(folder / "demo.gguf").read_bytes()
    hub = FakeHub()
    hub.add(REPO, {"demo-Q8_0.gguf": demo, "demo-F16.gguf": demo, "README.md": b"# Demo\n"})
    hub.repos[SLOW_REPO] = slow_repo
    slow_repo.gate.clear()  # the second half of its file waits for the test
    config = write_config(folder, {"models_dir": str(folder / "models")}, [scripted("chat", "chat.yaml")])
    with hub.running(), run_server(folder, config, env=hub.env(folder)) as running:
        yield running


def text(browser: WebDriver, element_id: str) -> str:
    value: str = browser.execute_script(
        "return document.getElementById(arguments[0]).textContent", element_id
    )
    return value


def row_state(browser: WebDriver, fragment: str) -> str | None:
    """The state cell of the model whose id contains `fragment` (read in one script)."""
    script = (
        "const row = [...document.querySelectorAll('#models tbody tr')]"
        ".find(r => r.dataset.model.includes(arguments[0]));"
        "return row ? row.querySelector('td.state').textContent : null"
    )
    state: str | None = browser.execute_script(script, fragment)
    return state


def click_in_row(browser: WebDriver, fragment: str, label: str) -> None:
    rows = browser.find_elements(By.CSS_SELECTOR, "#models tbody tr")
    (row,) = [r for r in rows if fragment in (r.get_attribute("data-model") or "")]
    (button,) = [b for b in row.find_elements(By.TAG_NAME, "button") if b.text == label]
    button.click()


def find_files(browser: WebDriver, repo: str) -> Select:
    box = browser.find_element(By.ID, "repo")
    box.clear()
    box.send_keys(repo)
    browser.find_element(By.ID, "find").click()
    WebDriverWait(browser, WAIT).until(lambda b: b.find_element(By.ID, "quantization").is_enabled())
    return Select(browser.find_element(By.ID, "quantization"))


def test_the_page_needs_no_key(server: Server) -> None:
    page = httpx.get(server.base_url + "/models", headers={"Accept": "text/html"})  # a browser's ask
    assert page.status_code == 200 and "Sluicegate models" in page.text


def test_download_load_and_unload_a_model(server: Server, browser: WebDriver) -> None:
    browser.get(server.base_url + "/models")
    WebDriverWait(browser, WAIT).until(lambda b: row_state(b, "chat") is not None)

    choices = find_files(browser, REPO)
    assert sorted(o.get_attribute("value") for o in choices.options) == ["F16", "Q8_0"]
    choices.select_by_value("Q8_0")
    browser.find_element(By.ID, "download").click()
    WebDriverWait(browser, WAIT).until(lambda b: "completed" in text(b, "job-label"))
    assert text(browser, "job-pct") == "100%"
    assert (server.folder / "models" / REPO / "demo-Q8_0.gguf").is_file()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "models-downloaded.png"))

    # The server serves the downloaded file at once; the page lists it after the download.
    WebDriverWait(browser, WAIT).until(lambda b: row_state(b, "demo-Q8_0") == "not loaded")
    click_in_row(browser, "demo-Q8_0", "Load")
    WebDriverWait(browser, WAIT).until(lambda b: (row_state(b, "demo-Q8_0") or "").startswith("loaded:"))
    browser.save_screenshot(str(ARTIFACTS / "models-loaded.png"))
    listing = httpx.get(server.base_url + "/api/v1/models").json()["models"]
    (entry,) = [m for m in listing if "demo-Q8_0" in m["key"]]
    assert entry["loaded_instances"] and entry["engine"] == "llamacpp"

    click_in_row(browser, "demo-Q8_0", "Unload")
    WebDriverWait(browser, WAIT).until(lambda b: row_state(b, "demo-Q8_0") == "not loaded")


def test_cancel_a_download_under_way(server: Server, browser: WebDriver, slow_repo: FakeRepo) -> None:
    browser.get(server.base_url + "/models")
    find_files(browser, SLOW_REPO)
    browser.find_element(By.ID, "download").click()
    # The fake Hub holds the second half back, so the job stays under way until the gate opens.
    WebDriverWait(browser, WAIT).until(lambda b: "downloading" in text(b, "job-label"))
    browser.find_element(By.ID, "cancel").click()
    slow_repo.gate.set()  # the next chunk arrives, and the transfer stops at it
    WebDriverWait(browser, WAIT).until(lambda b: "cancelled" in text(b, "job-label"))
    assert not Path(server.folder / "models" / SLOW_REPO / "slow-Q4_K_M.gguf").is_file()


def test_the_download_additions_answer_in_lm_studios_error_shape(server: Server) -> None:
    missing = httpx.get(server.base_url + "/api/v1/models/download/options")
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "model"
    unknown = httpx.get(server.base_url + "/api/v1/models/download/options", params={"model": "acme/nope"})
    assert unknown.status_code == 404 and "not found" in unknown.json()["error"]["message"]
    options = httpx.get(server.base_url + "/api/v1/models/download/options", params={"model": REPO}).json()
    assert [f["file"] for f in options["files"]] == ["demo-F16.gguf", "demo-Q8_0.gguf"]  # no README
    gone = httpx.post(server.base_url + "/api/v1/models/download/cancel", json={"job_id": "job_nope"})
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "job_not_found"
