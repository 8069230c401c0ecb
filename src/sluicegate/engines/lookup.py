"""From configuration to engines: engine classes by name (entry points), `[[models]]` tables to
models or discovery sources."""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

from sluicegate.engines import model_defaults
from sluicegate.engines.base import ConfigError, Engine
from sluicegate.engines.discovery_sources import DiscoverySource
from sluicegate.engines.models import Model
from sluicegate.engines.registry import Registry

ENGINE_GROUP = "sluicegate.engines"
# Keys of every `[[models]]` table that the server reads itself; the rest go to the engine.
MODEL_KEYS = ("max_concurrency", "max_queue", "ttl", "aliases", "sampling", "tags")  # aliases: model_names.py
# Built-in engines newer than an installed copy's entry points (an editable install made before
# they were added): found by name until the next `pip install` writes their entry points.
BUILT_IN = {
    "whisper": "sluicegate.engines.whisper:WhisperEngine",
    "piper": "sluicegate.engines.piper:PiperEngine",
}


def engine_class(kind: str) -> type[Engine]:
    """Look an engine up by its config name in the `sluicegate.engines` entry points."""
    found = [ep for ep in entry_points(group=ENGINE_GROUP) if ep.name == kind]
    if found or kind in BUILT_IN:
        ep = found[0] if found else EntryPoint(kind, BUILT_IN[kind], ENGINE_GROUP)
        cls = ep.load()
        if not (isinstance(cls, type) and issubclass(cls, Engine)):
            raise ConfigError(f"entry point {ep.value!r} is not a sluicegate Engine")
        return cls
    known = sorted({ep.name for ep in entry_points(group=ENGINE_GROUP)} | set(BUILT_IN))
    raise ConfigError(f"unknown engine {kind!r}; installed engines: {', '.join(known)}")


def _limits(table: dict[str, Any], default_concurrency: int) -> tuple[int, int]:
    max_concurrency = table.get("max_concurrency", default_concurrency)
    max_queue = table.get("max_queue", 256)
    for key, value in (("max_concurrency", max_concurrency), ("max_queue", max_queue)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"model {table.get('id')!r}: `{key}` must be a non-negative integer")
    return max_concurrency, max_queue


def add_table(registry: Registry, table: dict[str, Any], base_dir: Path) -> None:
    """A `[[models]]` table → a model in `registry`, or a discovery source of models."""
    if isinstance(table.get("engine"), str):
        own = {k: v for k, v in table.items() if k not in MODEL_KEYS}
        cls = engine_class(table["engine"])
        discovery = cls.discovery(own, base_dir)
        if discovery is not None:
            registry.sources.append(DiscoverySource(discovery, *_limits(table, cls.default_max_concurrency)))
            return
    registry.add(build_model(table, base_dir))


def build_model(table: dict[str, Any], base_dir: Path) -> Model:
    """A `[[models]]` table → a `Model`; the engine validates its own keys."""
    for key in ("id", "engine"):
        if not isinstance(table.get(key), str) or not table[key]:
            raise ConfigError(f"every [[models]] table needs a string `{key}`")
    cls = engine_class(table["engine"])
    own = {k: v for k, v in table.items() if k not in MODEL_KEYS}
    engine = cls.from_config(own, base_dir)
    max_concurrency, max_queue = _limits(table, engine.default_concurrency())
    ttl = table.get("ttl")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl < 0):
        raise ConfigError(f"model {table['id']!r}: `ttl` must be a non-negative number of seconds")
    tags = table.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
        raise ConfigError(f"model {table['id']!r}: `tags` must be a list of non-empty strings")
    return Model(
        engine,
        max_concurrency=max_concurrency,
        max_queue=max_queue,
        factory=lambda: cls.from_config(own, base_dir),
        ttl=None if ttl is None else float(ttl),
        sampling=model_defaults.parse(table["id"], table.get("sampling")),
        tags=tuple(tags),
    )
