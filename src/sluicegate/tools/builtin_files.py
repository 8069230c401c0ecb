"""The built-in `files` plugin: read-only access to one folder, written on the public plugin API.

```toml
[tools.plugins.files]
root = "docs"              # required; relative to the config file's folder
max_file_bytes = 262144    # read_file returns at most this much text
max_results = 200          # list_directory / search_files entries
```

Every path the model gives is relative to `root`; absolute paths, `..` and symlinks that lead
outside it are refused (checked on the resolved path, so a symlink pointing out is caught too).
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
from pathlib import Path
from typing import Any

from sluicegate.core.errors import ConfigError
from sluicegate.tools.base import ServerTool, ToolOutcome
from sluicegate.tools.plugins import ToolPlugin

DEFAULT_MAX_FILE_BYTES = 256 * 1024
DEFAULT_MAX_RESULTS = 200
MAX_SEARCHED_FILE_BYTES = 2 * 1024 * 1024

_PATH = {"type": "string", "description": "A path relative to the shared folder; '.' is the folder itself."}


class FileAccessError(Exception):
    """A refused or impossible request; the message is for the model."""


class FilesPlugin(ToolPlugin):
    plugin_id = "files"

    def __init__(
        self, root: Path, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES, max_results: int = DEFAULT_MAX_RESULTS
    ) -> None:
        super().__init__()
        self.root = root.resolve()
        self.max_file_bytes = max_file_bytes
        self.max_results = max_results

    @classmethod
    def from_config(cls, table: dict[str, Any], base_dir: Path) -> FilesPlugin:
        where = "[tools.plugins.files]"
        unknown = set(table) - {"root", "max_file_bytes", "max_results"}
        if unknown:
            raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
        root = table.get("root")
        if not isinstance(root, str) or not root:
            raise ConfigError(f"{where}.root is required: the folder the model may read")
        path = base_dir / Path(root).expanduser()
        if not path.is_dir():
            raise ConfigError(f"{where}.root: {path} is not a folder")
        limits = {}
        for key in ("max_file_bytes", "max_results"):
            value = table.get(key)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                    raise ConfigError(f"{where}.{key} must be a positive integer")
                limits[key] = value
        return cls(path, **limits)

    async def list_tools(self) -> list[ServerTool]:
        def tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> ServerTool:
            schema = {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            }
            return ServerTool(name, description, schema, self.info, {"readOnlyHint": True})

        return [
            tool(
                "list_directory",
                "List the files and folders in a folder of the shared folder (folders end with '/').",
                {"path": _PATH},
                [],
            ),
            tool(
                "read_file",
                f"Read a text file of the shared folder (at most {self.max_file_bytes} bytes from `offset`).",
                {
                    "path": _PATH,
                    "offset": {"type": "integer", "minimum": 0, "description": "Byte offset to start at."},
                },
                ["path"],
            ),
            tool(
                "search_files",
                "Find files of the shared folder whose path matches a glob pattern (e.g. '**/*.md'), "
                "and, given `contains`, list the lines that contain that text.",
                {
                    "pattern": {
                        "type": "string",
                        "description": "Glob pattern on the relative path; default '**/*'.",
                    },
                    "contains": {"type": "string", "description": "Text to look for (case-insensitive)."},
                    "path": _PATH,
                },
                [],
            ),
        ]

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        actions = {"list_directory": self._list, "read_file": self._read, "search_files": self._search}
        action = actions.get(name)
        if action is None:
            return ToolOutcome(
                f"Error: the files plugin has no tool '{name}'.", error=f"unknown tool '{name}'"
            )
        try:
            return ToolOutcome(await asyncio.to_thread(action, arguments))
        except FileAccessError as exc:
            return ToolOutcome(f"Error: {exc}", error=str(exc))
        except OSError as exc:
            message = f"cannot access that path ({exc.strerror or type(exc).__name__})"
            return ToolOutcome(f"Error: {message}", error=message)

    # --- the tools (run in a worker thread) ---------------------------------------------------

    def _resolve(self, text: Any) -> Path:
        if not isinstance(text, str):
            raise FileAccessError("`path` must be a string")
        if Path(text).is_absolute():
            raise FileAccessError(
                f"absolute paths are not allowed ({text!r}); give a path relative to the folder"
            )
        path = (self.root / text).resolve()
        if not path.is_relative_to(self.root):
            raise FileAccessError(f"{text!r} is outside the shared folder")
        return path

    def _relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix() or "."

    def _list(self, arguments: dict[str, Any]) -> str:
        folder = self._resolve(arguments.get("path", "."))
        if not folder.is_dir():
            raise FileAccessError(f"{arguments.get('path', '.')!r} is not a folder")
        lines = []
        for entry in sorted(folder.iterdir(), key=lambda p: p.name):
            if not entry.resolve().is_relative_to(self.root):
                continue  # a symlink leading outside
            lines.append(
                entry.name + "/" if entry.is_dir() else f"{entry.name} ({entry.stat().st_size} bytes)"
            )
        shown = lines[: self.max_results]
        more = f"\n... and {len(lines) - len(shown)} more" if len(lines) > len(shown) else ""
        return ("\n".join(shown) or "(empty folder)") + more

    def _read(self, arguments: dict[str, Any]) -> str:
        path = self._resolve(arguments.get("path"))
        if not path.is_file():
            raise FileAccessError(f"{arguments.get('path')!r} is not a file")
        offset = arguments.get("offset", 0)
        size = path.stat().st_size
        with path.open("rb") as handle:
            handle.seek(offset)
            data = handle.read(self.max_file_bytes)
        if b"\0" in data:
            raise FileAccessError(f"{arguments.get('path')!r} is a binary file; only text files can be read")
        text = data.decode("utf-8", errors="replace")
        end = offset + len(data)
        if end < size:
            text += f"\n[truncated: bytes {offset}-{end} of {size}; read on with offset={end}]"
        return text

    def _search(self, arguments: dict[str, Any]) -> str:
        base = self._resolve(arguments.get("path", "."))
        pattern = arguments.get("pattern") or "**/*"
        needle = (arguments.get("contains") or "").lower()
        results: list[str] = []
        for folder, dirs, files in os.walk(base):  # does not follow symlinked folders
            dirs.sort()
            for name in sorted(files):
                path = Path(folder) / name
                relative = self._relative(path)
                if not _matches(relative, pattern):
                    continue
                if not path.resolve().is_relative_to(self.root):
                    continue
                if not needle:
                    results.append(relative)
                else:
                    results += self._matching_lines(path, relative, needle)
                if len(results) >= self.max_results:
                    return (
                        "\n".join(results[: self.max_results])
                        + f"\n... stopped at {self.max_results} results"
                    )
        return "\n".join(results) or "no matches"

    def _matching_lines(self, path: Path, relative: str, needle: str) -> list[str]:
        if path.stat().st_size > MAX_SEARCHED_FILE_BYTES:
            return []
        data = path.read_bytes()
        if b"\0" in data:
            return []
        lines = data.decode("utf-8", errors="replace").splitlines()
        return [
            f"{relative}:{n}: {line.strip()[:200]}"
            for n, line in enumerate(lines, 1)
            if needle in line.lower()
        ]


def _matches(relative: str, pattern: str) -> bool:
    """Glob on the relative path (`*` crosses folders); '**/x' also matches 'x' at the top."""
    candidates = [pattern, pattern[3:]] if pattern.startswith("**/") else [pattern]
    name = relative.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(relative, p) for p in candidates) or (
        "/" not in pattern and fnmatch.fnmatch(name, pattern)
    )
