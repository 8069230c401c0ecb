"""The registry of dialects: every package's `Registration`, and the one table of their specs.

Dialects are found in the `sluicegate.dialects` entry point group, the built-in ones too (they
are declared in pyproject.toml as a third-party package declares its own). A source checkout
whose installed metadata predates a built-in package still finds it by its place:
`sluicegate/dialects/<name>/registration.py`, under the entry point name `<name>`. An entry
point of the same name wins.

Routing (unknown routes and wrong methods), auth (the 401 body), error handling and metrics
(`observe` labels) all read the specs' table, so a path's errors and metrics can never disagree
about which API it belongs to.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from pathlib import Path

from sluicegate.core.errors import ConfigError
from sluicegate.dialects.base import DialectSpec, Registration
from sluicegate.dialects.openai_errors import openai_error

GROUP = "sluicegate.dialects"
PACKAGE_DIR = Path(__file__).resolve().parent
# OpenAI's other endpoints (models, embeddings) and anything not claimed: OpenAI's error shape.
OPENAI = DialectSpec("openai", ("/v1/",), openai_error)
# The page, /health and /metrics: no API of their own (an empty metrics label).
UNCLAIMED = DialectSpec("", ("",), openai_error)


def built_in() -> dict[str, str]:
    """The dialect packages shipped in `sluicegate/dialects/`: name → entry point value."""
    return {
        path.parent.name: f"sluicegate.dialects.{path.parent.name}.registration:REGISTRATION"
        for path in sorted(PACKAGE_DIR.glob("*/registration.py"))
    }


def declared() -> dict[str, str]:
    """Every dialect's entry point value by name: the built-in packages (ours, whether or not
    this checkout's metadata names them yet), each replaced by another distribution's entry
    point of the same name."""
    found = built_in()
    for ep in entry_points(group=GROUP):
        if ep.dist is None or ep.dist.name != "sluicegate" or ep.name not in found:
            found[ep.name] = ep.value
    return found


def resolve(name: str, value: str) -> object:
    """What a "module:attribute" value names (an entry point's, a registration's routes)."""
    module, _, attribute = value.partition(":")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"dialect {name!r}: {value} cannot be loaded: {exc}") from exc


def load(name: str, value: str) -> Registration:
    """The registration an entry point value names."""
    registration = resolve(name, value)
    if not isinstance(registration, Registration):
        raise ConfigError(f"dialect {name!r}: {value} is not a sluicegate Registration")
    return registration


class DialectTable:
    """The registrations, and the specs' table routing, auth, errors and metrics read."""

    def __init__(self, registrations: dict[str, Registration]) -> None:
        self.registrations = registrations
        self.specs: tuple[DialectSpec, ...] = (
            *(spec for r in registrations.values() for spec in r.specs),
            OPENAI,
        )
        claimed: dict[str, str] = {}
        for spec in self.specs:
            for prefix in spec.prefixes:
                if prefix in claimed:
                    raise ConfigError(f"dialects {claimed[prefix]!r} and {spec.name!r} both claim {prefix!r}")
                claimed[prefix] = spec.name
        # Longest prefix first: `/api/v1/` (LM Studio) is tried before `/api/` (Ollama).
        self._by_prefix = sorted(((p, s) for s in self.specs for p in s.prefixes), key=lambda ps: -len(ps[0]))

    def dialect_for(self, path: str) -> DialectSpec:
        """The dialect a path belongs to (`UNCLAIMED` when none claims it)."""
        for prefix, spec in self._by_prefix:
            if path.startswith(prefix):
                return spec
        return UNCLAIMED

    def dialect_name(self, path: str) -> str:
        """The metrics label of a path's API ("" for the page, /health and /metrics)."""
        return self.dialect_for(path).name


_table: DialectTable | None = None


def dialect_table() -> DialectTable:
    """The process's dialects, discovered on first use."""
    global _table
    if _table is None:
        _table = DialectTable({name: load(name, value) for name, value in declared().items()})
    return _table


def dialect_for(path: str) -> DialectSpec:
    """The dialect a path belongs to (`UNCLAIMED` when none claims it)."""
    return dialect_table().dialect_for(path)


def dialect_name(path: str) -> str:
    """The metrics label of a path's API ("" for the page, /health and /metrics)."""
    return dialect_table().dialect_name(path)
