"""Which served model a request's model name means: the one place every dialect, `count_tokens`,
embeddings and rerank ask (`Registry.resolve`).

In order: a served id is itself; then a model's `aliases` (exact names first, then glob
patterns such as `gpt-*`, in the order the config declares them); then the dialect's own naming
(Ollama's `name:tag`); then `[server] default_model` for a request that names no model or one
the server does not have — what LM Studio, Ollama-fronting proxies and llama-server users count
on. Without a default, a missing name is a 400 and an unknown one the registry's 404, as before.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sluicegate.core.errors import ConfigError, SluicegateError, invalid

MISSING_MODEL = "Missing required parameter: 'model'."
_GLOB = frozenset("*?[")


@dataclass(frozen=True, slots=True)
class ModelNames:
    default: str | None = None  # `[server] default_model`
    aliases: tuple[tuple[str, str], ...] = ()  # (a name or a glob, the model id), config order

    @classmethod
    def from_config(cls, default: str | None, tables: Iterable[Mapping[str, Any]]) -> ModelNames:
        """From `[server] default_model` and the `aliases` of each `[[models]]` table."""
        aliases: list[tuple[str, str]] = []
        for table in tables:
            names = table.get("aliases", [])
            model_id = table.get("id")
            if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
                raise ConfigError(f"model {model_id!r}: `aliases` must be a list of names or glob patterns")
            if names and not isinstance(model_id, str):
                raise ConfigError("`aliases` belong to a [[models]] table with an `id`")
            aliases += [(name, str(model_id)) for name in names]
        exact = [pair for pair in aliases if not _GLOB & set(pair[0])]
        globs = [pair for pair in aliases if _GLOB & set(pair[0])]
        return cls(default, tuple(exact + globs))

    def names_of(self, model_id: str) -> list[str]:
        """The names a request may give for a model: its id, then its exact aliases (patterns
        are not names), as llama-server lists its `--alias` names."""
        return [
            model_id,
            *(name for name, target in self.aliases if target == model_id and not _GLOB & set(name)),
        ]

    def alias(self, name: str) -> str | None:
        """The model `name` is an alias of (the first match), or None."""
        for pattern, model_id in self.aliases:
            if name == pattern or fnmatch.fnmatchcase(name, pattern):
                return model_id
        return None

    def resolve(
        self, requested: str | None, models: Mapping[str, object], own: Callable[[str], str] | None = None
    ) -> str:
        """The served id `requested` means (`own`: the dialect's naming, which may raise its
        own not-found); an unknown id is returned as it is, for the registry's 404."""
        if requested:
            if requested in models:
                return requested
            if (target := self.alias(requested)) is not None:
                return target
            if own is not None:
                try:
                    found = own(requested)
                except SluicegateError:
                    if self.default is None:
                        raise
                else:
                    if found in models or self.default is None:
                        return found
        if self.default is not None:
            return self.default
        if not requested:
            raise invalid(MISSING_MODEL, "model", "missing_required_parameter")
        return requested
