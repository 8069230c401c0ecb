"""What a family declares for constrained decoding, as plain data: how one forced tool call is
written in its markup, and the markup a grammar writes around an answer (a JSON output's
header, a reasoning block). The engine (engines/llamacpp/call_grammar.py) turns these into a
grammar; what the grammar makes, the family's output parser reads back.

Each shape takes the tool's name and writes the text around its arguments:

- `ObjectCall`: one JSON object `{"name": NAME, ARGS_KEY: ARGUMENTS}` between two texts,
  compiled as one schema (Hermes, Mistral, Llama 3).
- `JsonCall`: the arguments as one JSON value between two texts.
- `ParamsCall`: one tag pair per parameter, required parameters first, each value a JSON value
  or, for a string, its plain text (`param(key, plain)` gives the tags).
- `PythonCall`: `[name(key=VALUE, ...)]`, each value JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ObjectCall:
    before: str
    after: str
    arguments_key: str = "arguments"


@dataclass(frozen=True, slots=True)
class JsonCall:
    before: Callable[[str], str]
    after: str


@dataclass(frozen=True, slots=True)
class ParamsCall:
    head: Callable[[str], str]
    param: Callable[[str, bool], tuple[str, str]]  # (key, written as plain text) -> open, close
    tail: str


@dataclass(frozen=True, slots=True)
class PythonCall:
    before: str
    after: str


CallShape = ObjectCall | JsonCall | ParamsCall | PythonCall


def params_call(head: Callable[[str], str], param: Callable[[str], tuple[str, str]], tail: str) -> ParamsCall:
    """A `ParamsCall` whose tags do not depend on how the value is written."""
    return ParamsCall(head, lambda key, plain: param(key), tail)


def json_object_call(before: str, name_key: str, args_key: str, after: str) -> JsonCall:
    """`{"NAME_KEY": name, "ARGS_KEY": ARGUMENTS}` between the family's markers."""
    return JsonCall(
        lambda n: f"{before}{{{json.dumps(name_key)}: {json.dumps(n)}, {json.dumps(args_key)}: ",
        "}" + after,
    )


@dataclass(frozen=True, slots=True)
class ThoughtBlock:
    """A reasoning block as a grammar writes it, where it is not the reasoning tags: gpt-oss's
    analysis channel. `resume` leads from the block's end to the answer; `repeats`: the
    model may write several blocks."""

    open: str
    close: str
    resume: str = ""
    repeats: bool = False


@dataclass(frozen=True, slots=True)
class AnswerMarkup:
    """The markup a family writes before its answer. `output_header`: before a JSON output
    (not before a call). `thought`: its reasoning block, where it is not the reasoning tags.
    `thought_in_grammar`: the reasoning opens with several tokens, which the engine's watch for
    a one-token open tag cannot see, so a JSON output's grammar writes the block too."""

    output_header: str = ""
    thought: ThoughtBlock | None = None
    thought_in_grammar: bool = False


PLAIN_ANSWER = AnswerMarkup()
