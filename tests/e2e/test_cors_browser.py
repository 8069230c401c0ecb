"""A page served from another loopback origin, in Chromium, streams a chat from the server with
`cors_origins` set, and is refused (fetch's network error) without it."""

from __future__ import annotations

import pytest
from conftest import StartServer
from cors_support import KEY, MODELS, page_origin
from e2e_support import DEFAULT_REPLY, Server

pytestmark = pytest.mark.e2e

webdriver = pytest.importorskip("selenium.webdriver")
from browser_support import browser  # noqa: E402  (a fixture; skips the module without Chromium)
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402

__all__ = ["browser", "page_origin"]

WAIT = 30.0  # an upper bound for the page's script, never a pass condition

# Runs in the page of the other origin: streams a chat, reads it to its end, and hands back the
# text, or the error the browser raised.
STREAM_A_CHAT = """
const [url, key, done] = [arguments[0], arguments[1], arguments[arguments.length - 1]];
(async () => {
  const response = await fetch(url + "/v1/chat/completions", {
    method: "POST",
    headers: {"Content-Type": "application/json", "Authorization": "Bearer " + key},
    body: JSON.stringify({model: "chat", stream: true, messages: [{role: "user", content: "hi"}]}),
  });
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let sse = "", text = "";
  for (;;) {
    const {value, done: ended} = await reader.read();
    if (ended) break;
    sse += value;
  }
  for (const line of sse.split("\\n")) {
    if (line.startsWith("data: {")) text += JSON.parse(line.slice(6)).choices[0]?.delta?.content ?? "";
  }
  return "ok:" + text;
})().then(done, (error) => done("error:" + error.name + ": " + error.message));
"""


@pytest.fixture(scope="module")
def allowing(start_server: StartServer, page_origin: str) -> Server:
    return start_server({"api_key": KEY, "cors_origins": [page_origin]}, MODELS)


@pytest.fixture(scope="module")
def refusing(start_server: StartServer) -> Server:
    return start_server({"api_key": KEY}, MODELS)


def run_in_page(driver: WebDriver, page_origin: str, server: Server) -> str:
    driver.get(page_origin + "/")
    driver.set_script_timeout(WAIT)
    result: str = driver.execute_async_script(STREAM_A_CHAT, server.base_url, KEY)
    return result


def test_a_page_on_another_origin_streams_a_chat(
    browser: WebDriver, allowing: Server, page_origin: str
) -> None:
    assert run_in_page(browser, page_origin, allowing) == "ok:" + DEFAULT_REPLY


def test_without_cors_origins_the_browser_refuses(
    browser: WebDriver, refusing: Server, page_origin: str
) -> None:
    result = run_in_page(browser, page_origin, refusing)
    assert result.startswith("error:TypeError"), result  # the browser's CORS refusal
