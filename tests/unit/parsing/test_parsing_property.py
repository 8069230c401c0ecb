"""parsing: however the text is chunked, the parse is the same as the one-shot parse."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from parsing_support import M, collapse, run
from sluicegate.parsing import FAMILIES, THINK, ToolCallFormat

FRAGMENTS = [
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<|python_tag|>",
    "[TOOL_CALLS]",
    "[ARGS]",
    "[CALL_ID]",
    '{"name": "f", "arguments": {"a": "x}"}}',
    '{"name": "g", "parameters": {}}',
    '[{"name": "h", "arguments": {}}]',
    "{",
    "}",
    "[",
    "]",
    '"',
    "\\",
    ";",
    "\n",
    " ",
    "<",
    "a < b",
    "hello",
    "é🙂",
]

texts = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=3), max_size=14).map("".join)
configs = st.fixed_dictionaries(
    {
        "tool_format": st.sampled_from([ToolCallFormat.NONE, *(ToolCallFormat(f.name) for f in FAMILIES)]),
        "reasoning": st.sampled_from([None, THINK]),
        "starts_in_reasoning": st.booleans(),
    }
)


def chunk(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


@settings(max_examples=400, deadline=None)
@given(text=texts, cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=12), config=configs)
def test_any_chunking_parses_like_the_whole(text: str, cuts: list[int], config: dict[str, Any]) -> None:
    whole = collapse(run([text], **config))
    assert collapse(run(chunk(text, cuts), **config)) == whole
    opener = {ToolCallFormat("hermes"): "<tool_call>", ToolCallFormat("mistral"): "[TOOL_CALLS]"}
    if config["tool_format"] in opener:  # the call markup never reaches the message text
        assert not any(kind == M and opener[config["tool_format"]] in part[0] for kind, *part in whole)


@settings(max_examples=200, deadline=None)
@example(text=" \n", cuts=[1])
@example(text="hi there \n", cuts=[3, 8])
@given(
    # Without these no family's markup can be written: tags, lists, objects, and the fence of
    # Command R+'s `Action: ```json` (Hypothesis draws string constants of the code under test).
    text=st.text(alphabet=st.characters(exclude_characters="<[{`"), max_size=40),
    cuts=st.lists(st.integers(0, 60)),
)
def test_text_without_markup_passes_through_unchanged(text: str, cuts: list[int]) -> None:
    for tool_format in [ToolCallFormat.NONE, *(ToolCallFormat(f.name) for f in FAMILIES)]:
        if tool_format in (ToolCallFormat("functionary_v3_2"), ToolCallFormat("muse_glimmer")):
            continue  # its every message starts with a recipient line: text alone is not its output
        events = collapse(run(chunk(text, cuts), tool_format=tool_format, reasoning=THINK))
        expected = text if text.strip() else ""  # whitespace alone is no message
        assert events == ([(M, expected)] if expected else []), tool_format
