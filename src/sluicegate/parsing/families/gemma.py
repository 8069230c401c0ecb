"""Gemma 4: reasoning in `<|channel>thought … <channel|>`, calls in Gemma's own value syntax
(bare keys, strings between `<|"|>` tokens):

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>
"""

from __future__ import annotations

import re

from sluicegate.parsing.calls import INVALID, parse_json
from sluicegate.parsing.families.base import Family, has, markup_family
from sluicegate.parsing.formats import ReasoningStyle
from sluicegate.parsing.jsonstream import compact, json_or_text
from sluicegate.parsing.markup import Markup
from sluicegate.parsing.readers import BufferedReader

QUOTE = '<|"|>'
_PUNCT = "{}[],:"
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def gemma_json(text: str) -> str | None:
    """Gemma's value syntax as JSON text, or None when it is not well formed."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith(QUOTE, i):
            j = text.find(QUOTE, i + len(QUOTE))
            if j == -1:
                return None
            out.append(compact(text[i + len(QUOTE) : j]))
            i = j + len(QUOTE)
        elif c == '"':  # a JSON string (what a grammar-forced call writes)
            m = _JSON_STRING.match(text, i)
            if m is None:
                return None
            out.append(m.group(0))
            i = m.end()
        elif c in _PUNCT:
            out.append(c)
            i += 1
        elif c.isspace():
            i += 1
        else:
            j = i
            while j < n and text[j] not in _PUNCT and not text.startswith(QUOTE, j):
                j += 1
            token = text[i:j].strip()
            is_key = text[j : j + 1] == ":"
            out.append(compact(token) if is_key else compact(json_or_text(token)))
            i = j
    joined = "".join(out)
    return None if parse_json(joined) is INVALID else joined


def gemma_calls(raw: str) -> list[tuple[str, str]] | None:
    body = raw.strip()
    if body.startswith("call:"):
        body = body[len("call:") :]
    brace = body.find("{")
    if brace == -1:
        return None
    args = gemma_json(body[brace:])
    return None if args is None else [(body[:brace].strip(), args)]


GEMMA4 = Family(
    "gemma4",
    has("<|tool_call>call:"),
    markup_family(
        Markup(
            calls=(("<|tool_call>", lambda tools: BufferedReader("<tool_call|>", gemma_calls)),),
            drop=("<eos>", "<|channel>thought", "<|channel>", "<channel|>"),
        )
    ),
    reasoning=ReasoningStyle("<|channel>thought", "<channel|>"),
    templates=("google-gemma-4-31B-it.jinja", "google-gemma-4-31B-it-interleaved.jinja"),
)
