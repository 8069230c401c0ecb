"""Helpers for the playground page tests (Selenium): open the page with the key typed in. Import
it after `browser_support`, which skips a module where Chromium or Selenium is missing."""

from __future__ import annotations

from e2e_support import Server
from playground_support import API_KEY, MODEL
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.wait import WebDriverWait

WAIT = 30.0  # an upper bound for waits, never a pass condition


def models_listed(browser: WebDriver) -> list[str]:
    return [o.get_attribute("value") or "" for o in Select(browser.find_element(By.ID, "model")).options]


def open_page(browser: WebDriver, server: Server) -> None:
    """The page (loaded again) with the key typed in (and so kept in localStorage), its models
    listed (both lists arrive together)."""
    browser.get(server.base_url + "/")
    key = browser.find_element(By.ID, "api-key")
    if key.get_attribute("value") != API_KEY:
        key.clear()
        key.send_keys(API_KEY)
        browser.execute_script("arguments[0].dispatchEvent(new Event('change'))", key)
    WebDriverWait(browser, WAIT).until(lambda b: MODEL in models_listed(b))
