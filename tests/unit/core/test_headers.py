"""Client text in response headers: percent-encoded where a header cannot carry it."""

from __future__ import annotations

from urllib.parse import unquote

import pytest

from sluicegate.core.headers import header_value
from sluicegate.dialects.responses.hosted import HostedTools


@pytest.mark.parametrize("text", ["🙂", "a\r\nX-Injected: 1", "nul\x00", "é", "50%", "tab\there", "\x7f"])
def test_header_values_are_printable_ascii_and_round_trip(text: str) -> None:
    value = header_value(text)
    assert value.isascii() and value.isprintable()
    assert unquote(value) == text
    value.encode("latin-1")


def test_plain_text_is_kept_as_it_is() -> None:
    assert header_value("web_search, file_search") == "web_search, file_search"


def test_ignored_tool_names_stay_one_list_item_each() -> None:
    header = HostedTools(ignored=["a,b", "🙂", "web_search"]).headers()["X-Sluicegate-Ignored-Tools"]
    assert [unquote(part) for part in header.split(",")] == ["a,b", "🙂", "web_search"]
