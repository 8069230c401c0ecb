"""tests/json_prefix.py, which the real-model tests trust to say a cut answer kept its grammar."""

from __future__ import annotations

import json

import pytest

from json_prefix import is_json_prefix

DOCUMENT = '{"country": "Fran\\u00e7e \\"x\\"", "n": [1, -2.5e+3, true, false, null, {}], "k": {"a": []}}'


def test_every_prefix_of_a_document_is_one() -> None:
    json.loads(DOCUMENT)
    for end in range(len(DOCUMENT) + 1):
        assert is_json_prefix(DOCUMENT[:end]), DOCUMENT[:end]


@pytest.mark.parametrize("text", ['{"a":}', '{"a" 1', "[1,,", '{"a":tx', "{]", '{"a":1}}', "[1 2", '{"a":-x'])
def test_what_no_document_starts_with_is_not(text: str) -> None:
    assert not is_json_prefix(text)
