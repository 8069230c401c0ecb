"""sluicegate.engines.model_names: served ids, aliases (exact, then globs), the dialect's own
naming, then `default_model`; without a default, a missing name is a 400 and an unknown one is
left for the registry's 404."""

from __future__ import annotations

import pytest

from sluicegate.core.errors import ConfigError, ErrorKind, SluicegateError
from sluicegate.engines.model_names import MISSING_MODEL, ModelNames

MODELS = {"qwen": object(), "embed": object(), "gemma:latest": object()}
TABLES = [
    {"id": "qwen", "aliases": ["gpt-*", "o?-mini"]},
    {"id": "embed", "aliases": ["text-embedding-*", "gpt-4o-embed"]},
]


def names(default: str | None = None) -> ModelNames:
    return ModelNames.from_config(default, TABLES)


def test_a_served_id_is_itself() -> None:
    assert names("embed").resolve("qwen", MODELS) == "qwen"


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        ("gpt-3.5-turbo", "qwen"),
        ("o3-mini", "qwen"),
        ("text-embedding-3-small", "embed"),
        ("gpt-4o-embed", "embed"),  # an exact alias wins over a glob declared before it
    ],
)
def test_aliases(requested: str, expected: str) -> None:
    assert names().resolve(requested, MODELS) == expected


@pytest.mark.parametrize("requested", [None, "", "claude-sonnet-4"])
def test_the_default_serves_no_name_and_unknown_ones(requested: str | None) -> None:
    assert names("qwen").resolve(requested, MODELS) == "qwen"


@pytest.mark.parametrize("requested", [None, ""])
def test_without_a_default_a_missing_name_is_a_400(requested: str | None) -> None:
    with pytest.raises(SluicegateError) as caught:
        names().resolve(requested, MODELS)
    info = caught.value.info
    assert (info.kind, info.message, info.param) == (ErrorKind.INVALID_REQUEST, MISSING_MODEL, "model")


def test_without_a_default_an_unknown_name_is_left_for_the_404() -> None:
    assert names().resolve("claude-sonnet-4", MODELS) == "claude-sonnet-4"


def not_found(name: str) -> str:
    raise SluicegateError(ErrorKind.NOT_FOUND, f"model '{name}' not found")


def test_the_dialects_own_naming_comes_before_the_default() -> None:
    assert names("qwen").resolve("gemma", MODELS, lambda n: n + ":latest") == "gemma:latest"
    assert names("qwen").resolve("nope", MODELS, not_found) == "qwen"
    with pytest.raises(SluicegateError, match="'nope' not found"):
        names().resolve("nope", MODELS, not_found)  # its own 404 wording, without a default


@pytest.mark.parametrize("aliases", ["gpt-*", [1], [""]])
def test_bad_aliases_are_a_config_error(aliases: object) -> None:
    with pytest.raises(ConfigError, match="aliases"):
        ModelNames.from_config(None, [{"id": "qwen", "aliases": aliases}])
