"""Forced tool calls in a family's own markup (`tool_choice` `required` or a tool's name), and
the markup a family writes around an answer under a grammar.

Each family declares how its call is written (`Family.call`, a shape of parsing/forced.py) and
the markup around its answer (`Family.answer`); this module turns the declaration into a
grammar around the arguments' JSON-schema rules, which come from grammar.py's converter
(`tool_rule`), one tool's rules renamed apart from another's. Key/value shapes get one rule per
parameter: a JSON value, or for a string the plain text the model writes between the tags.
What the grammar makes, the family's output parser reads back.

Where a family's answer sits inside markup, the grammar writes that markup too: gpt-oss's JSON
output goes in `<|channel|>final<|message|>`, and a family whose reasoning opens with more than
one token (gpt-oss's analysis channel, Gemma 4's `<|channel>thought`) may reason first, under
the grammar (the engine's watch for a one-token open tag cannot see those); `resume` then leads
from the end of a reasoning block the prompt opened to the answer.

A forced call ends in a call whatever the model writes: where the model reasons, the call's
grammar holds the reasoning block too (`holds_reasoning`), bounded and closed, so no token can
end the output inside it (issue 47: random weights ended MiniMax-M2's forced calls inside
`<think>`, where the engine's watch let any token through). The block gets at most a quarter of
`max_tokens` in characters, which leaves the call the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from sluicegate.core.errors import invalid
from sluicegate.core.request import ChatRequest, ToolSpec
from sluicegate.engines.llamacpp.grammar import (
    ANSWER,
    BEST_EFFORT_HEADER,
    Grammar,
    best_effort_header,
    call_schema,
    literal,
    request_grammar,
    tool_rule,
)
from sluicegate.parsing import Family, ReasoningStyle, family_named
from sluicegate.parsing.forced import CallShape, JsonCall, ObjectCall, ParamsCall, PythonCall, ThoughtBlock

_TEXT_LIMIT = 64  # characters of a string parameter without maxLength (a cut-off call is invalid)


_lit = literal


class _Rules:
    """The rules of one grammar as it is assembled."""

    def __init__(self, tool: ToolSpec | None = None) -> None:
        self.lines: list[str] = []
        self.count = 0
        self.tool = tool
        self.ignored: set[str] = set()

    def schema(self, schema: dict[str, Any]) -> str:
        """A rule for JSON valid against `schema`; its name."""
        assert self.tool is not None
        body, skipped = tool_rule(self.tool, schema)
        self.ignored.update(skipped)
        return self.add(body)

    def add(self, body: str) -> str:
        self.count += 1
        name = f"r{self.count}"
        self.lines.append(f"{name}: {body}")
        return name

    @staticmethod
    def plain(schema: Any) -> bool:
        """Whether `text_value` writes the parameter as plain text (else as JSON)."""
        return isinstance(schema, dict) and schema.get("type") == "string" and "pattern" not in schema

    def text_value(self, schema: Any) -> str:
        """A parameter between tags: a string's plain text (its enum, or bounded text), or JSON."""
        if self.plain(schema):
            assert isinstance(schema, dict)
            enum = schema.get("enum")
            if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
                return self.add(" | ".join(_lit(v) for v in enum))
            limit = min(int(schema.get("maxLength", _TEXT_LIMIT)), _TEXT_LIMIT)
            return self.add(f"/[^<\\n]{{1,{max(limit, 1)}}}/")
        return self.schema(schema if isinstance(schema, dict) else {})


def _params(params: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    found = params.get("properties")
    props: dict[str, Any] = found if isinstance(found, dict) else {}
    return props, [k for k in params.get("required", []) if k in props]


def _object_call(rules: _Rules, shape: ObjectCall, name: str, params: dict[str, Any]) -> str:
    """The whole call object as one schema (`name` a constant)."""
    body = rules.schema(call_schema(name, params, shape.arguments_key))
    return " ".join(
        p
        for p in (_lit(shape.before) if shape.before else "", body, _lit(shape.after) if shape.after else "")
        if p
    )


def _params_call(rules: _Rules, shape: ParamsCall, name: str, params: dict[str, Any]) -> str:
    """Key/value markup: required parameters in order, then the optional ones, each optional."""
    props, required = _params(params)
    parts = []
    for key in [*required, *(k for k in props if k not in required)]:
        open_, close = shape.param(key, rules.plain(props[key]))
        part = f"{_lit(open_)} {rules.text_value(props[key])} {_lit(close)}"
        parts.append(part if key in required else f"( {part} )?")
    return " ".join([_lit(shape.head(name)), *parts, _lit(shape.tail)])


def _python_call(rules: _Rules, shape: PythonCall, name: str, params: dict[str, Any]) -> str:
    """`[name(key=VALUE, ...)]`, each value JSON (a Python literal too, JSON's `true`, `false`
    and `null` aside, which the parser reads as well)."""
    props, required = _params(params)
    parts = [
        f"{_lit(k + '=')} {rules.schema(props[k] if isinstance(props[k], dict) else {})}"
        for k in required or list(props)
    ]
    inner = ' ", " '.join(parts)
    return f"{_lit(shape.before + '[' + name + '(')} {inner} {_lit(')]' + shape.after)}"


def _call(rules: _Rules, shape: CallShape, name: str, params: dict[str, Any]) -> str:
    if isinstance(shape, ObjectCall):
        return _object_call(rules, shape, name, params)
    if isinstance(shape, JsonCall):
        return f"{_lit(shape.before(name))} {rules.schema(params)} {_lit(shape.after)}"
    if isinstance(shape, ParamsCall):
        return _params_call(rules, shape, name, params)
    return _python_call(rules, shape, name, params)


def family_call_grammar(tools: list[ToolSpec], shape: CallShape) -> Grammar:
    """One call of one of `tools`, in the family's markup."""
    rules = _Rules()
    calls = []
    for tool in tools:
        rules.tool = tool
        params = tool.parameters or {"type": "object", "properties": {}}
        calls.append(rules.add(_call(rules, shape, tool.name, params)))
    text = "\n".join([f"{ANSWER}: {' | '.join(calls)}", *rules.lines]) + "\n"
    return Grammar(text, "tool_call", tuple(sorted(rules.ignored)))


@dataclass(frozen=True, slots=True)
class MarkupGrammar(Grammar):
    """A grammar whose `prefix` lets the family's markup (and reasoning) lead to the answer;
    `resume` leads there from the end of a reasoning block the prompt opened."""

    resume: str = ""

    def after_reasoning(self) -> Grammar:
        return replace(self, prefix=self.resume)


def _regex(text: str) -> str:
    """`text` matched literally inside a Lark `/regex/`."""
    return re.escape(text).replace("/", "\\/")


def _block(name: str, open_tag: str, close: str) -> str:
    """A terminal: `open_tag`, any text, `close` (once: the first `close` ends the block)."""
    o, c = _regex(open_tag), _regex(close)
    return f"{name}: /{o}(?s:.*){c}/ & ~/(?s:.*{c}.*{c}.*)/"


def _bounded_block(name: str, open_tag: str, close: str, limit: int) -> str:
    """A rule: `open_tag`, at most `limit` characters, `close`; lazy, so the first `close`
    ends it (an intersection with "no second close", as in `_block`, is too costly for
    llguidance to decide once the body is bounded)."""
    return f"{name}[lazy]: /{_regex(open_tag)}(?s:.{{0,{limit}}}){_regex(close)}/"


_THOUGHT, _BOUNDED, _BOUNDED_REST = "THOUGHT", "thought", "thought_rest"
_REASONING_CAP = 8192  # characters of reasoning before a forced call, at most
_AFTER_BLOCK = r"/[ \t\n]{0,4}/"


def _thought(family: Family, reasoning: ReasoningStyle) -> ThoughtBlock:
    return family.answer.thought or ThoughtBlock(reasoning.open_tag, reasoning.close_tag)


def in_family_markup(grammar: Grammar, family: Family, reasoning: ReasoningStyle | None) -> Grammar:
    """`grammar` with the markup the family writes before its answer: a JSON output's header,
    and the reasoning block where the engine's watch cannot see it open."""
    answer = family.answer
    output = grammar.purpose != "tool_call"
    header = f" {_lit(answer.output_header)}" if output and answer.output_header else ""
    if reasoning is None or not answer.thought_in_grammar:
        return replace(grammar, prefix=header.strip())
    thought = _thought(family, reasoning)
    block = _block(_THOUGHT, thought.open, thought.close)
    if thought.repeats:
        prefix, resume = f"{_THOUGHT}*{header}", f"{_lit(thought.resume)}{header}"
    else:
        prefix, resume = f"({_THOUGHT} {_AFTER_BLOCK})?{header}", f"{_AFTER_BLOCK}{header}"
    return MarkupGrammar(
        f"{grammar.text}{block}\n", grammar.purpose, grammar.ignored, prefix=prefix, resume=resume
    )


def _holding_reasoning(grammar: Grammar, family: Family, reasoning: ReasoningStyle, limit: int) -> Grammar:
    """A forced call with the reasoning before it in the grammar: an optional block, bounded and
    closed, then the call, from the first token (`inside`: the rest of a block the prompt
    opened, then the call). No token can end the output before the call."""
    thought = _thought(family, reasoning)
    after = "" if family.answer.thought else f" {_AFTER_BLOCK}"  # gpt-oss's block ends in a header
    block = _bounded_block(_BOUNDED, thought.open, thought.close, limit)
    rest = _bounded_block(_BOUNDED_REST, "", thought.close, limit)
    return replace(
        grammar,
        text=f"{grammar.text}{block}\n{rest}\n",
        prefix=f"({_BOUNDED}{after})?",
        holds_reasoning=True,
        inside=f"{_BOUNDED_REST}{after}",
    )


def reasoning_limit(max_tokens: int | None) -> int:
    """Characters of reasoning a forced call allows: a quarter of `max_tokens` (a token may
    write as little as a quarter of a character), so the call keeps the rest whatever the
    tokenizer; `_REASONING_CAP` at most."""
    return _REASONING_CAP if max_tokens is None else max(0, min(_REASONING_CAP, max_tokens // 4))


def forced_grammar(
    request: ChatRequest, tool_format: str, model_id: str, reasoning: ReasoningStyle | None = None
) -> Grammar | None:
    """The grammar a request asks for, or None: a forced call in the family's markup (it wins
    over `response_format`: the answer is a call, not a message), else `response_format`'s, with
    the family's markup (and reasoning, when `reasoning`) before the answer."""
    family = family_named(tool_format)
    choice = request.tool_choice
    if choice in ("auto", "none") or not request.tools:
        grammar = request_grammar(request)
        if grammar is None or family is None:  # no family: the answer is the grammar's alone
            return grammar
        return in_family_markup(grammar, family, reasoning)
    if family is None or family.call is None:
        raise invalid(
            f"tool_choice {choice!r} cannot be enforced: model {model_id!r} has no tool-call "
            "format (its chat template renders no tools; set `tool_call_format`).",
            param="tool_choice",
            code="unsupported_parameter",
        )
    tools = request.tools if choice == "required" else [t for t in request.tools if t.name == choice]
    if not tools:
        raise invalid(f"tool_choice names {choice!r}, which is not among the tools.", param="tool_choice")
    grammar = family_call_grammar(tools, family.call)
    if grammar.ignored:
        request.response_headers[BEST_EFFORT_HEADER] = best_effort_header(grammar)
    if reasoning is None:
        return grammar
    return _holding_reasoning(grammar, family, reasoning, reasoning_limit(request.sampling.max_tokens))
