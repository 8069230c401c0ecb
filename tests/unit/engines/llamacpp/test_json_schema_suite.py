"""The official JSON Schema Test Suite (draft 2020-12) through the structured-output grammar.

For every schema of the keyword groups structured output promises, the grammar is compiled
(strictly, as a `json_schema` response format is) and each of the suite's instances is run
through llguidance's matcher byte by byte — the grammar engine itself, no model:

- a schema the grammar refuses must be a known refusal (a 400 naming what cannot be enforced);
- an instance the suite calls invalid must be refused, unless it is a known looseness below;
- an instance the suite calls valid must be taken, unless the grammar knowingly allows only part
  of the valid spellings (key order, `1.0` for an integer, closed objects: see below).

The suite is not part of this repository: it comes from the sdist of the installed `jsonschema`,
which vendors it (MIT licensed; `tests/schema_suite_sources.py`), or from
`$JSON_SCHEMA_TEST_SUITE`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from llguidance import LLMatcher, LLTokenizer

from llamacpp_sources import SourcesUnavailable
from schema_suite_sources import draft2020_12
from sluicegate.engines.llamacpp.grammar import SchemaError, schema_rule

GROUPS = [
    "type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "minLength", "maxLength", "pattern", "enum", "const", "items", "prefixItems", "minItems",
    "maxItems", "required", "properties", "additionalProperties", "anyOf", "oneOf", "allOf",
    "ref", "defs", "boolean_schema",
    "optional/format/date", "optional/format/time", "optional/format/date-time",
    "optional/format/uuid", "optional/format/email", "optional/format/ipv4",
    "optional/format/ipv6", "optional/format/uri", "optional/format/duration",
]  # fmt: skip

# Schemas refused with a 400: (group, case description) → why.
REFUSED = {
    ("multipleOf", "float division = inf"): "a multipleOf of more digits than a number holds",
    ("enum", "empty enum"): "no value satisfies it",
    ("anyOf", "anyOf with boolean schemas, all false"): "no value satisfies it",
    ("allOf", "allOf with boolean schemas, some false"): "no value satisfies it",
    ("allOf", "allOf with boolean schemas, all false"): "no value satisfies it",
    ("oneOf", "oneOf with boolean schemas, all false"): "no value satisfies it",
    ("ref", "$ref to boolean schema false"): "no value satisfies it",
    ("boolean_schema", "boolean schema 'false'"): "no value satisfies it",
    ("additionalProperties", "additionalProperties with propertyNames"): "propertyNames",
    ("additionalProperties", "dependentSchemas with additionalProperties"): "dependentSchemas",
    ("ref", "remote ref, containing refs itself"): "$dynamicAnchor (the metaschema)",
    ("defs", "validate definition against metaschema"): "$dynamicAnchor (the metaschema)",
    ("ref", "ref creates new scope when adjacent to keywords"): "unevaluatedProperties",
    ("ref", "ref to if"): "if/then/else",
    ("ref", "ref to then"): "if/then/else",
    ("ref", "ref to else"): "if/then/else",
    # oneOf whose branches may overlap: exclusivity cannot be enforced (strict: false → anyOf).
    **{
        ("oneOf", case): "oneOf exclusivity"
        for case in (
            "oneOf",
            "oneOf with base schema",
            "oneOf with boolean schemas, all true",
            "oneOf with boolean schemas, more than one true",
            "oneOf complex types",
            "oneOf with empty schema",
            "oneOf with required",
            "oneOf with missing optional property",
        )
    },
}

# Invalid instances the grammar still takes: (group, case, test) → why.
LOOSE = {
    **{
        ("optional/format/time", "validation of time strings", test): "a leap second is checked per field"
        for test in (
            "invalid leap second, Zulu (wrong hour)",
            "invalid leap second, Zulu (wrong minute)",
            "invalid leap second, zero time-offset (wrong hour)",
            "invalid leap second, zero time-offset (wrong minute)",
            "invalid leap second, positive time-offset (wrong hour)",
            "invalid leap second, positive time-offset (wrong minute)",
            "invalid leap second, negative time-offset (wrong hour)",
            "invalid leap second, negative time-offset (wrong minute)",
            "an invalid time string with invalid leap second (wrong hour)",
            "an invalid time string with invalid leap second (wrong minute)",
        )
    },
    **{
        ("optional/format/date-time", "validation of date-time strings", test): "likewise"
        for test in (
            "an invalid date-time with leap second on a wrong minute, UTC",
            "an invalid date-time with leap second on a wrong hour, UTC",
        )
    },
    **{
        ("optional/format/date", "validation of date strings", test): "February 29 in any year"
        for test in (
            "2021 is not a leap year",
            "century year 0100 is not a leap year",
            "century year 2100 is not a leap year",
            "a invalid date string with 29 days in February (normal)",  # the suite jsonschema 4.26 vendors
        )
    },
}

# Valid instances the grammar does not take, because it allows one spelling of a value: keys in
# the schema's order, integers without `.0`, strings without `\u` escapes of printable
# characters, objects with listed properties closed (`grammar._closed`). (group, case, test).
SUBSET = {
    ("type", "integer type matches integers", "a float with zero fractional part is an integer"),
    ("maxLength", "maxLength validation", "two graphemes is long enough"),
    ("pattern", "pattern with Unicode property escape requires unicode mode", "Non-ASCII letters match"),
    ("enum", "enum with 0 does not match false", "float zero is valid"),
    ("enum", "enum with [0] does not match [false]", "[0.0] is valid"),
    ("enum", "enum with 1 does not match true", "float one is valid"),
    ("enum", "enum with [1] does not match [true]", "[1.0] is valid"),
    ("const", "const with object", "same object with different property order is valid"),
    ("const", "const with 0 does not match other zero-like types", "float zero is valid"),
    ("const", "const with 1 does not match true", "float one is valid"),
    ("const", "const with -2.0 matches integer and float types", "float -2.0 is valid"),
    ("const", "float and integers are equal up to 64-bit representation limits", "float is valid"),
    (
        "const",
        "characters with the same visual representation but different codepoint",
        "character uses the same codepoint",
    ),
    (
        "const",
        "characters with the same visual representation, but different number of codepoints",
        "character uses the same codepoint",
    ),
    ("properties", "object properties validation", "doesn't invalidate other properties"),
    ("additionalProperties", "non-ASCII pattern with additionalProperties", "matching the pattern is valid"),
    (
        "additionalProperties",
        "additionalProperties are allowed by default",
        "additional properties are allowed",
    ),
    ("anyOf", "anyOf complex types", "both anyOf valid (complex)"),
    ("allOf", "allOf", "allOf"),
    ("allOf", "allOf with base schema", "valid"),
    ("ref", "refs with relative uris and defs", "valid on both fields"),
    ("ref", "relative refs with absolute uris and defs", "valid on both fields"),
    ("optional/format/email", "validation of e-mail addresses", "a quoted string with a space in the local part is valid"),
    ("optional/format/email", "validation of e-mail addresses", "a quoted string with a double dot in the local part is valid"),
    ("optional/format/email", "validation of e-mail addresses", "a quoted string with a @ in the local part is valid"),
    ("optional/format/email", "validation of e-mail addresses", "an IPv6-address-literal after the @ is valid"),
    ("optional/format/ipv6", "validation of IPv6 addresses", "mixed format with the ipv4 section as decimal octets"),
    ("optional/format/ipv6", "validation of IPv6 addresses", "mixed format with double colons between the sections"),
    ("optional/format/ipv6", "validation of IPv6 addresses", "mixed format with leading double colons (ipv4-mapped ipv6 address)"),
    ("optional/format/ipv6", "validation of IPv6 addresses", "a long valid ipv6"),
}  # fmt: skip


def _suite() -> Path | None:
    try:
        return draft2020_12()
    except SourcesUnavailable:
        if os.environ.get("CI"):
            raise  # CI must run the suite: a download that failed is a failure there
        return None


SUITE = _suite()
pytestmark = pytest.mark.skipif(SUITE is None, reason="the JSON Schema Test Suite could not be downloaded")
BYTES = LLTokenizer("byte")  # a token per byte: the grammar alone decides


def _takes(fresh: LLMatcher, value: Any) -> bool:
    matcher = fresh.deep_copy()
    text = json.dumps(value, ensure_ascii=False)
    return matcher.consume_tokens(list(text.encode())) and matcher.is_accepting()


@pytest.mark.parametrize("group", GROUPS)
def test_the_grammar_keeps_the_suite(group: str) -> None:
    assert SUITE is not None
    refused, checked, problems = 0, 0, []
    for case in json.loads((SUITE / f"{group}.json").read_text(encoding="utf-8")):
        key = (group, case["description"])
        try:
            body = schema_rule(case["schema"])
        except SchemaError as exc:
            refused += 1
            if key not in REFUSED:
                problems.append(f"refused {key}: {exc}")
            continue
        if key in REFUSED:
            problems.append(f"no longer refused (update REFUSED): {key}")
        fresh = LLMatcher(BYTES, LLMatcher.grammar_from_lark(f"start: {body}"), log_level=0)
        for test in case["tests"]:
            checked += 1
            name = (*key, test["description"])
            took = _takes(fresh, test["data"])
            if test["valid"] and not took and name not in SUBSET:
                problems.append(f"valid instance refused: {name}")
            if not test["valid"] and took and name not in LOOSE:
                problems.append(f"INVALID instance taken: {name}")
    assert not problems, "\n".join(problems)
    assert checked + refused > 0
