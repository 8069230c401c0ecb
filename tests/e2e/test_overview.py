"""The operators' overview page (`/overview`) in Debian's headless Chromium, against a real
server: it reads `/metrics` with the key the user types and shows a generation while it is in
flight (model and dialect), the store's health and the model's figures; the generation leaves
the table when its client does. A screenshot is kept under tests/artifacts/."""

from __future__ import annotations

import threading

import httpx
import pytest
from e2e_support import Server, scripted
from playground_support import ARTIFACTS, StartServer

pytestmark = pytest.mark.e2e

webdriver = pytest.importorskip("selenium.webdriver")
from browser_support import browser  # noqa: E402  (a fixture; skips the module without Chromium)
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402

__all__ = ["browser"]

API_KEY = "sk-overview-test"
WAIT = 30.0  # an upper bound for waits, never a pass condition


@pytest.fixture(scope="module")
def server(start_server: StartServer) -> Server:
    return start_server({"api_key": API_KEY}, [scripted("slow", "slow.yaml"), scripted("echo", "echo.yaml")])


def rows(browser: WebDriver, table: str) -> list[list[str]]:
    """A table's cells, read in one script: the page redraws its tables every 2 s."""
    script = (
        "return [...document.querySelectorAll(arguments[0])].map(r => [...r.cells].map(c => c.textContent))"
    )
    cells: list[list[str]] = browser.execute_script(script, f"#{table} tbody tr")
    return cells


def test_the_page_needs_no_key_but_its_data_does(server: Server) -> None:
    page = httpx.get(server.base_url + "/overview")
    assert page.status_code == 200 and "Sluicegate overview" in page.text
    assert httpx.get(server.base_url + "/playground/overview.js").status_code == 200
    assert httpx.get(server.base_url + "/metrics").status_code == 401


def test_a_generation_in_flight_shows_and_leaves(server: Server, browser: WebDriver) -> None:
    browser.get(server.base_url + "/overview")
    status = browser.find_element(By.ID, "status")
    WebDriverWait(browser, WAIT).until(lambda _: "401" in status.text)  # no key yet
    key = browser.find_element(By.ID, "api-key")
    key.send_keys(API_KEY)
    browser.execute_script("arguments[0].dispatchEvent(new Event('change'))", key)
    WebDriverWait(browser, WAIT).until(lambda b: b.find_element(By.ID, "store").text == "up")

    headers = {"Authorization": f"Bearer {API_KEY}"}
    httpx.post(
        server.base_url + "/v1/chat/completions",
        json={"model": "echo", "messages": [{"role": "user", "content": "first"}]},
        headers=headers,
        timeout=30,
    ).raise_for_status()
    started, leave = threading.Event(), threading.Event()

    def stream() -> None:
        body = {"model": "slow", "messages": [{"role": "user", "content": "go"}], "stream": True}
        with httpx.stream(
            "POST", server.base_url + "/v1/chat/completions", json=body, headers=headers, timeout=60
        ) as response:
            for _ in response.iter_lines():
                started.set()
                if leave.is_set():
                    return  # closing the stream: the client goes away

    client = threading.Thread(target=stream, daemon=True)
    client.start()
    try:
        assert started.wait(WAIT)
        WebDriverWait(browser, WAIT).until(
            lambda b: ["slow", "chat_completions", "1", "0"] in rows(b, "generations")
        )
        # The slow reply's tokens are counted as they come: a live rate for it (the page compares
        # two scrapes), and a TTFT p50 for the echo request that has ended.
        WebDriverWait(browser, WAIT).until(
            lambda b: any(row[0] == "slow" and float(row[1]) > 0 for row in rows(b, "models"))
        )
        models = {row[0]: row for row in rows(browser, "models")}
        assert models["echo"][3] != "\u2013"  # the page shows an en dash for none
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / "overview.png"))
    finally:
        leave.set()
        client.join(WAIT)
    WebDriverWait(browser, WAIT).until(lambda b: not any(row[0] == "slow" for row in rows(b, "generations")))


ADMIN_KEY = "sk-overview-admin"


@pytest.fixture(scope="module")
def admin_server(start_server: StartServer) -> Server:
    return start_server({"admin_key": ADMIN_KEY}, [scripted("echo", "echo.yaml")])


def test_the_keys_table_shows_limits_usage_and_what_is_left(admin_server: Server, browser: WebDriver) -> None:
    admin = httpx.Client(base_url=admin_server.base_url, headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    made = admin.post(
        "/admin/keys",
        json={
            "name": "team-a",
            "owner": "red",
            "limits": {"rpm": 60, "concurrent": 2},
            "budget": {"tokens": 100000, "period": "day"},
        },
    )
    assert made.status_code == 201, made.text
    admin.post("/admin/keys", json={"name": "idle"}).raise_for_status()
    secret = made.json()["key"]
    httpx.post(
        admin_server.base_url + "/v1/chat/completions",
        json={"model": "echo", "messages": [{"role": "user", "content": "count me"}]},
        headers={"Authorization": f"Bearer {secret}"},
        timeout=30,
    ).raise_for_status()

    browser.get(admin_server.base_url + "/overview")
    status = browser.find_element(By.ID, "keys-status")
    WebDriverWait(browser, WAIT).until(lambda _: "admin key" in status.text)  # none typed yet
    assert rows(browser, "keys") == []
    field = browser.find_element(By.ID, "admin-key")
    field.send_keys(ADMIN_KEY)
    browser.execute_script("arguments[0].dispatchEvent(new Event('change'))", field)
    # The use is counted as the request ends: wait for it to show.
    WebDriverWait(browser, WAIT).until(
        lambda b: any(row[0] == "team-a" and row[3] == "1" for row in rows(b, "keys"))
    )
    table = {row[0]: row for row in rows(browser, "keys")}
    _name, owner, limits, requests, input_tokens, output_tokens, _cost, budget, left = table["team-a"]
    assert (owner, limits, requests) == ("red", "60 req/min, 2 at once", "1")
    assert int(input_tokens) > 0 and int(output_tokens) > 0
    assert budget == "100000 tokens/day"
    assert left == f"{100000 - int(input_tokens) - int(output_tokens)} tokens"
    assert table["idle"][1:4] == ["\u2013", "none", "0"] and table["idle"][7] == "none"
    # The admin key is kept for this tab only, and reads /metrics too (no API key typed).
    assert browser.execute_script("return sessionStorage.getItem('sluicegate.adminKey')") == ADMIN_KEY
    assert browser.execute_script("return localStorage.getItem('sluicegate.adminKey')") is None
    WebDriverWait(browser, WAIT).until(lambda b: b.find_element(By.ID, "store").text == "up")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "overview-keys.png"))
    admin.close()
