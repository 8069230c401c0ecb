"""Harmony: text that only begins like a header is the model's message, not a header to drop."""

from __future__ import annotations

import pytest

from parsing_support import M, collapse, run
from sluicegate.parsing import THINK, ToolCallFormat


def parse(pieces: list[str]) -> list[tuple[str, ...]]:
    return collapse(run(pieces, tool_format=ToolCallFormat("harmony"), reasoning=THINK))


@pytest.mark.parametrize("text", ["to=abc hello", "to= x", "assistant to=x and more"])
def test_plain_text_beginning_like_a_recipient_is_kept(text: str) -> None:
    assert parse([text]) == [(M, text)]
    assert parse(list(text)) == [(M, text)]


@pytest.mark.parametrize("text", ["to=functions.f", " to=functions.f ", "assistant to=functions.f"])
def test_a_header_cut_off_at_its_recipient_says_nothing(text: str) -> None:
    assert parse([text]) == []
