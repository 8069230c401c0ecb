"""Forced tool calls in a family's own markup (`tool_choice` `required` or a tool's name).

grammar.py writes the calls of the first three formats (Hermes, Llama 3 JSON, Mistral); here
every other family's call markup becomes a GBNF grammar around the arguments' JSON-schema
rules, which come from grammar.py's converter (`json_schema_grammar`), one tool's rules renamed
apart from another's. Families with key/value parameters (Qwen3-Coder, GLM, MiniMax, Seed-OSS)
get one rule per parameter: a JSON value, or for a string the plain text the model writes
between the tags. What the grammar makes, the family's output parser reads back.

Where a family's answer sits inside markup, the grammar writes that markup too: Harmony's JSON
output goes in `<|channel|>final<|message|>`, and a family whose reasoning opens with more than
one token (Harmony's analysis channel, Gemma 4's `<|channel>thought`) may reason first, under
the grammar (the engine's watch for a one-token open tag cannot see those). A reasoning block
the prompt opened is watched as usual; `resume` is then what leads from its end to the answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sluicegate.core.errors import invalid
from sluicegate.core.request import ChatRequest, ToolSpec
from sluicegate.engines.llamacpp.grammar import ANSWER, Grammar, literal, request_grammar, tool_rule
from sluicegate.parsing import ReasoningStyle, ToolCallFormat
from sluicegate.parsing.families import deepseek as ds
from sluicegate.parsing.families import deepseek_dsml as dsml
from sluicegate.parsing.families import hy3
from sluicegate.parsing.families import minimax_m3 as m3
from sluicegate.parsing.families.harmony import CHANNEL, MESSAGE, START

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


Call = Callable[[_Rules, str, dict[str, Any]], str]  # rules, tool name, parameters -> call rule body


def _json_call(before: Callable[[str], str], after: str) -> Call:
    def call(rules: _Rules, name: str, params: dict[str, Any]) -> str:
        return f"{_lit(before(name))} {rules.schema(params)} {_lit(after)}"

    return call


def _params_call(head: Callable[[str], str], param: Callable[[str], tuple[str, str]], tail: str) -> Call:
    """Key/value markup: required parameters in order, then the optional ones, each optional."""
    return _typed_params_call(head, lambda key, plain: param(key), tail)


def _typed_params_call(
    head: Callable[[str], str], param: Callable[[str, bool], tuple[str, str]], tail: str
) -> Call:
    """`_params_call` where a parameter's tags say whether its value is plain text (DSML)."""

    def call(rules: _Rules, name: str, params: dict[str, Any]) -> str:
        found = params.get("properties")
        props: dict[str, Any] = found if isinstance(found, dict) else {}
        required = [k for k in params.get("required", []) if k in props]
        parts = []
        for key in [*required, *(k for k in props if k not in required)]:
            open_, close = param(key, rules.plain(props[key]))
            part = f"{_lit(open_)} {rules.text_value(props[key])} {_lit(close)}"
            parts.append(part if key in required else f"( {part} )?")
        return " ".join([_lit(head(name)), *parts, _lit(tail)])

    return call


def _python_calls(before: str, after: str) -> Call:
    """LFM2, Llama 4: `[name(key=VALUE, ...)]`, each value JSON (a Python literal too, JSON's
    `true`, `false` and `null` aside, which the parser reads as well)."""

    def call(rules: _Rules, name: str, params: dict[str, Any]) -> str:
        found = params.get("properties")
        props: dict[str, Any] = found if isinstance(found, dict) else {}
        required = [k for k in params.get("required", []) if k in props] or list(props)
        parts = [
            f"{_lit(k + '=')} {rules.schema(props[k] if isinstance(props[k], dict) else {})}"
            for k in required
        ]
        inner = ' ", " '.join(parts)
        return f"{_lit(before + '[' + name + '(')} {inner} {_lit(')]' + after)}"

    return call


def _dsml_param(key: str, plain: bool) -> tuple[str, str]:
    attr = "true" if plain else "false"
    return f'<{dsml.DSML}parameter name="{key}" string="{attr}">', f"</{dsml.DSML}parameter>\n"


def _dsml_call(block: str) -> Call:
    return _typed_params_call(
        lambda n: f'<{dsml.DSML}{block}>\n{dsml.INVOKE}{n}">\n',
        _dsml_param,
        f"</{dsml.DSML}invoke>\n</{dsml.DSML}{block}>",
    )


def _k3_param(key: str, plain: bool) -> tuple[str, str]:
    kind = "string" if plain else "json"
    return f'<|open|>argument key="{key}" type="{kind}"<|sep|>', "<|close|>argument<|sep|>"


def _json_object_call(before: str, name_key: str, args_key: str, after: str) -> Call:
    """`{"NAME_KEY": name, "ARGS_KEY": ARGUMENTS}` between the family's markers."""
    return _json_call(
        lambda n: f"{before}{{{json.dumps(name_key)}: {json.dumps(n)}, {json.dumps(args_key)}: ", "}" + after
    )


_M3 = m3.NS


CALLS: dict[ToolCallFormat, Call] = {
    ToolCallFormat.LFM2: _python_calls("<|tool_call_start|>", "<|tool_call_end|>"),
    ToolCallFormat.HARMONY: _json_call(
        lambda n: f"<|channel|>commentary to=functions.{n} <|constrain|>json<|message|>", ""
    ),
    ToolCallFormat.DEEPSEEK_V3_1: _json_call(
        lambda n: f"{ds.CALLS_BEGIN}{ds.CALL_BEGIN}{n}{ds.SEP}", ds.CALL_END + ds.CALLS_END
    ),
    ToolCallFormat.DEEPSEEK_R1: _json_call(
        lambda n: f"{ds.CALLS_BEGIN}{ds.CALL_BEGIN}function{ds.SEP}{n}\n```json\n",
        f"\n```{ds.CALL_END}{ds.CALLS_END}",
    ),
    ToolCallFormat.KIMI_K2: _json_call(
        lambda n: (
            f"<|tool_calls_section_begin|><|tool_call_begin|>functions.{n}:0<|tool_call_argument_begin|>"
        ),
        "<|tool_call_end|><|tool_calls_section_end|>",
    ),
    ToolCallFormat.GEMMA4: _json_call(lambda n: f"<|tool_call>call:{n}", "<tool_call|>"),
    ToolCallFormat.NEMOTRON: _json_call(
        lambda n: f'<TOOLCALL>[{{"name": {json.dumps(n)}, "arguments": ', "}]</TOOLCALL>"
    ),
    ToolCallFormat.GRANITE: _json_call(
        lambda n: f'<|tool_call|>[{{"name": {json.dumps(n)}, "arguments": ', "}]"
    ),
    ToolCallFormat.COMMAND_R7B: _json_call(
        lambda n: f'<|START_ACTION|>[{{"tool_call_id": "0", "tool_name": {json.dumps(n)}, "parameters": ',
        "}]<|END_ACTION|>",
    ),
    ToolCallFormat.APERTUS: _json_call(
        lambda n: f"<|tools_prefix|>[{{{json.dumps(n)}: ", "}]<|tools_suffix|>"
    ),
    ToolCallFormat.FUNCTIONARY_V3_1: _json_call(lambda n: f"<function={n}>", "</function>"),
    ToolCallFormat.FUNCTIONARY_V3_2: _json_call(lambda n: f"{n}\n", ""),
    ToolCallFormat.QWEN3_CODER: _params_call(
        lambda n: f"<tool_call>\n<function={n}>\n",
        lambda k: (f"<parameter={k}>\n", "\n</parameter>\n"),
        "</function>\n</tool_call>",
    ),
    ToolCallFormat.SEED_OSS: _params_call(
        lambda n: f"<seed:tool_call>\n<function={n}>\n",
        lambda k: (f"<parameter={k}>", "</parameter>\n"),
        "</function>\n</seed:tool_call>",
    ),
    ToolCallFormat.GLM: _params_call(
        lambda n: f"<tool_call>{n}\n",
        lambda k: (f"<arg_key>{k}</arg_key>\n<arg_value>", "</arg_value>\n"),
        "</tool_call>",
    ),
    ToolCallFormat.MINIMAX_M2: _params_call(
        lambda n: f'<minimax:tool_call>\n<invoke name="{n}">\n',
        lambda k: (f'<parameter name="{k}">', "</parameter>\n"),
        "</invoke>\n</minimax:tool_call>",
    ),
    # The families of parsing/families/recent.py.
    ToolCallFormat.LLAMA4_PYTHONIC: _python_calls("", ""),
    ToolCallFormat.DEEPSEEK_V3_2: _dsml_call("function_calls"),
    ToolCallFormat.DEEPSEEK_V4: _dsml_call("tool_calls"),
    ToolCallFormat.KIMI_K3: _typed_params_call(
        lambda n: f'<|open|>tools<|sep|><|open|>call tool="{n}" index="1"<|sep|>',
        _k3_param,
        "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>",
    ),
    ToolCallFormat.MINIMAX_M3: _params_call(
        lambda n: f'{_M3}<tool_call>\n{m3.INVOKE}{n}">',
        lambda k: (f"{_M3}<{k}>", f"{_M3}</{k}>"),
        f"{m3.INVOKE_END}\n{_M3}</tool_call>",
    ),
    ToolCallFormat.MINICPM5: _params_call(
        lambda n: f'<function name="{n}">', lambda k: (f'<param name="{k}">', "</param>"), "</function>"
    ),
    ToolCallFormat.APRIEL: _json_object_call("<tool_calls>[", "name", "arguments", "]</tool_calls>"),
    ToolCallFormat.COMMAND_R_PLUS: _json_object_call(
        "Action:\n```json\n[", "tool_name", "parameters", "]\n```"
    ),
    ToolCallFormat.FIREFUNCTION_V2: _json_object_call(" functools[", "name", "arguments", "]"),
    ToolCallFormat.GIGACHAT3: _json_object_call(
        "<|message_sep|>\n\nfunction call<|role_sep|>\n", "name", "arguments", ""
    ),
    ToolCallFormat.GIGACHAT3_1: _json_object_call("<|function_call|>", "name", "arguments", ""),
    ToolCallFormat.HY3: _params_call(
        lambda n: f"{hy3.token('tool_calls')}\n{hy3.token('tool_call')}{n}{hy3.token('tool_sep')}\n",
        lambda k: (
            f"{hy3.token('arg_key')}{k}{hy3.token('/arg_key')}\n{hy3.token('arg_value')}",
            f"{hy3.token('/arg_value')}\n",
        ),
        f"{hy3.token('/tool_call')}\n{hy3.token('/tool_calls')}",
    ),
    ToolCallFormat.SOLAR_OPEN: _json_call(
        lambda n: f"<|tool_calls|><|tool_call:begin|>call_0<|tool_call:name|>{n}<|tool_call:args|>",
        "<|tool_call:end|><|calls|>",
    ),
    ToolCallFormat.MINIMAX_M1: _json_object_call("<tool_calls>\n", "name", "arguments", "\n</tool_calls>"),
    ToolCallFormat.MUSE_GLIMMER: _params_call(
        lambda n: f' to={n}<|message|><atem:function_calls>\n<atem:invoke name="{n}">\n',
        lambda k: (f'<atem:parameter name="{k}">', "</atem:parameter>\n"),
        "</atem:invoke>\n</atem:function_calls>",
    ),
}


def family_call_grammar(tools: list[ToolSpec], tool_format: ToolCallFormat) -> Grammar:
    """One call of one of `tools`, in the family's markup."""
    write = CALLS[tool_format]
    rules = _Rules()
    calls = []
    for tool in tools:
        rules.tool = tool
        calls.append(
            rules.add(write(rules, tool.name, tool.parameters or {"type": "object", "properties": {}}))
        )
    text = "\n".join([f"{ANSWER}: {' | '.join(calls)}", *rules.lines]) + "\n"
    return Grammar(text, "tool_call", tuple(sorted(rules.ignored)))


@dataclass(frozen=True, slots=True)
class MarkupGrammar(Grammar):
    """A grammar whose `prefix` lets the family's markup (and reasoning) lead to the answer;
    `resume` leads there from the end of a reasoning block the prompt opened."""

    resume: str = ""

    def after_reasoning(self) -> Grammar:
        return replace(self, prefix=self.resume)


def _block(name: str, open_tag: str, close: str) -> str:
    """A terminal: `open_tag`, any text, `close` (once: the first `close` ends the block)."""
    o, c = re.escape(open_tag), re.escape(close)
    return f"{name}: /{o}(?s:.*){c}/ & ~/(?s:.*{c}.*{c}.*)/"


_ANALYSIS = "harmony_analysis"
_FINAL = f"{CHANNEL}final{MESSAGE}"
_AFTER_BLOCK = r"/[ \t\n]{0,4}/"


def in_family_markup(
    grammar: Grammar, tool_format: ToolCallFormat, reasoning: ReasoningStyle | None
) -> Grammar:
    """`grammar` with the markup the family writes before its answer: Harmony's final channel
    header before JSON output, and reasoning before the answer where the family reasons with
    an open tag of several tokens."""
    output = grammar.purpose != "tool_call"
    if tool_format is ToolCallFormat.HARMONY:
        header = f" {_lit(_FINAL)}" if output else ""
        if reasoning is None:
            return replace(grammar, prefix=header.strip())
        block = _block(_ANALYSIS.upper(), f"{CHANNEL}analysis{MESSAGE}", f"<|end|>{START}assistant")
        return MarkupGrammar(
            f"{grammar.text}{block}\n",
            grammar.purpose,
            grammar.ignored,
            prefix=f"{_ANALYSIS.upper()}*{header}",
            resume=f"{_lit(START + 'assistant')}{header}",
        )
    if tool_format is ToolCallFormat.GEMMA4 and reasoning is not None:
        block = _block("GEMMA_THOUGHT", reasoning.open_tag, reasoning.close_tag)
        return MarkupGrammar(
            f"{grammar.text}{block}\n",
            grammar.purpose,
            grammar.ignored,
            prefix=f"(GEMMA_THOUGHT {_AFTER_BLOCK})?",
            resume=_AFTER_BLOCK,
        )
    return grammar


def forced_grammar(
    request: ChatRequest, tool_format: ToolCallFormat, model_id: str, reasoning: ReasoningStyle | None = None
) -> Grammar | None:
    """`request_grammar`, with forced calls of the families above in their own markup, and
    the family's markup (and reasoning, when `reasoning`) before the answer."""
    choice = request.tool_choice
    if tool_format in CALLS and choice not in ("auto", "none") and request.tools:
        tools = request.tools if choice == "required" else [t for t in request.tools if t.name == choice]
        if not tools:
            raise invalid(f"tool_choice names {choice!r}, which is not among the tools.", param="tool_choice")
        grammar: Grammar | None = family_call_grammar(tools, tool_format)
    else:
        grammar = request_grammar(request, tool_format, model_id)
    return None if grammar is None else in_family_markup(grammar, tool_format, reasoning)
