"""Grammars for constrained decoding: JSON output and forced tool calls.

A request's `response_format` (`json_object`, `json_schema`) or a forcing `tool_choice`
(`required`, or a tool's name) becomes one grammar in llguidance's Lark dialect, whose `%json`
rules compile a JSON schema with every constraint enforced: integer and number bounds, string
lengths, `pattern`, `format`, `enum`/`const`, array bounds, `prefixItems`, `anyOf`/`oneOf`/
`allOf`, `$ref`/`$defs` with recursion (docs/structured-output.md says why llguidance, with the
numbers). A forced call is written in the model's own tool-call markup, so the output parser turns
it into tool-call items exactly as it does an unforced one.

The one public entry point for a schema is `schema_rule` (schema → a Lark rule body); everything
that needs JSON under a grammar — `response_format`, forced tool calls of any model family —
builds on it. A keyword the compiler cannot enforce (`uniqueItems`, `propertyNames`, …) refuses
the schema with a 400 naming it, as OpenAI's strict mode does; `strict: false` compiles it
leniently instead, and the response says so in `X-Sluicegate-Structured-Output`.

Pure Python at request time: grammars are built and validated while the request is checked, so
a schema that cannot be enforced is a 400 before anything streams. The worker thread compiles the
grammar against the model's vocabulary (`constrained.py`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

import orjson

from sluicegate.core.errors import invalid
from sluicegate.core.request import ChatRequest, ToolSpec

ANSWER = "answer"
# The response header that marks best-effort (`strict: false`) output: which keywords were not
# enforced, percent-encoded (they come from the client's schema).
BEST_EFFORT_HEADER = "X-Sluicegate-Structured-Output"
# Whitespace between JSON tokens: none, one space, or a newline and an indent of at most 20
# (llama.cpp's converter allows the same). Bounded, so a model cannot pad forever.
WHITESPACE = r"(?:[ ]|\n[ \t]{0,20})?"
# After a reasoning block, templates (and models) put a blank line before the answer.
_AFTER_REASONING = r"/[ \t\n]{0,4}/"
_UNIMPLEMENTED = re.compile(r"Unimplemented keys: \[([^\]]*)\]")
_JSON_OBJECT: dict[str, Any] = {"type": "object"}


@dataclass(frozen=True, slots=True)
class Grammar:
    """A grammar in llguidance's Lark dialect whose rule `answer` is the output, and what it is
    for (error messages, the docs' wording). `ignored` names keywords a best-effort
    (`strict: false`) schema carries that the grammar does not enforce."""

    text: str
    purpose: str  # "json_object", "json_schema" or "tool_call"
    ignored: tuple[str, ...] = ()
    prefix: str = ""
    # The grammar writes the reasoning before the answer itself (a forced call: call_grammar.py),
    # from the first token; `inside` is its prefix when the prompt left a reasoning block open.
    holds_reasoning: bool = False
    inside: str = ""

    @property
    def lark(self) -> str:
        """The whole grammar, `start` first."""
        head = f"start: {self.prefix} {ANSWER}" if self.prefix else f"start: {ANSWER}"
        return f"{head}\n{self.text}"

    def after_reasoning(self) -> Grammar:
        """The same grammar, allowing the whitespace a model writes after `</think>`."""
        return replace(self, prefix=_AFTER_REASONING)

    def inside_reasoning(self) -> Grammar:
        """The grammar from inside a reasoning block the prompt opened (`holds_reasoning`)."""
        return replace(self, prefix=self.inside)


def literal(text: str) -> str:
    """`text` as a Lark string literal (JSON's quoting is Lark's): markup around a rule."""
    return orjson.dumps(text).decode()


class SchemaError(ValueError):
    """A schema llguidance cannot compile; `keywords` are the ones it does not implement."""

    def __init__(self, message: str, keywords: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.keywords = keywords


def schema_rule(schema: dict[str, Any] | bool, *, strict: bool = True) -> str:
    """The Lark rule body (`%json {…}`) that matches exactly the JSON values `schema` admits,
    in JSON as a model writes it (bounded whitespace between tokens).

    The stable entry point for every caller that puts JSON under a grammar (response formats,
    forced tool calls of every model family): put it on the right of a rule, `args: <body>`,
    in an llguidance Lark grammar. Raises `SchemaError` when the schema cannot be enforced: a
    keyword the compiler does not implement (unless `strict` is False: then such keywords are
    ignored — see `best_effort_rule`), a `oneOf` whose branches may overlap (unless `strict`
    is False: then it is taken as `anyOf`), a `$ref` to nowhere, a pattern it cannot compile,
    a schema no value satisfies.
    """
    if isinstance(schema, bool):
        if not schema:
            raise SchemaError("the schema is `false`: no value satisfies it")
        schema = {}
    options: dict[str, Any] = {"whitespace_pattern": WHITESPACE}
    if not strict:
        options["lenient"] = True
        options["coerce_one_of"] = True
    # Our options replace any `x-guidance` of the client's: unbounded whitespace is not theirs to ask.
    body = f"%json {_dumps({**_closed(schema), 'x-guidance': options})}"
    _check(f"start: {body}")
    return body


_DATA = ("enum", "const", "default", "examples")
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "dependentSchemas")
_OPEN = ("additionalProperties", "patternProperties", "unevaluatedProperties")
_BESIDE = ("allOf", "anyOf", "oneOf", "$ref", "$dynamicRef", "if", "dependentSchemas")
_COUNTS = (
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "minContains",
    "maxContains",
)
# The formats JSON Schema defines (draft 2020-12, section 7.3). Any other name (`url`, `byte`,
# `int32`, …) is an annotation no validator checks: every string satisfies it, so it is left
# out rather than refused. A defined format the grammar cannot enforce is still refused.
DEFINED_FORMATS = frozenset(
    [
        "date-time",
        "date",
        "time",
        "duration",
        "email",
        "idn-email",
        "hostname",
        "idn-hostname",
        "ipv4",
        "ipv6",
        "uri",
        "uri-reference",
        "iri",
        "iri-reference",
        "uuid",
        "uri-template",
        "json-pointer",
        "relative-json-pointer",
        "regex",
    ]
)


def _closed(schema: Any, in_all_of: bool = False) -> Any:
    """`schema` without formats JSON Schema does not define (`DEFINED_FORMATS`), and with
    objects that list `properties` and say nothing of other keys closed to them, as llama.cpp's
    converter does: a model otherwise may add keys without end (a random
    one does), and what it writes still validates. Not where other subschemas see the same
    object: next to a combinator or `$ref`, in any `allOf` branch, in the branches of an
    object that lists properties itself."""
    if isinstance(schema, list):
        return [_closed(v, in_all_of) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DATA:
            out[key] = value
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _closed(v) for name, v in value.items()}
        elif key == "format" and isinstance(value, str) and value not in DEFINED_FORMATS:
            continue
        elif key in _COUNTS and isinstance(value, float) and value.is_integer():
            out[key] = int(value)  # `2.0` is the count 2 (JSON Schema: a number with no fraction)
        else:
            shared = key == "allOf" or (key in _BESIDE and "properties" in schema)
            out[key] = _closed(value, shared)
    if "properties" in out and not in_all_of and not any(k in out for k in (*_OPEN, *_BESIDE)):
        out["additionalProperties"] = False
    if out.get("type") == "integer" and not in_all_of:
        _bounded(out)
    return out


# An integer with no bound in a direction gets the largest one a JSON reader holds exactly,
# 2^53 - 1 (JavaScript's MAX_SAFE_INTEGER; llguidance's bounds are doubles too; llama.cpp's
# converter allows 16 digits): a model (a random one does) may otherwise write digits until
# `max_tokens`.
_LARGEST = 2**53 - 1


def _bound(schema: dict[str, Any], keys: tuple[str, str]) -> float | None:
    # (draft 4's `exclusiveMinimum: true` is a flag, not a bound)
    values = (schema.get(key) for key in keys)
    return next((v for v in values if isinstance(v, int | float) and not isinstance(v, bool)), None)


def _bounded(schema: dict[str, Any]) -> None:
    low, high = (
        _bound(schema, ("minimum", "exclusiveMinimum")),
        _bound(schema, ("maximum", "exclusiveMaximum")),
    )
    if high is None and (low is None or low < _LARGEST):
        schema["maximum"] = _LARGEST
    if low is None and (high is None or high > -_LARGEST):
        schema["minimum"] = -_LARGEST


def best_effort_rule(schema: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    """The rule for `schema` with what cannot be enforced left out, and the names of what was:
    keywords the compiler does not implement, and patterns its regex engine cannot hold (a
    lookahead). Still raises `SchemaError` for a schema that is broken, not just ambitious."""
    try:
        return schema_rule(schema), ()
    except SchemaError as exc:
        keywords = exc.keywords
    cleaned, dropped = _without_bad_patterns(schema)
    if dropped:
        keywords = (*keywords, "pattern")
    if not keywords:
        raise SchemaError("the schema cannot be compiled")
    return schema_rule(cleaned, strict=False), keywords


def _without_bad_patterns(schema: Any) -> tuple[Any, bool]:
    if isinstance(schema, list):
        pairs = [_without_bad_patterns(v) for v in schema]
        return [v for v, _ in pairs], any(d for _, d in pairs)
    if not isinstance(schema, dict):
        return schema, False
    out: dict[str, Any] = {}
    dropped = False
    for key, value in schema.items():
        if key in _DATA:
            out[key] = value
        elif key in _SCHEMA_MAPS and isinstance(value, dict):  # names there are not keywords
            cleaned = {name: _without_bad_patterns(v) for name, v in value.items()}
            out[key] = {name: v for name, (v, _) in cleaned.items()}
            dropped = dropped or any(d for _, d in cleaned.values())
        elif (
            key == "pattern"
            and isinstance(value, str)
            and not _compiles({"type": "string", "pattern": value})
        ):
            dropped = True
        else:
            out[key], inner = _without_bad_patterns(value)
            dropped = dropped or inner
    return out, dropped


def _compiles(schema: dict[str, Any]) -> bool:
    try:
        schema_rule(schema)
    except SchemaError:
        return False
    return True


def _dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError as exc:  # orjson refuses what JSON cannot hold (integers past 64 bits)
        raise SchemaError(f"the schema is not JSON llguidance can read: {exc}") from exc


def _check(lark: str) -> None:
    # Imported where a grammar is first checked: ~8 MiB of RSS a server without structured
    # output does not carry (issue 48).
    from llguidance import LLMatcher

    error = LLMatcher.validate_grammar(LLMatcher.grammar_from_lark(lark))
    if error:
        message = error.splitlines()[0]
        found = _UNIMPLEMENTED.search(error)
        keywords = tuple(k.strip().strip('"') for k in found.group(1).split(",")) if found else ()
        if "oneOf constraints are not supported" in error:  # branches it cannot prove exclusive
            keywords = ("oneOf",)
            message = "oneOf whose branches may overlap (exclusivity cannot be enforced)"
        if "Unknown format" in error:  # a defined format it has no grammar for (`idn-email`, …)
            keywords = ("format",)
        if "circular references with sibling keys" in error:  # a recursive `$ref` beside keywords
            keywords = ("$ref",)
        raise SchemaError(message.split("failed to compile JSON schema: ")[-1], keywords)


def _refusal(exc: SchemaError, param: str, what: str) -> Exception:
    if exc.keywords:
        named = ", ".join(exc.keywords)
        return invalid(
            f"{what} uses {named}, which constrained decoding cannot enforce ({exc}). Remove it, "
            f"or set `strict: false` to have it ignored (best effort).",
            param=param,
            code="unsupported_json_schema_keyword",
        )
    return invalid(
        f"{what} cannot be turned into a grammar for constrained decoding: {exc}",
        param=param,
        code="invalid_json_schema",
    )


GBNF = "grammar"  # `response_format` type for a GBNF grammar (llama-server's `grammar` parameter)


def gbnf_grammar(text: str, param: str) -> Grammar:
    """A GBNF grammar (llama.cpp's `grammar` parameter) as the answer's grammar: llguidance's
    converter writes `root` as `start`, which becomes the `answer` rule (a 400 when it cannot
    be read)."""
    from llguidance import LLMatcher
    from llguidance.gbnf_to_lark import gbnf_to_lark

    try:
        lark = gbnf_to_lark(text)
    except Exception as exc:  # the converter raises plain errors for bad syntax
        raise invalid(f"'{param}' is not a GBNF grammar llama.cpp could read: {exc}", param=param) from None
    body = "\n".join(line for line in lark.splitlines() if not line.startswith("%llguidance"))
    body = re.sub(r"^start(\s*):", rf"{ANSWER}\1:", body, flags=re.MULTILINE)
    grammar = Grammar(body + "\n", GBNF)
    error = LLMatcher.validate_grammar(LLMatcher.grammar_from_lark(grammar.lark))
    if error:
        raise invalid(f"'{param}' cannot be enforced: {error.splitlines()[0]}", param=param)
    return grammar


def json_schema_grammar(schema: dict[str, Any], param: str, *, strict: bool = True) -> Grammar:
    """The grammar for a `json_schema` response format (a 400 when it cannot be enforced)."""
    try:
        body, ignored = (schema_rule(schema), ()) if strict else best_effort_rule(schema)
    except SchemaError as exc:
        raise _refusal(exc, param, "The JSON schema") from exc
    return Grammar(f"{ANSWER}: {body}\n", "json_schema", ignored)


def best_effort_header(grammar: Grammar) -> str:
    """The header value that says which keywords went unenforced (client text, encoded)."""
    return "best-effort; ignored=" + ",".join(quote(k, safe="") for k in grammar.ignored)


def call_schema(name: str, parameters: dict[str, Any], arguments_key: str) -> dict[str, Any]:
    """A call object's schema: `name` the tool's, `arguments_key` its parameters."""
    # `$ref`s in a tool's parameters point into those parameters: rebase them under the call.
    inner = _rebased(parameters, f"#/properties/{arguments_key}")
    return {
        "type": "object",
        "properties": {"name": {"const": name}, arguments_key: inner},
        "required": ["name", arguments_key],
        "additionalProperties": False,
    }


def _rebased(schema: Any, base: str) -> Any:
    """`schema` with each local `$ref` (`#…`) moved under the JSON pointer `base`."""
    if isinstance(schema, list):
        return [_rebased(v, base) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DATA:
            out[key] = value
        elif key in ("$ref", "$dynamicRef") and isinstance(value, str) and value.startswith("#"):
            out[key] = base + value[1:] if value[1:2] in ("", "/") else value
        elif key in _SCHEMA_MAPS and isinstance(value, dict):  # names there are not keywords
            out[key] = {name: _rebased(v, base) for name, v in value.items()}
        else:
            out[key] = _rebased(value, base)
    return out


def tool_rule(tool: ToolSpec, schema: dict[str, Any] | bool | None = None) -> tuple[str, tuple[str, ...]]:
    """The rule body for a JSON value of one of `tool`'s calls (`schema`: by default the tool's
    parameters; a call grammar may pass a call object around them, or one parameter's schema),
    and what it left unenforced. The tool's `strict: true` compiles strictly (a 400 names what
    cannot be enforced); any other tool best effort: a well-formed tool is never refused for a
    keyword its description still conveys to the model. Raises the 400 itself."""
    if schema is None:
        schema = tool.parameters or {"type": "object"}
    try:
        if tool.strict or isinstance(schema, bool):
            return schema_rule(schema), ()
        return best_effort_rule(schema)
    except SchemaError as exc:
        raise _refusal(exc, "tools", f"The parameters schema of tool {tool.name!r}") from exc


def _strict(spec: dict[str, Any]) -> bool:
    """Refuse what cannot be enforced unless the client said `strict: false` itself."""
    return spec.get("strict") is not False


def request_grammar(request: ChatRequest) -> Grammar | None:
    """The grammar a request's `response_format` asks for, or None (forced calls are written in
    the model family's markup: call_grammar.py)."""
    grammar = _format_grammar(request)
    if grammar is not None and grammar.ignored:
        request.response_headers[BEST_EFFORT_HEADER] = best_effort_header(grammar)
    return grammar


def _format_grammar(request: ChatRequest) -> Grammar | None:
    fmt = request.response_format
    kind = (fmt or {}).get("type", "text")
    if fmt is None or kind == "text":
        return None
    if kind == "json_object":
        return Grammar(f"{ANSWER}: {schema_rule(_JSON_OBJECT)}\n", "json_object")
    if kind == GBNF and isinstance(fmt.get(GBNF), str):
        return gbnf_grammar(fmt[GBNF], GBNF)
    if kind == "json_schema":
        # Chat Completions nests the schema (`json_schema.schema`); Responses' `text.format` does not.
        spec = fmt.get("json_schema", fmt)
        if not isinstance(spec, dict):
            raise invalid("response_format's json_schema must be a JSON object.", param="response_format")
        schema = spec.get("schema")
        if schema is None:
            schema = {}
        if not isinstance(schema, dict):
            raise invalid("response_format's schema must be a JSON object.", param="response_format")
        return json_schema_grammar(schema, "response_format", strict=_strict(spec))
    raise invalid(f"response_format type {kind!r} is not supported.", param="response_format")
