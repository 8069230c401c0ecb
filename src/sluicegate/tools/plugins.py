"""Plugins: Python packages that provide tools through the `sluicegate.plugins` entry-point group.

A plugin is a `ToolPlugin` subclass named by an entry point whose name is its `plugin_id`:

```toml
# the plugin package's pyproject.toml
[project.entry-points."sluicegate.plugins"]
weather = "my_package.tools:WeatherPlugin"
```

Installing a plugin exposes nothing: it is enabled by its config table, `[tools.plugins.<id>]`
(even an empty one), and `enabled = false` there turns it off again. Its settings are the
table's other keys, checked by `from_config`, which raises ConfigError for bad or missing ones.
Calls report as `provider_info {type: "plugin", plugin_id}`.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, ClassVar

from sluicegate.core.errors import ConfigError
from sluicegate.tools.base import ProviderInfo, ToolProvider

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "sluicegate.plugins"


class ToolPlugin(ToolProvider):
    """A tool provider loaded from an entry point and configured by `[tools.plugins.<id>]`."""

    plugin_id: ClassVar[str]

    def __init__(self) -> None:
        self.info = ProviderInfo("plugin", self.plugin_id, self.plugin_id)

    @classmethod
    @abstractmethod
    def from_config(cls, table: dict[str, Any], base_dir: Path) -> ToolPlugin:
        """Build the plugin from its config table (relative paths start at `base_dir`, the config
        file's folder); raise ConfigError naming the key on bad or missing settings."""


def installed_plugins() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def load_plugins(tables: dict[str, dict[str, Any]], base_dir: Path) -> list[ToolPlugin]:
    """The plugins enabled by config tables, built; ConfigError for unknown or broken ones."""
    installed = installed_plugins()
    plugins: list[ToolPlugin] = []
    for plugin_id, table in tables.items():
        where = f"[tools.plugins.{plugin_id}]"
        entry = installed.get(plugin_id)
        if entry is None:
            known = ", ".join(sorted(installed)) or "none"
            raise ConfigError(f"{where}: no plugin '{plugin_id}' is installed (installed: {known})")
        settings = dict(table)
        enabled = settings.pop("enabled", True)
        if not isinstance(enabled, bool):
            raise ConfigError(f"{where}.enabled must be true or false")
        if not enabled:
            continue
        try:
            cls = entry.load()
        except Exception as exc:
            raise ConfigError(f"{where}: cannot load {entry.value}: {exc}") from exc
        if not (isinstance(cls, type) and issubclass(cls, ToolPlugin)):
            raise ConfigError(f"{where}: {entry.value} is not a sluicegate ToolPlugin")
        if getattr(cls, "plugin_id", None) != plugin_id:
            raise ConfigError(
                f"{where}: {entry.value} declares plugin_id {getattr(cls, 'plugin_id', None)!r}"
            )
        plugins.append(cls.from_config(settings, base_dir))
    for plugin_id in sorted(set(installed) - set(tables)):
        log.debug(
            "plugin '%s' is installed but not enabled (no [tools.plugins.%s] table)", plugin_id, plugin_id
        )
    return plugins
