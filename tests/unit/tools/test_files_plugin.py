"""Plugins through the `sluicegate.plugins` entry point, and the built-in read-only `files` plugin."""

from __future__ import annotations

import os
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from sluicegate.config import Settings
from sluicegate.core.errors import ConfigError, SluicegateError
from sluicegate.core.tool_selection import PluginChoice, ToolSelection
from sluicegate.tools.builtin_files import FilesPlugin
from sluicegate.tools.catalog import ToolCatalog
from sluicegate.tools.plugins import ENTRY_POINT_GROUP, load_plugins


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    root = tmp_path / "shared"
    (root / "notes").mkdir(parents=True)
    (root / "README.md").write_text("# Project\nThe secret word is sluice.\n", encoding="utf-8")
    (root / "notes" / "todo.md").write_text("- buy milk\n- open the SLUICE gate\n", encoding="utf-8")
    (root / "notes" / "data.bin").write_bytes(b"\x00\x01\x02")
    (tmp_path / "outside.txt").write_text("private", encoding="utf-8")
    os.symlink(tmp_path / "outside.txt", root / "escape.txt")
    os.symlink(tmp_path, root / "up")
    return root


def catalog_with_files(shared: Path, **table: object) -> ToolCatalog:
    settings = Settings(base_dir=shared.parent, tools_plugins={"files": {"root": "shared", **table}})
    return ToolCatalog.from_settings(settings)


def test_the_files_plugin_is_found_through_its_entry_point() -> None:
    (entry,) = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == "files"]
    assert entry.load() is FilesPlugin


def test_installed_plugins_are_enabled_only_by_their_table(shared: Path) -> None:
    assert load_plugins({}, shared.parent) == []
    assert load_plugins({"files": {"root": "shared", "enabled": False}}, shared.parent) == []
    (plugin,) = load_plugins({"files": {"root": "shared"}}, shared.parent)
    assert isinstance(plugin, FilesPlugin) and plugin.root == shared.resolve()


@pytest.mark.parametrize(
    ("tables", "message"),
    [
        ({"nope": {}}, "no plugin 'nope' is installed (installed: files"),
        ({"files": {}}, "[tools.plugins.files].root is required"),
        ({"files": {"root": "missing"}}, "is not a folder"),
        ({"files": {"root": "shared", "max_file_bytes": 0}}, "max_file_bytes must be a positive integer"),
        ({"files": {"root": "shared", "depth": 3}}, "unknown keys ['depth']"),
        ({"files": {"root": "shared", "enabled": "no"}}, "enabled must be true or false"),
    ],
)
def test_plugin_config_errors(shared: Path, tables: dict[str, dict[str, object]], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_plugins(tables, shared.parent)
    assert message in str(raised.value)


async def test_files_tools_are_listed_with_plugin_provider_info(shared: Path) -> None:
    catalog = catalog_with_files(shared)
    assert catalog.plugin_ids() == ["files"]
    toolset = await catalog.toolset(ToolSelection(plugins=[PluginChoice("files")]))
    assert sorted(toolset.tools) == ["list_directory", "read_file", "search_files"]
    (listing,) = toolset.listings
    assert listing.provider.lmstudio() == {"type": "plugin", "plugin_id": "files"}
    assert toolset.tools["read_file"].input_schema["required"] == ["path"]
    everything = await catalog.toolset(ToolSelection(all_configured=True))
    assert sorted(everything.tools) == sorted(toolset.tools)


async def test_list_read_and_search(shared: Path) -> None:
    toolset = await catalog_with_files(shared).toolset(ToolSelection(plugins=[PluginChoice("files")]))
    listing = await toolset.call("list_directory", "{}")
    # The symlinks leading out of the folder are not shown.
    assert listing.output == "README.md (37 bytes)\nnotes/"
    assert (
        await toolset.call("read_file", '{"path": "notes/todo.md"}')
    ).output == "- buy milk\n- open the SLUICE gate\n"
    found = await toolset.call("search_files", '{"pattern": "**/*.md"}')
    assert found.output == "README.md\nnotes/todo.md"
    lines = await toolset.call("search_files", '{"contains": "sluice"}')
    assert lines.output == "README.md:2: The secret word is sluice.\nnotes/todo.md:2: - open the SLUICE gate"


async def test_large_files_are_cut_and_binary_files_refused(shared: Path) -> None:
    toolset = await catalog_with_files(shared, max_file_bytes=10).toolset(ToolSelection(all_configured=True))
    first = await toolset.call("read_file", '{"path": "README.md"}')
    assert first.output == "# Project\n\n[truncated: bytes 0-10 of 37; read on with offset=10]"
    rest = await toolset.call("read_file", '{"path": "README.md", "offset": 29}')
    assert rest.output == "sluice.\n"
    binary = await toolset.call("read_file", '{"path": "notes/data.bin"}')
    assert binary.error is not None and "binary file" in binary.error


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("read_file", '{"path": "../outside.txt"}', "'../outside.txt' is outside the shared folder"),
        ("read_file", '{"path": "escape.txt"}', "'escape.txt' is outside the shared folder"),
        ("read_file", '{"path": "up/outside.txt"}', "'up/outside.txt' is outside the shared folder"),
        ("list_directory", '{"path": "up"}', "'up' is outside the shared folder"),
        ("search_files", '{"path": ".."}', "'..' is outside the shared folder"),
        (
            "read_file",
            '{"path": "/etc/passwd"}',
            "absolute paths are not allowed ('/etc/passwd'); give a path relative to the folder",
        ),
        ("read_file", '{"path": "notes"}', "'notes' is not a file"),
        ("list_directory", '{"path": "README.md"}', "'README.md' is not a folder"),
    ],
)
async def test_paths_outside_the_folder_are_refused(
    shared: Path, tool: str, arguments: str, message: str
) -> None:
    toolset = await catalog_with_files(shared).toolset(ToolSelection(all_configured=True))
    outcome = await toolset.call(tool, arguments)
    assert outcome.error == message
    assert outcome.output == f"Error: {message}"
    assert "private" not in outcome.output


async def test_schema_checks_apply_to_plugins_too(shared: Path) -> None:
    toolset = await catalog_with_files(shared).toolset(ToolSelection(all_configured=True))
    outcome = await toolset.call("read_file", '{"path": "README.md", "mode": "w"}')
    assert outcome.error is not None and "Additional properties are not allowed" in outcome.error


async def test_unknown_plugin_ids_are_request_errors(shared: Path) -> None:
    with pytest.raises(SluicegateError) as raised:
        await catalog_with_files(shared).toolset(ToolSelection(plugins=[PluginChoice("mcp/files")]))
    assert raised.value.info.code == "plugin_not_found"
