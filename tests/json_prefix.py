"""Whether a text is the beginning of some JSON document: what an answer cut by `max_tokens`
under a JSON grammar must be (the grammar was never violated, the text just stopped).

Sound by construction: a text counts only when one of a few short endings (close the string or
escape, finish the literal or number, finish the member, then close every open bracket) makes
`json.loads` accept it. Those endings cover every place a valid prefix can stop.
"""

from __future__ import annotations

import json
from itertools import product

# What ends the token in progress: a string (or its escape), a literal, a number.
_TOKEN_ENDINGS = (
    "",
    '"',
    'n"',
    '0000"',
    '000"',
    '00"',
    '0"',
    "0",
    "rue",
    "ue",
    "e",
    "alse",
    "lse",
    "se",
    "ull",
    "ll",
    "l",
)
# What ends the member or element in progress: a key's colon and value, a value, a key too.
_MEMBER_ENDINGS = ("", ":0", "0", '"":0')


def _open_brackets(text: str) -> list[str]:
    stack: list[str] = []
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            stack.append(char)
        elif char in "]}" and stack:
            stack.pop()
    return stack


def is_json_prefix(text: str) -> bool:
    closers = "".join("}" if bracket == "{" else "]" for bracket in reversed(_open_brackets(text)))
    for token, member in product(_TOKEN_ENDINGS, _MEMBER_ENDINGS):
        try:
            json.loads(text + token + member + closers)
        except json.JSONDecodeError:
            continue
        return True
    return False
