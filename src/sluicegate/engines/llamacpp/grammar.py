"""GBNF grammars for constrained decoding: JSON output and forced tool calls.

A request's `response_format` (`json_object`, `json_schema`) or a forcing `tool_choice`
(`required`, or a tool's name) becomes one GBNF grammar, written with llama-cpp-python's port of
llama.cpp's JSON-schema converter. A forced call is written in the model's own tool-call markup,
so the output parser turns it into tool-call items exactly as it does an unforced one.

Pure Python: grammars are built while the request is checked, so a schema the converter cannot
handle is a 400 before anything streams. llama.cpp compiles the text on the worker thread.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from llama_cpp.llama_grammar import JSON_GBNF, SchemaConverter

from sluicegate.core.errors import invalid
from sluicegate.core.request import ChatRequest, ToolSpec
from sluicegate.parsing import ToolCallFormat

ROOT = "root"
# After a reasoning block, templates (and models) put a blank line before the answer.
_AFTER_REASONING = "[ \\t\\n]{0,4}"


@dataclass(frozen=True, slots=True)
class Grammar:
    """A GBNF grammar and what it is for (for error messages and the docs' wording)."""

    text: str
    purpose: str  # "json_object", "json_schema" or "tool_call"

    def after_reasoning(self) -> Grammar:
        """The same grammar, allowing the whitespace a model writes after `</think>`."""
        return Grammar(f"{ROOT} ::= {_AFTER_REASONING} answer\n{_rename_root(self.text)}", self.purpose)


def _rename_root(text: str) -> str:
    lines = text.splitlines()
    return "\n".join(
        "answer ::=" + line[line.index("::=") + 3 :] if line.split("::=")[0].strip() == ROOT else line
        for line in lines
    )


def _converter() -> Any:
    """llama-cpp-python's converter (untyped)."""
    make: Any = SchemaConverter
    return make(
        prop_order={"name": 0, "arguments": 1, "parameters": 1},
        allow_fetch=False,
        dotall=False,
        raw_pattern=False,
    )


def _schema_rule(converter: Any, schema: dict[str, Any], url: str, name: str) -> str:
    resolved = converter.resolve_refs(copy.deepcopy(schema), url)
    rule: str = converter.visit(resolved, name)
    return rule


def json_schema_grammar(schema: dict[str, Any], param: str) -> Grammar:
    converter = _converter()
    try:
        _schema_rule(converter, schema, "schema", "")
    except Exception as exc:  # the converter raises whatever it meets: a 400, not a 500
        raise invalid(
            f"The JSON schema cannot be turned into a grammar for constrained decoding: {exc!r}",
            param=param,
            code="invalid_json_schema",
        ) from exc
    text: str = converter.format_grammar()
    return Grammar(text, "json_schema")


def _call_schema(name: str, parameters: dict[str, Any], arguments_key: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"name": {"const": name}, arguments_key: parameters},
        "required": ["name", arguments_key],
        "additionalProperties": False,
    }


def _without_patterns(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _without_patterns(v) for k, v in schema.items() if k != "pattern"}
    if isinstance(schema, list):
        return [_without_patterns(v) for v in schema]
    return schema


def _expressible(parameters: dict[str, Any]) -> dict[str, Any]:
    """The parameters as the grammar can hold them. A string `pattern` the converter cannot
    express (llama.cpp's converter knows a subset of regex) is dropped rather than refusing a
    well-formed tool: its text still describes it to the model (a custom tool's grammar)."""
    try:
        _schema_rule(_converter(), parameters, "check", "check")
        return parameters
    except Exception:
        stripped: dict[str, Any] = _without_patterns(parameters)
        return stripped


def tool_call_grammar(tools: list[ToolSpec], tool_format: ToolCallFormat) -> Grammar:
    """One call of one of `tools`, in the markup the model writes (and the parser reads)."""
    arguments_key = "parameters" if tool_format is ToolCallFormat.LLAMA3_JSON else "arguments"
    converter = _converter()
    alternatives = []
    try:
        for index, tool in enumerate(tools):
            # `$ref`s in a tool's parameters point into those parameters: resolve them there,
            # each tool under its own URL, before wrapping them into the call object.
            parameters = converter.resolve_refs(
                copy.deepcopy(_expressible(tool.parameters or {"type": "object"})), f"tool{index}"
            )
            rule: str = converter.visit(_call_schema(tool.name, parameters, arguments_key), f"call{index}")
            alternatives.append(rule)
    except Exception as exc:
        raise invalid(
            f"The parameters schema of a tool cannot be turned into a grammar for constrained "
            f"decoding: {exc!r}",
            param="tools",
            code="invalid_json_schema",
        ) from exc
    call = " | ".join(alternatives)
    if tool_format is ToolCallFormat.HERMES:
        root = f'"<tool_call>\\n" ( {call} ) "\\n</tool_call>"'
    elif tool_format is ToolCallFormat.MISTRAL:
        root = f'"[TOOL_CALLS][" ( {call} ) "]"'
    else:
        root = f"{call}"
    rules: str = converter.format_grammar()
    return Grammar(f"{ROOT} ::= {root}\n{rules}", "tool_call")


def request_grammar(request: ChatRequest, tool_format: ToolCallFormat, model_id: str) -> Grammar | None:
    """The grammar a request asks for, or None. Forced tool calls win over `response_format`
    (the answer is a call, not a message)."""
    choice = request.tool_choice
    if choice not in ("auto", "none") and request.tools:
        if tool_format is ToolCallFormat.NONE:
            raise invalid(
                f"tool_choice {choice!r} cannot be enforced: model {model_id!r} has no tool-call "
                "format (its chat template renders no tools; set `tool_call_format`).",
                param="tool_choice",
                code="unsupported_parameter",
            )
        tools = request.tools if choice == "required" else [t for t in request.tools if t.name == choice]
        if not tools:
            raise invalid(f"tool_choice names {choice!r}, which is not among the tools.", param="tool_choice")
        return tool_call_grammar(tools, tool_format)
    fmt = request.response_format
    kind = (fmt or {}).get("type", "text")
    if fmt is None or kind == "text":
        return None
    if kind == "json_object":
        return Grammar(JSON_GBNF.strip(), "json_object")
    if kind == "json_schema":
        # Chat Completions nests the schema (`json_schema.schema`); Responses' `text.format` does not.
        spec = fmt.get("json_schema", fmt)
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if schema is None:
            schema = {}
        if not isinstance(schema, dict):
            raise invalid("response_format's schema must be a JSON object.", param="response_format")
        return json_schema_grammar(schema, "response_format")
    raise invalid(f"response_format type {kind!r} is not supported.", param="response_format")
