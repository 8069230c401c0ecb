"""Real-world schemas through the structured-output grammar: the committed JSONSchemaBench sample.

`tests/data/jsonschemabench_sample.json` holds 94 schemas from ten JSONSchemaBench collections
(GlaiveAI function signatures, GitHub trivial to ultra, JSON Schema Store, Kubernetes, Snowplow,
the Washington Post), with the valid and invalid instances the benchmark ships; where they come
from and under which terms is in the file (`bench/jsonschemabench_sample.py` made it). Each
schema goes through the request path of a `json_schema` response format (strict), offline:

- it is accepted, its grammar compiles, the instances the benchmark calls invalid are all
  refused by llguidance's matcher (byte by byte: the grammar alone decides), and the valid ones
  are taken, unless listed in SUBSET (the grammar allows one spelling of a value);
- or it is refused with a 400 whose code is `unsupported_json_schema_keyword` and whose message
  names the keyword listed in REFUSED. Anything else (another error, a crash) fails.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from llguidance import LLMatcher, LLTokenizer

from sluicegate.core.errors import SluicegateError
from sluicegate.engines.llamacpp.grammar import json_schema_grammar

SAMPLE = Path(__file__).parents[3] / "data" / "jsonschemabench_sample.json"
ENTRIES: list[dict[str, Any]] = json.loads(SAMPLE.read_text(encoding="utf-8"))["schemas"]
BYTES = LLTokenizer("byte")  # a token per byte: the grammar alone decides

# Schemas refused with a 400: id → the keyword the message names (docs/structured-output.md).
REFUSED = {
    "JsonSchemaStore---catalogue-entry-schema": "if",
    "JsonSchemaStore---dart-test": "$ref",  # a recursive $ref with sibling keywords
    "JsonSchemaStore---grunt-task": "uniqueItems",
    "JsonSchemaStore---project-1.0.0-rc1": "uniqueItems",
    "JsonSchemaStore---strmprivacy.api.entities.v1.Schema.SimpleSchemaDefinition": "oneOf",
    "Snowplow---sp_357_Normalized": "oneOf",  # branches that may overlap
}

# Valid instances the grammar does not take: it allows one spelling of an object, properties
# in the schema's order and no keys the schema does not list (objects that list `properties`
# are closed, as llama.cpp's converter closes them). (id, index of the valid instance).
SUBSET = {
    ("Github_trivial---o30283", 0),  # a key the schema does not list
    ("Github_trivial---o9365", 0),  # keys in another order
    ("Github_medium---o29991", 0),  # keys with a trailing space the schema does not list
    ("Github_medium---o33963", 0),
    ("Github_hard---o50673", 0),  # an item key the schema does not list
    ("Github_hard---o50673", 1),
    ("Github_hard---o64004", 0),  # keys in another order
    ("Github_hard---o64004", 1),
    ("Github_hard---o9356", 0),
    ("Github_hard---o9356", 1),
    ("JsonSchemaStore---foxx-manifest", 0),  # `$schema` after the schema's properties
    ("Kubernetes---kb_50_Normalized", 0),  # keys with a trailing space the schema does not list
}


def _takes(fresh: LLMatcher, value: Any) -> bool:
    matcher = fresh.deep_copy()
    text = json.dumps(value, ensure_ascii=False)
    return matcher.consume_tokens(list(text.encode())) and matcher.is_accepting()


def test_the_sample_is_the_committed_one() -> None:
    collections = {entry["collection"] for entry in ENTRIES}
    assert len(ENTRIES) == 94 and len(collections) == 10
    assert sum(bool(entry["valid"]) for entry in ENTRIES) >= 90


@pytest.mark.parametrize("entry", ENTRIES, ids=[entry["id"] for entry in ENTRIES])
def test_each_schema_is_enforced_or_refused_naming_a_keyword(entry: dict[str, Any]) -> None:
    name = entry["id"]
    try:
        grammar = json_schema_grammar(entry["schema"], "response_format")
    except SluicegateError as exc:
        assert name in REFUSED, f"refused, not listed: {exc}"
        assert exc.info.status == 400
        assert exc.info.code == "unsupported_json_schema_keyword", exc.info.message
        assert f"uses {REFUSED[name]}" in exc.info.message
        return
    assert name not in REFUSED, "no longer refused: update REFUSED (and the docs)"
    matcher = LLMatcher(BYTES, LLMatcher.grammar_from_lark(grammar.lark), log_level=0)
    assert not matcher.is_error(), matcher.get_error()
    for index, value in enumerate(entry["valid"]):
        assert _takes(matcher, value) or (name, index) in SUBSET, f"valid instance {index} refused"
        assert (name, index) not in SUBSET or not _takes(matcher, value), "taken now: update SUBSET"
    for index, value in enumerate(entry["invalid"]):
        assert not _takes(matcher, value), f"INVALID instance {index} taken: {json.dumps(value)[:200]}"
