"""The playground page in a real headless Chromium (Debian's, driven by Selenium): the page and
its assets are served without a key, it lists models with the key the user types, and it shows
a stream as it happens — progress bars, folded reasoning, a server-side tool call and its
result, the text, usage — in each dialect. A screenshot is kept under tests/artifacts/."""

from __future__ import annotations

import json

import httpx
import pytest
from e2e_support import Server, poll
from playground_support import (
    API_KEY,
    ARTIFACTS,
    MODEL,
    NOTES,
    NOTES_REPLY,
    PLAIN_REPLY,
    StartServer,
    start_playground_server,
)
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.e2e

WAIT = 30.0  # an upper bound for waits, never a pass condition

webdriver = pytest.importorskip("selenium.webdriver")
from browser_support import browser  # noqa: E402  (a fixture; skips the module without Chromium)
from playground_page import models_listed, open_page  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.remote.webelement import WebElement  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402

__all__ = ["browser"]


@pytest.fixture(scope="module")
def server(start_server: StartServer, tmp_path_factory: pytest.TempPathFactory) -> Server:
    return start_playground_server(start_server, tmp_path_factory.mktemp("playground"))


def wait_for(browser: WebDriver, css: str) -> WebElement:
    element: WebElement = WebDriverWait(browser, WAIT).until(lambda b: b.find_element(By.CSS_SELECTOR, css))
    return element


def send(browser: WebDriver, dialect: str, text: str) -> WebElement:
    """Pick the dialect, send `text`, and return the assistant turn once it has finished."""
    Select(browser.find_element(By.ID, "dialect")).select_by_value(dialect)
    Select(browser.find_element(By.ID, "model")).select_by_value(MODEL)
    finished = len(browser.find_elements(By.CSS_SELECTOR, ".turn.assistant.finished"))
    prompt = browser.find_element(By.ID, "prompt")
    prompt.send_keys(text)
    prompt.send_keys("\n")  # Enter sends
    turns: list[WebElement] = WebDriverWait(browser, WAIT).until(
        lambda b: (t := b.find_elements(By.CSS_SELECTOR, ".turn.assistant.finished"))[finished:] and t
    )
    return turns[-1]


def test_the_page_and_its_assets_need_no_key(server: Server) -> None:
    page = httpx.get(server.base_url + "/", headers={"Accept": "text/html"})  # a browser's ask
    assert page.status_code == 200 and "Sluicegate playground" in page.text
    for asset, kind in (("playground.js", "javascript"), ("playground.css", "text/css")):
        response = httpx.get(f"{server.base_url}/playground/{asset}")
        assert response.status_code == 200 and kind in response.headers["content-type"]
    assert httpx.get(server.base_url + "/v1/models").status_code == 401  # the API still needs one


def test_a_stream_in_every_dialect(server: Server, browser: WebDriver) -> None:
    browser.get(server.base_url + "/")
    status = wait_for(browser, "#status")
    WebDriverWait(browser, WAIT).until(lambda _: "401" in status.text)  # no key yet: the lists fail
    assert models_listed(browser) == []

    key = browser.find_element(By.ID, "api-key")
    key.send_keys(API_KEY)
    browser.execute_script("arguments[0].dispatchEvent(new Event('change'))", key)
    WebDriverWait(browser, WAIT).until(lambda b: MODEL in models_listed(b))
    browser.refresh()  # the key is kept (localStorage)
    WebDriverWait(browser, WAIT).until(lambda b: MODEL in models_listed(b))
    assert browser.find_element(By.ID, "api-key").get_attribute("value") == API_KEY

    # LM Studio, first request: the model loads just in time, the prompt is processed, the
    # model reasons, calls read_file (the server runs it) and answers from the result.
    Select(browser.find_element(By.ID, "dialect")).select_by_value("lmstudio")
    browser.find_element(By.ID, "integrations").send_keys("files")
    turn = send(browser, "lmstudio", "What do my notes say?")
    load = turn.find_element(By.CSS_SELECTOR, ".progress.load")
    assert load.is_displayed() and "done" in (load.get_attribute("class") or "")
    assert load.find_element(By.TAG_NAME, "progress").get_attribute("value") == "1"
    assert turn.find_element(By.CSS_SELECTOR, ".progress.prompt").is_displayed()
    reasoning = turn.find_element(By.CSS_SELECTOR, "details.reasoning")
    assert reasoning.get_attribute("open") is None  # folded
    assert "read the file" in (
        reasoning.find_element(By.CSS_SELECTOR, ".body").get_attribute("textContent") or ""
    )
    tool = turn.find_element(By.CSS_SELECTOR, ".tool")
    assert "read_file" in tool.find_element(By.CSS_SELECTOR, ".head").text
    assert "files" in tool.find_element(By.CSS_SELECTOR, ".head").text  # who ran it
    assert "notes.txt" in tool.find_element(By.CSS_SELECTOR, ".args").text
    assert NOTES.strip() in tool.find_element(By.CSS_SELECTOR, ".result").text
    assert "ok" in (tool.get_attribute("class") or "")
    assert not turn.find_elements(By.CSS_SELECTOR, ".error")
    assert turn.find_element(By.CSS_SELECTOR, ".text").text == NOTES_REPLY
    stats = turn.find_element(By.CSS_SELECTOR, ".stats").text
    assert " in · " in stats and "tokens/s" in stats
    log = turn.find_element(By.CSS_SELECTOR, ".log").get_attribute("textContent") or ""
    assert "event: model_load.progress" in log and "event: tool_call.success" in log
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "playground-lmstudio.png"
    browser.save_screenshot(str(shot))
    print(f"screenshot: {shot}")

    # The other dialects: the text streams, reasoning is folded, usage at the end.
    for dialect in ("chat", "responses"):
        browser.find_element(By.ID, "clear").click()
        turn = send(browser, dialect, "Hello there")
        assert turn.find_element(By.CSS_SELECTOR, ".text").text == PLAIN_REPLY, dialect
        body = turn.find_element(By.CSS_SELECTOR, "details.reasoning .body").get_attribute("textContent")
        assert body == "A plain question; no tool needed.", dialect
        assert " in · " in turn.find_element(By.CSS_SELECTOR, ".stats").text, dialect
        assert not turn.find_elements(By.CSS_SELECTOR, ".error"), dialect
        assert not any(bar.is_displayed() for bar in turn.find_elements(By.CSS_SELECTOR, ".progress"))

    # Responses runs the configured plugins too: the call and its result show as mcp_call items.
    turn = send(browser, "responses", "What do my notes say?")
    tool = turn.find_element(By.CSS_SELECTOR, ".tool")
    assert "read_file" in tool.find_element(By.CSS_SELECTOR, ".head").text
    assert NOTES.strip() in tool.find_element(By.CSS_SELECTOR, ".result").text
    assert turn.find_element(By.CSS_SELECTOR, ".text").text == NOTES_REPLY
    browser.save_screenshot(str(ARTIFACTS / "playground-responses.png"))


def test_stop_cancels_the_generation(server: Server, browser: WebDriver) -> None:
    open_page(browser, server)
    browser.find_element(By.ID, "clear").click()  # the earlier tests' conversation is kept
    Select(browser.find_element(By.ID, "dialect")).select_by_value("chat")
    Select(browser.find_element(By.ID, "model")).select_by_value(MODEL)
    browser.find_element(By.ID, "prompt").send_keys("crawl along\n")
    text = wait_for(browser, ".turn.assistant .text")
    WebDriverWait(browser, WAIT).until(lambda _: "crawling 1 2" in text.text)
    browser.find_element(By.ID, "stop").click()
    turn = wait_for(browser, ".turn.assistant.finished")
    assert "stopped" in turn.find_element(By.CSS_SELECTOR, ".stats").text
    assert "400 end" not in text.text
    assert poll(lambda: cancelled(server) == 1, timeout=WAIT)


def cancelled(server: Server) -> float:
    text = httpx.get(server.base_url + "/metrics", headers={"Authorization": f"Bearer {API_KEY}"}).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "sluicegate_generations_cancelled_total" and sample.labels == {"model": MODEL}:
                return float(sample.value)
    return 0.0


def test_anthropic_messages(server: Server, browser: WebDriver) -> None:
    probe = httpx.post(
        server.base_url + "/v1/messages", json={}, headers={"Authorization": f"Bearer {API_KEY}"}
    )
    if probe.status_code == 404 and "unknown_route" in probe.text:
        pytest.skip("POST /v1/messages is not on this branch yet")
    open_page(browser, server)
    turn = send(browser, "anthropic", "Hello there")
    assert turn.find_element(By.CSS_SELECTOR, ".text").text == PLAIN_REPLY
    body = turn.find_element(By.CSS_SELECTOR, "details.reasoning .body").get_attribute("textContent")
    assert body == "A plain question; no tool needed."
    assert " in · " in turn.find_element(By.CSS_SELECTOR, ".stats").text
    assert not turn.find_elements(By.CSS_SELECTOR, ".error")
    turn = send(browser, "anthropic", "What do my notes say?")  # the server runs read_file unseen
    assert turn.find_element(By.CSS_SELECTOR, ".text").text == NOTES_REPLY
    log = turn.find_element(By.CSS_SELECTOR, ".log").get_attribute("textContent") or ""
    final = [json.loads(line[6:]) for line in log.splitlines() if '"message_delta"' in line][-1]
    shown = turn.find_element(By.CSS_SELECTOR, ".stats").text
    assert shown.startswith(f"{final['usage']['input_tokens']} in · {final['usage']['output_tokens']} out")
    browser.save_screenshot(str(ARTIFACTS / "playground-anthropic.png"))
