"""The playground as a page people keep open, in a real headless Chromium against a real server:
answers rendered as Markdown (safely) while they stream, conversations kept across reloads and
switched between, a dialect switch that re-sends the conversation in the new dialect's shape
(the scripted `echo` model answers with what reached it), sampling settings in each dialect's
field names, image attachment in each dialect's shape (and a model that takes no images saying
so in words), copy buttons, the keyboard, a dark theme and a 360 px wide screen. Screenshots
are kept under tests/artifacts/."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Server, scripted
from playground_support import API_KEY, ARTIFACTS, MODEL, PLAIN_REPLY, StartServer
from upstream_support import dead_url, upstream_model

pytestmark = pytest.mark.e2e

WAIT = 30.0  # an upper bound for waits, never a pass condition

webdriver = pytest.importorskip("selenium.webdriver")
from browser_support import browser  # noqa: E402  (a fixture; skips the module without Chromium)
from playground_page import open_page as open_playground  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.remote.webelement import WebElement  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402

__all__ = ["browser"]

ECHO, BLIND = "echo", "blind"  # BLIND: an upstream model that takes no images (never reached)

# Records each POST the page makes (its URL and JSON body) in window.__sent.
SPY = """
window.__sent = [];
const original = window.fetch;
window.fetch = (url, init) => {
  if (init && init.method === "POST") window.__sent.push({url: String(url), body: JSON.parse(init.body)});
  return original(url, init);
};
"""


@pytest.fixture(scope="module")
def server(start_server: StartServer) -> Server:
    models = [
        scripted(MODEL, "playground.yaml"),
        scripted(ECHO, "echo.yaml"),
        upstream_model(BLIND, dead_url()),
    ]
    return start_server({"api_key": API_KEY}, models)


def png(path: Path) -> Path:
    """A real 16 by 16 red PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xdc\x14\x14" * 16 for _ in range(16))
    header = struct.pack(">IIBBBBB", 16, 16, 8, 2, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )
    return path


def open_page(browser: WebDriver, server: Server) -> None:
    """The page (loaded again) with the key typed in, its models listed, and the request spy."""
    open_playground(browser, server)
    browser.execute_script(SPY)


def choose(browser: WebDriver, dialect: str, model: str) -> None:
    Select(browser.find_element(By.ID, "dialect")).select_by_value(dialect)
    Select(browser.find_element(By.ID, "model")).select_by_value(model)


def send(browser: WebDriver, text: str) -> WebElement:
    """Type `text`, press Enter, and return the assistant turn once it has finished."""
    finished = len(browser.find_elements(By.CSS_SELECTOR, ".turn.assistant.finished"))
    prompt = browser.find_element(By.ID, "prompt")
    prompt.send_keys(text)
    prompt.send_keys(Keys.ENTER)
    turns: list[WebElement] = WebDriverWait(browser, WAIT).until(
        lambda b: (t := b.find_elements(By.CSS_SELECTOR, ".turn.assistant.finished"))[finished:] and t
    )
    return turns[-1]


def sent(browser: WebDriver) -> list[dict[str, Any]]:
    requests: list[dict[str, Any]] = browser.execute_script("return window.__sent")
    return requests


def answer(turn: WebElement) -> str:
    """The answer as shown (the echo's lines are lines of one paragraph: <br>s)."""
    errors = turn.find_elements(By.CSS_SELECTOR, ".error")
    assert not errors, errors[0].text
    return str(turn.find_element(By.CSS_SELECTOR, ".text").text)


def chat_titles(browser: WebDriver) -> list[str]:
    return [b.text for b in browser.find_elements(By.CSS_SELECTOR, "#chat-list .open")]


def test_a_markdown_answer_renders_safely_as_it_streams(server: Server, browser: WebDriver) -> None:
    open_page(browser, server)
    choose(browser, "chat", MODEL)
    # Count the heading's replacements while the answer streams: only the block that changes
    # is re-rendered, so the heading is replaced while its own words arrive and then left be.
    browser.execute_script(
        """window.__h2Removed = 0;
        new MutationObserver((records) => { for (const r of records) for (const n of r.removedNodes)
          if (n.nodeName === 'H2') window.__h2Removed += 1; })
          .observe(document.getElementById('conversation'), {childList: true, subtree: true});"""
    )
    turn = send(browser, "Show me markdown, please")
    md = turn.find_element(By.CSS_SELECTOR, ".text.md")
    assert md.find_element(By.TAG_NAME, "h2").text == "A heading"
    assert md.find_element(By.TAG_NAME, "strong").text == "bold"
    assert md.find_element(By.TAG_NAME, "em").text == "emphasis"
    assert md.find_element(By.CSS_SELECTOR, "p > code").text == "inline code"
    assert [li.text for li in md.find_elements(By.CSS_SELECTOR, "ul > li")] == ["first item", "second item"]
    code = md.find_element(By.CSS_SELECTOR, ".code pre code.language-python")
    assert code.get_attribute("textContent") == 'def hello(name):\n    return f"<hello {name}>"'
    assert [th.text for th in md.find_elements(By.TAG_NAME, "th")] == ["dialect", "path"]
    assert md.find_element(By.TAG_NAME, "td").text == "chat"
    # Safe: only the http(s) link is a link, and the raw HTML is shown as text, not run.
    links = [a.get_attribute("href") for a in md.find_elements(By.TAG_NAME, "a")]
    assert links == ["https://example.com/docs"]
    assert "bad link" in md.text
    assert not md.find_elements(By.TAG_NAME, "img")
    assert "<img src=x onerror=" in md.text
    assert browser.title == "Sluicegate playground"
    deltas = len(
        [
            line
            for line in (
                turn.find_element(By.CSS_SELECTOR, ".log").get_attribute("textContent") or ""
            ).splitlines()
            if line.startswith("data: ")
        ]
    )
    removed = browser.execute_script("return window.__h2Removed")
    assert deltas > 40 and removed <= 3, (deltas, removed)

    # The copy button on the code block puts the code on the clipboard.
    browser.execute_cdp_cmd(
        "Browser.grantPermissions",
        {"origin": server.base_url, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]},
    )
    button = md.find_element(By.CSS_SELECTOR, ".code button.copy")
    button.click()
    WebDriverWait(browser, WAIT).until(lambda _: button.text == "Copied")
    clipboard = browser.execute_async_script(
        "navigator.clipboard.readText().then(arguments[0], (e) => arguments[0](String(e)))"
    )
    assert clipboard == code.get_attribute("textContent")
    turn.find_element(By.CSS_SELECTOR, ".head button.copy").click()  # the whole answer, as Markdown
    clipboard = browser.execute_async_script(
        "navigator.clipboard.readText().then(arguments[0], (e) => arguments[0](String(e)))"
    )
    assert clipboard.startswith("## A heading\n\nSome **bold**") and "```python\n" in clipboard
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "playground-markdown.png"))


HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "[x](javascript:alert(1)) [y](JaVaScRiPt:alert(1)) [z](data:text/html,<script>alert(1)</script>)",
    '[x](https://a.example/" onmouseover="alert(1))',
    '[x](https://a.example/a)"onmouseover="alert(1)',
    'https://a.example/"><script>alert(1)</script>',
    "`<b>code</b>` **<svg onload=alert(1)>**",
    '```js" onclick="alert(1)\n<script>alert(1)</script>\n```',
    "| <b>a</b> | b |\n|---|:-:|\n| <i onclick=x>c</i> | d |",
    "> <iframe src=https://a.example></iframe>\n\n- <a href=javascript:alert(1)>x</a>",
    "# <style>body{display:none}</style>",
]
ALLOWED_TAGS = "P BR STRONG EM DEL CODE PRE A H1 H2 H3 H4 H5 H6 UL OL LI BLOCKQUOTE HR DIV SPAN TABLE THEAD TBODY TR TH TD BUTTON"


def test_markdown_lets_no_html_through(server: Server, browser: WebDriver) -> None:
    """Hostile answers rendered in the page: only the renderer's own tags and attributes, no
    event handlers, no link but http(s), and the hostile text still readable as text."""
    open_page(browser, server)
    found = browser.execute_script(
        """const [cases, tags] = arguments;
        const allowed = new Set(tags.split(' '));
        return cases.map((source) => {
          const div = document.createElement('div');
          Markdown.render(div, source);
          const bad = [...div.querySelectorAll('*')].filter((el) => !allowed.has(el.tagName)
            || [...el.attributes].some((a) => !['class', 'href', 'target', 'rel', 'style', 'start', 'type', 'aria-label'].includes(a.name)
              || (a.name === 'href' && !/^https?:/.test(a.value))
              || (a.name === 'style' && !/^text-align:(left|right|center)$/.test(a.value))));
          return {bad: bad.map((el) => el.outerHTML), text: div.textContent};
        });""",
        HOSTILE,
        ALLOWED_TAGS,
    )
    for source, result in zip(HOSTILE, found, strict=True):
        assert result["bad"] == [], source
    assert "<script>alert(1)</script>" in found[0]["text"]
    assert "onerror=alert(1)" in found[1]["text"]


def fresh_markdown_chat(browser: WebDriver, server: Server) -> None:
    """No conversations kept but one, with the Markdown answer."""
    open_page(browser, server)
    browser.execute_script("localStorage.removeItem('sluicegate.conversations')")
    open_page(browser, server)
    choose(browser, "chat", MODEL)
    send(browser, "Show me markdown, please")


def test_conversations_survive_a_reload_and_can_be_switched(server: Server, browser: WebDriver) -> None:
    fresh_markdown_chat(browser, server)
    open_page(browser, server)  # a reload: the conversation is still there
    assert chat_titles(browser) == ["Show me markdown, please"]
    md = browser.find_element(By.CSS_SELECTOR, ".turn.assistant .text.md")
    assert md.find_element(By.TAG_NAME, "h2").text == "A heading"
    assert md.find_element(By.CSS_SELECTOR, "code.language-python")
    assert browser.find_element(By.CSS_SELECTOR, ".turn.user .body").text == "Show me markdown, please"

    browser.find_element(By.ID, "clear").click()
    assert not browser.find_elements(By.CSS_SELECTOR, "#conversation .turn")
    choose(browser, "responses", MODEL)
    assert answer(send(browser, "Hello there")) == PLAIN_REPLY
    assert chat_titles(browser) == ["Hello there", "Show me markdown, please"]

    browser.find_element(By.XPATH, "//*[@id='chat-list']//button[text()='Show me markdown, please']").click()
    assert browser.find_element(By.CSS_SELECTOR, ".turn.assistant h2").text == "A heading"
    open_page(browser, server)  # the conversation picked is the one restored
    assert browser.find_element(By.CSS_SELECTOR, ".turn.assistant h2").text == "A heading"

    hello = browser.find_element(By.XPATH, "//*[@id='chat-list']/li[button[text()='Hello there']]")
    hello.find_element(By.CSS_SELECTOR, ".rename").click()
    title = browser.switch_to.active_element
    title.send_keys(Keys.CONTROL, "a")
    title.send_keys("Greetings", Keys.ENTER)
    assert chat_titles(browser) == ["Greetings", "Show me markdown, please"]
    open_page(browser, server)
    assert chat_titles(browser) == ["Greetings", "Show me markdown, please"]

    greetings = browser.find_element(By.XPATH, "//*[@id='chat-list']/li[button[text()='Greetings']]")
    greetings.find_element(By.CSS_SELECTOR, ".delete").click()
    assert chat_titles(browser) == ["Show me markdown, please"]
    open_page(browser, server)
    assert chat_titles(browser) == ["Show me markdown, please"]


def test_a_dialect_switch_resends_the_conversation(server: Server, browser: WebDriver) -> None:
    open_page(browser, server)
    browser.find_element(By.ID, "clear").click()
    browser.find_element(By.ID, "temperature").send_keys("0.3")
    browser.find_element(By.ID, "max-tokens").send_keys("3000")
    Select(browser.find_element(By.ID, "effort")).select_by_value("low")
    browser.execute_script(
        "for (const id of ['temperature', 'max-tokens']) document.getElementById(id).dispatchEvent(new Event('change'))"
    )

    choose(browser, "chat", ECHO)
    assert answer(send(browser, "first question")) == "user: first question"
    choose(browser, "responses", ECHO)
    reply = answer(send(browser, "second question"))
    assert reply == "user: first question\nassistant: user: first question\nuser: second question"
    choose(browser, "anthropic", ECHO)
    reply = answer(send(browser, "third question"))
    assert reply.startswith("user: first question\nassistant: user: first question\nuser: second question\n")
    assert reply.endswith("\nuser: third question")
    choose(browser, "lmstudio", ECHO)
    reply = answer(send(browser, "fourth question"))  # earlier turns made elsewhere: a transcript
    assert (
        "The conversation so far:" in reply
        and "User: first question" in reply
        and "User: third question" in reply
    )
    assert reply.endswith("fourth question")
    reply = answer(send(browser, "fifth question"))  # LM Studio's own chain from here
    assert "User: first question" in reply and reply.endswith("fifth question")
    assert len(browser.find_elements(By.CSS_SELECTOR, ".turn.user")) == 5
    assert not browser.find_elements(By.CSS_SELECTOR, ".turn .error")

    chat, responses, anthropic, lmstudio, lmstudio_again = (r["body"] for r in sent(browser))
    assert [m["role"] for m in chat["messages"]] == ["user"]
    assert (chat["temperature"], chat["max_completion_tokens"], chat["reasoning_effort"]) == (
        0.3,
        3000,
        "low",
    )
    assert [m["role"] for m in responses["input"]] == ["user", "assistant", "user"]
    assert (responses["max_output_tokens"], responses["reasoning"]) == (3000, {"effort": "low"})
    assert [m["role"] for m in anthropic["messages"]] == ["user", "assistant"] * 2 + ["user"]
    assert (anthropic["max_tokens"], anthropic["temperature"]) == (3000, 0.3)
    assert anthropic["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert anthropic["output_config"] == {"effort": "low"}
    assert "previous_response_id" not in lmstudio and lmstudio["input"][-1] == {
        "type": "text",
        "content": "fourth question",
    }
    assert (lmstudio["max_output_tokens"], lmstudio["reasoning"]) == (3000, "on")  # echo's: off, on
    assert lmstudio_again["previous_response_id"] and lmstudio_again["input"] == "fifth question"

    # A response id the server no longer has (restarted, say): the turns go as a transcript.
    browser.execute_script(
        """const saved = JSON.parse(localStorage.getItem('sluicegate.conversations'));
        const chat = saved.chats.find((c) => c.id === saved.current);
        chat.messages[chat.messages.length - 1].responseId = 'resp_gone';
        localStorage.setItem('sluicegate.conversations', JSON.stringify(saved));"""
    )
    open_page(browser, server)  # the settings are remembered, too
    choose(browser, "lmstudio", ECHO)
    reply = answer(send(browser, "sixth question"))
    assert "The conversation so far:" in reply and "User: fifth question" in reply, reply
    stale, retried = (r["body"] for r in sent(browser))
    assert stale["previous_response_id"] == "resp_gone" and "previous_response_id" not in retried

    assert browser.find_element(By.ID, "temperature").get_attribute("value") == "0.3"
    assert browser.find_element(By.ID, "max-tokens").get_attribute("value") == "3000"
    assert Select(browser.find_element(By.ID, "effort")).first_selected_option.get_attribute("value") == "low"
    browser.execute_script("localStorage.removeItem('sluicegate.playground')")


def test_an_image_goes_in_every_dialects_shape(server: Server, browser: WebDriver, tmp_path: Path) -> None:
    image = png(tmp_path / "red.png")
    open_page(browser, server)
    browser.find_element(By.ID, "clear").click()

    def attach_and_send(text: str) -> WebElement:
        browser.find_element(By.ID, "attach-file").send_keys(str(image))
        WebDriverWait(browser, WAIT).until(lambda b: b.find_elements(By.CSS_SELECTOR, "#attachments img"))
        return send(browser, text)

    marker = "[image data:image/png;base64"
    for dialect in ("chat", "responses", "anthropic", "lmstudio"):
        choose(browser, dialect, ECHO)
        reply = answer(attach_and_send(f"What is in this picture ({dialect})?"))
        assert reply.split("\n")[-1].startswith(f"user: What is in this picture ({dialect})? {marker}") or (
            dialect == "lmstudio" and marker in reply.split("\n")[-1]
        ), (dialect, reply)
        assert not browser.find_elements(By.CSS_SELECTOR, "#attachments img")  # sent, so cleared
    assert len(browser.find_elements(By.CSS_SELECTOR, ".turn.user .images img")) == 4

    chat, responses, anthropic, lmstudio = (r["body"] for r in sent(browser))
    url = chat["messages"][-1]["content"][1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert chat["messages"][-1]["content"] == [
        {"type": "text", "text": "What is in this picture (chat)?"},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    assert responses["input"][-1]["content"][1] == {"type": "input_image", "image_url": url}
    assert responses["input"][0]["content"][1] == {"type": "input_image", "image_url": url}  # re-sent
    data = url.split(",", 1)[1]
    assert anthropic["messages"][-1]["content"][0] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": data},
    }
    assert lmstudio["input"][-1] == {"type": "image", "data_url": url}

    choose(browser, "chat", BLIND)  # a model that takes no images: the error, in words
    turn = attach_and_send("And this one?")
    assert "does not accept image input" in turn.find_element(By.CSS_SELECTOR, ".error").text
    assert "failed" in turn.find_element(By.CSS_SELECTOR, ".stats").text
    browser.save_screenshot(str(ARTIFACTS / "playground-image.png"))


def test_the_keyboard_sends_and_stops(server: Server, browser: WebDriver) -> None:
    open_page(browser, server)
    browser.find_element(By.ID, "clear").click()
    choose(browser, "chat", MODEL)
    prompt = browser.find_element(By.ID, "prompt")
    prompt.send_keys("crawl along", Keys.ENTER)  # Enter sends
    text = WebDriverWait(browser, WAIT).until(
        lambda b: b.find_element(By.CSS_SELECTOR, ".turn.assistant .text")
    )
    WebDriverWait(browser, WAIT).until(lambda _: "crawling 1 2" in text.text)
    browser.switch_to.active_element.send_keys(Keys.ESCAPE)  # Escape stops
    turn = WebDriverWait(browser, WAIT).until(
        lambda b: b.find_element(By.CSS_SELECTOR, ".turn.assistant.finished")
    )
    assert "stopped" in turn.find_element(By.CSS_SELECTOR, ".stats").text
    assert "400 end" not in text.text
    prompt.send_keys(Keys.TAB)  # from the message to the Send button
    assert browser.switch_to.active_element.get_attribute("id") == "send"


def test_a_phone_screen_and_a_dark_system_theme(server: Server, browser: WebDriver) -> None:
    fresh_markdown_chat(browser, server)
    metrics = {"width": 360, "height": 780, "deviceScaleFactor": 2, "mobile": True}
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    try:
        open_page(browser, server)
        WebDriverWait(browser, WAIT).until(lambda b: b.find_elements(By.CSS_SELECTOR, ".turn.assistant h2"))
        assert browser.execute_script("return window.innerWidth") == 360
        assert (
            browser.execute_script("return document.documentElement.scrollWidth") <= 360
        )  # no sideways scroll
        for element in ("prompt", "send", "dialect", "model"):
            box = browser.find_element(By.ID, element).rect
            assert box["x"] >= 0 and box["x"] + box["width"] <= 360, element
        browser.save_screenshot(str(ARTIFACTS / "playground-360.png"))
        browser.execute_script("window.scrollTo(0, 0)")
        browser.save_screenshot(str(ARTIFACTS / "playground-360-top.png"))

        browser.execute_cdp_cmd(
            "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]}
        )
        background = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(15, 17, 23)"
        browser.save_screenshot(str(ARTIFACTS / "playground-360-dark.png"))
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
