"""The dialect registry: every package's registration, and the one table of their specs that
routing, auth, errors and metrics read; and that what the build compiles, the entry points in
pyproject.toml and the independence contract all agree with it."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

import pytest

from sluicegate import _compiled
from sluicegate.core.errors import ConfigError, ErrorInfo, ErrorKind
from sluicegate.dialects.base import DialectSpec, Registration
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.dialects.registry import (
    DialectTable,
    built_in,
    declared,
    dialect_for,
    dialect_name,
    dialect_table,
    load,
)

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[3] / "pyproject.toml").read_text())

INFO = ErrorInfo(ErrorKind.NOT_FOUND, "model 'x' not found")


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/api/chat", "ollama"),
        ("/api/tags", "ollama"),
        ("/api/nope", "ollama"),
        ("/api/v1/chat", "lmstudio"),
        ("/api/v1/models/load", "lmstudio"),
        ("/api/v0/embeddings", "lmstudio"),
        ("/v1/chat/completions", "chat_completions"),
        ("/v1/responses/resp_1/cancel", "responses"),
        ("/v1/messages/count_tokens", "anthropic"),
        ("/v1/completions", "completions"),
        ("/infill", "infill"),
        ("/v1/models", "openai"),
        ("/v1/embeddings", "openai"),
        ("/", ""),
        ("/health", ""),
        ("/metrics", ""),
    ],
)
def test_each_path_belongs_to_one_dialect(path: str, name: str) -> None:
    assert dialect_name(path) == name


def test_each_dialect_renders_its_own_error_shape() -> None:
    assert dialect_for("/api/chat").error(INFO) == {"error": "model 'x' not found"}
    assert dialect_for("/api/v1/chat").error(INFO)["error"]["message"] == INFO.message
    assert dialect_for("/v1/messages").error(INFO)["type"] == "error"
    assert dialect_for("/v1/models").error(INFO)["error"]["code"] == "not_found"
    # llama-server's shape carries the status it is answered with (a router's 405)
    assert dialect_for("/infill").body(INFO, 405)["error"]["code"] == 405


def test_transports_and_heartbeats_are_declared() -> None:
    specs = dialect_table().specs
    by_name = {spec.name: spec for spec in specs}
    assert by_name["ollama"].transport == "ndjson" and by_name["ollama"].heartbeat is None
    assert by_name["anthropic"].heartbeat is not None  # its `ping` event
    assert all(spec.transport == "sse" for name, spec in by_name.items() if name != "ollama")
    assert len(by_name) == len(specs)  # one entry per dialect


def test_the_built_in_packages_are_the_declared_entry_points() -> None:
    """pyproject.toml declares each built-in package on the entry point group a third party
    uses; a package found by its place but not declared (or the reverse) fails here."""
    declared = PYPROJECT["project"]["entry-points"]["sluicegate.dialects"]
    assert declared == built_in()
    assert set(built_in()) <= set(dialect_table().registrations)


def test_every_built_in_dialect_is_in_the_independence_contract() -> None:
    """The contract that no dialect imports another covers every registered built-in package
    (listed, or by a wildcard)."""
    contracts = PYPROJECT["tool"]["importlinter"]["contracts"]
    (independence,) = [c for c in contracts if c["type"] == "independence" and "dialect" in c["name"]]
    for name in built_in():
        module = f"sluicegate.dialects.{name}"
        assert any(fnmatch.fnmatchcase(module, pattern) for pattern in independence["modules"]), module


def test_the_build_compiles_what_the_registrations_declare() -> None:
    """`_compiled.py` reads each package's `COMPILED` from its source; the registration passes
    the same constant, so the build and the registry cannot disagree."""
    declared = {
        f"sluicegate.dialects.{name}.{module}"
        for name, registration in dialect_table().registrations.items()
        if name in built_in()
        for module in registration.compiled
    }
    compiled = {m for m in _compiled.COMPILED if m.startswith("sluicegate.dialects.")}
    assert compiled == declared and declared  # the encoders, at least


def test_two_dialects_claiming_one_prefix_is_a_config_error() -> None:
    def spec(name: str) -> DialectSpec:
        return DialectSpec(name, ("/same/",), openai_error)

    def registration(name: str) -> Registration:
        return Registration(specs=(spec(name),), build=lambda _: [])

    with pytest.raises(ConfigError, match="both claim '/same/'"):
        DialectTable({"a": registration("a"), "b": registration("b")})


def test_discovery_reads_the_entry_points_and_fills_in_built_ins_they_do_not_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installed entry point wins over the built-in package of its name; a built-in package
    the installed metadata does not name yet (a checkout not reinstalled) is still found."""
    info = tmp_path / "other-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: other\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[sluicegate.dialects]\nollama = other.dialect:REGISTRATION\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = declared()
    assert found["ollama"] == "other.dialect:REGISTRATION"
    assert {name: value for name, value in found.items() if name != "ollama"} == {
        name: value for name, value in built_in().items() if name != "ollama"
    }


def test_a_registration_that_cannot_be_loaded_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="cannot be loaded"):
        load("gone", "sluicegate.dialects.nowhere:REGISTRATION")
    with pytest.raises(ConfigError, match="is not a sluicegate Registration"):
        load("spec", "sluicegate.dialects.ollama.dialect:SPEC")
