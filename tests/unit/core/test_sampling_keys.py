"""`sampling_fields` skips its lookups when a body names none of `SAMPLING_KEYS`: every key it
reads must be in that set, or a body naming only that key would be read as the defaults."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from sluicegate.core import validation
from sluicegate.core.errors import SluicegateError
from sluicegate.core.request import SamplingParams
from sluicegate.core.validation import SAMPLING_KEYS, Fields, sampling_fields

SOURCE = Path(validation.__file__).with_name("validation.py")  # (the module may be compiled)


def _keys_read(name: str) -> set[str]:
    """The string keys of the `f.<method>("key", ...)` calls in a function of validation.py."""
    module = ast.parse(SOURCE.read_text())
    tree = next(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == name)
    return {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "f"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    }


def test_every_key_read_is_in_the_set() -> None:
    read = _keys_read("sampling_fields") | _keys_read("_llama_samplers")
    assert "temperature" in read and "mirostat_eta" in read  # the scan sees the calls
    assert read <= SAMPLING_KEYS


@pytest.mark.parametrize("key", sorted(SAMPLING_KEYS))
def test_each_key_alone_is_still_checked(key: str) -> None:
    with pytest.raises(SluicegateError) as caught:  # a string is no value any of them takes
        sampling_fields(Fields({"model": "m", key: "not this"}))
    assert caught.value.info.param == key


def test_a_body_without_them_gets_the_defaults() -> None:
    assert sampling_fields(Fields({"model": "m", "max_tokens": 3, "stream": True})) == SamplingParams()
