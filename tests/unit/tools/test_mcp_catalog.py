"""The tool catalog against real MCP servers: `calc` over stdio and `web` over streamable HTTP."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from mcp_fixtures import (
    FAIL_PREFIX,
    TOOL_NAMES,
    HttpMcpServer,
    free_port,
    mcp_http_server,
    mcp_json,
    stdio_entry,
    write_mcp_json,
)
from sluicegate.config import Settings
from sluicegate.core.allowlist import AllowList
from sluicegate.core.errors import SluicegateError
from sluicegate.core.tool_selection import PluginChoice, RequestServer, ToolSelection
from sluicegate.tools.catalog import ToolCatalog

__all__ = ["mcp_http_server", "mcp_json"]  # the fixture, imported for pytest

pytestmark = pytest.mark.asyncio(loop_scope="module")


def catalog_for(folder: Path, servers: dict[str, dict[str, object]], **settings: object) -> ToolCatalog:
    mcp_json = write_mcp_json(folder, servers)
    return ToolCatalog.from_settings(Settings(base_dir=folder, tools_mcp_config=mcp_json, **settings))  # type: ignore[arg-type]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def catalog(
    tmp_path_factory: pytest.TempPathFactory, mcp_http_server: HttpMcpServer
) -> AsyncIterator[ToolCatalog]:
    servers = {
        "calc": stdio_entry(),
        "web": mcp_http_server.entry(),
        "quick": stdio_entry(prefix="quick_", timeout=1, allowed_tools=["quick_slow", "quick_add"]),
    }
    catalog = catalog_for(tmp_path_factory.mktemp("catalog"), servers, tools_allow_request_servers=True)
    await catalog.start()
    yield catalog
    await catalog.aclose()


async def test_configured_servers_are_plugins_named_mcp_slash_name(catalog: ToolCatalog) -> None:
    assert catalog.plugin_ids() == ["mcp/calc", "mcp/quick", "mcp/web"]
    toolset = await catalog.toolset(ToolSelection(all_configured=True))
    assert [(listing.provider.id, listing.error) for listing in toolset.listings] == [
        ("mcp/calc", None),
        ("mcp/web", None),
        ("mcp/quick", None),
    ]
    calc, web, quick = toolset.listings
    assert [t.name for t in calc.tools] == TOOL_NAMES
    assert [t.name for t in web.tools] == ["web_" + name for name in TOOL_NAMES]
    assert [t.name for t in quick.tools] == ["quick_add", "quick_slow"]  # mcp.json allowed_tools
    add = toolset.tools["add"]
    assert add.input_schema["required"] == ["a", "b"]
    assert add.description == "Add two integers and return the sum."
    assert toolset.provider("web_echo") == web.provider
    assert web.provider.lmstudio() == {"type": "plugin", "plugin_id": "mcp/web"}
    assert web.provider.server_label == "web"
    assert toolset.provider("nope") is None


async def test_request_allowed_tools_narrow_a_plugin(catalog: ToolCatalog) -> None:
    toolset = await catalog.toolset(
        ToolSelection(plugins=[PluginChoice("mcp/web", ["web_echo", "web_fail"])])
    )
    assert sorted(toolset.tools) == ["web_echo", "web_fail"]
    outcome = await toolset.call("web_add", '{"a": 1, "b": 2}')
    assert outcome.error == "unknown tool 'web_add'"
    assert "Available tools: web_echo, web_fail" in outcome.output


async def test_calls_over_stdio_and_http(catalog: ToolCatalog) -> None:
    toolset = await catalog.toolset(ToolSelection(all_configured=True))
    assert (await toolset.call("add", '{"a": 2, "b": 40}')).output == "42"
    weather = await toolset.call("web_get_weather", '{"city": "Paris"}')
    assert weather.ok and weather.output == "Paris: 18°C, light rain (celsius)"


async def test_a_tool_error_is_an_error_outcome(catalog: ToolCatalog) -> None:
    toolset = await catalog.toolset(ToolSelection(all_configured=True))
    for name in ("fail", "web_fail"):
        outcome = await toolset.call(name, '{"message": "boom"}')
        assert not outcome.ok
        assert FAIL_PREFIX + "boom" in outcome.output
        assert outcome.error is not None and FAIL_PREFIX + "boom" in outcome.error


async def test_a_slow_call_times_out_and_the_server_stays_usable(catalog: ToolCatalog) -> None:
    toolset = await catalog.toolset(ToolSelection(plugins=[PluginChoice("mcp/quick")]))
    outcome = await toolset.call("quick_slow", '{"seconds": 30}')
    assert outcome.error == "the tool 'quick_slow' did not answer within 1 seconds"
    assert "cancelled" in outcome.output
    assert (await toolset.call("quick_add", '{"a": 1, "b": 1}')).output == "2"


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ('{"a": 1', "they are not valid JSON"),
        ("[1, 2]", "they must be a JSON object, not list"),
        ('{"a": 1}', "'b' is a required property"),
        ('{"a": "one", "b": 2}', "'one' is not of type 'integer' (at 'a')"),
    ],
)
async def test_bad_arguments_are_reported_to_the_model(
    catalog: ToolCatalog, arguments: str, problem: str
) -> None:
    toolset = await catalog.toolset(ToolSelection(all_configured=True))
    outcome = await toolset.call("add", arguments)
    assert outcome.error is not None and outcome.error.startswith("invalid arguments: " + problem)
    assert outcome.output.startswith("Error: invalid arguments for the tool 'add': " + problem)
    assert outcome.output.endswith("Fix the arguments and call it again.")


async def test_empty_arguments_mean_no_arguments(catalog: ToolCatalog) -> None:
    toolset = await catalog.toolset(ToolSelection(all_configured=True))
    assert (await toolset.call("pid", "")).output.isdigit()


async def test_a_stdio_server_that_dies_mid_call_fails_that_call_and_comes_back(catalog: ToolCatalog) -> None:
    toolset = await catalog.toolset(ToolSelection(plugins=[PluginChoice("mcp/calc")]))
    before = await toolset.call("pid", "{}")
    crashed = await toolset.call("crash", "{}")
    assert crashed.error is not None and "connection to MCP server 'calc' lost" in crashed.error
    after = await toolset.call("pid", "{}")
    assert after.ok and after.output.isdigit() and after.output != before.output


async def test_an_http_server_killed_mid_call_fails_it_and_a_restart_is_picked_up(
    catalog: ToolCatalog, mcp_http_server: HttpMcpServer
) -> None:
    toolset = await catalog.toolset(ToolSelection(plugins=[PluginChoice("mcp/web")]))
    before = await toolset.call("web_pid", "{}")
    crashed = await toolset.call("web_crash", "{}")
    assert crashed.error is not None and "connection to MCP server 'web' lost" in crashed.error
    down = await toolset.call("web_add", '{"a": 1, "b": 2}')
    assert down.error is not None and "'web'" in down.error
    mcp_http_server.restart()
    after = await toolset.call("web_pid", "{}")
    assert after.ok and after.output != before.output
    # The listing survived (cached) and is still served.
    assert "web_add" in (await catalog.toolset(ToolSelection(plugins=[PluginChoice("mcp/web")]))).tools


async def test_unknown_plugin_is_a_request_error(catalog: ToolCatalog) -> None:
    with pytest.raises(SluicegateError) as raised:
        await catalog.toolset(ToolSelection(plugins=[PluginChoice("mcp/nope")]))
    assert raised.value.info.code == "plugin_not_found"
    assert raised.value.info.param == "integrations"
    assert "mcp/calc" in raised.value.info.message


async def test_request_servers_are_refused_on_loopback_unless_allow_listed(
    catalog: ToolCatalog, mcp_http_server: HttpMcpServer
) -> None:
    server = RequestServer("mine", mcp_http_server.url)
    with pytest.raises(SluicegateError) as raised:
        await catalog.toolset(ToolSelection(servers=[server]))
    assert raised.value.info.code == "server_url_refused"
    assert "127.0.0.1" in raised.value.info.message


async def test_an_allow_listed_request_server_is_ephemeral_and_closed_with_the_toolset(
    tmp_path: Path, mcp_http_server: HttpMcpServer
) -> None:
    catalog = ToolCatalog(
        allow_request_servers=True, allowed_hosts=AllowList.parse([f"127.0.0.1:{mcp_http_server.port}"])
    )
    server = RequestServer("mine", mcp_http_server.url, allowed_tools=["web_add"])
    toolset = await catalog.toolset(ToolSelection(servers=[server]))
    try:
        (listing,) = toolset.listings
        assert listing.error is None and [t.name for t in listing.tools] == ["web_add"]
        assert listing.provider.lmstudio() == {"type": "ephemeral_mcp", "server_label": "mine"}
        assert (await toolset.call("web_add", '{"a": 20, "b": 22}')).output == "42"
    finally:
        await toolset.aclose()
    assert all(not getattr(p, "_connection", None) for p in toolset._owned)  # nothing left open


async def test_request_servers_are_off_by_default(mcp_http_server: HttpMcpServer) -> None:
    with pytest.raises(SluicegateError) as raised:
        await ToolCatalog().toolset(ToolSelection(servers=[RequestServer("x", mcp_http_server.url)]))
    assert raised.value.info.code == "request_servers_disabled"


async def test_dead_servers_are_reported_not_fatal(tmp_path: Path) -> None:
    servers = {
        "gone": {"url": f"http://127.0.0.1:{free_port()}/mcp"},
        "broken": {"command": str(tmp_path / "no-such-server")},
        "calc": stdio_entry(),
    }
    catalog = catalog_for(tmp_path, servers)
    await catalog.start()
    try:
        toolset = await catalog.toolset(ToolSelection(all_configured=True))
        errors = {listing.provider.id: listing.error for listing in toolset.listings}
        assert errors["mcp/calc"] is None
        assert errors["mcp/gone"] is not None and "MCP server 'gone' is unavailable" in errors["mcp/gone"]
        assert (
            errors["mcp/broken"] is not None and "MCP server 'broken' is unavailable" in errors["mcp/broken"]
        )
        assert sorted(toolset.tools) == sorted(TOOL_NAMES)
    finally:
        await catalog.aclose()


async def test_a_server_down_at_startup_is_found_once_it_is_up(tmp_path: Path) -> None:
    server = HttpMcpServer(tmp_path, prefix="late_")
    catalog = ToolCatalog.from_settings(
        Settings(base_dir=tmp_path, tools_mcp_config=write_mcp_json(tmp_path, {"late": server.entry()}))
    )
    try:
        first = await catalog.toolset(ToolSelection(all_configured=True))
        assert first.listings[0].error is not None
        server.start()
        outcome = await catalog.providers["mcp/late"].call("late_add", {"a": 1, "b": 2})
        assert outcome.output == "3"  # a call reconnects on its own
        second = await catalog.toolset(ToolSelection(all_configured=True))
        assert second.listings[0].error is None and "late_add" in second.tools
    finally:
        await catalog.aclose()
        server.stop()


async def test_legacy_sse_servers_and_name_clashes(tmp_path: Path, mcp_http_server: HttpMcpServer) -> None:
    sse = HttpMcpServer(tmp_path, transport="sse")  # same `web_` names as the streamable HTTP one
    sse.start()
    catalog = catalog_for(tmp_path, {"web": mcp_http_server.entry(), "legacy": sse.entry()})
    try:
        toolset = await catalog.toolset(ToolSelection(all_configured=True))
        web, legacy = toolset.listings
        assert legacy.error is None and legacy.tools == []  # every name was taken by `web`, listed first
        assert toolset.provider("web_add") == web.provider
        only_sse = await catalog.toolset(ToolSelection(plugins=[PluginChoice("mcp/legacy")]))
        assert [t.name for t in only_sse.listings[0].tools] == ["web_" + name for name in TOOL_NAMES]
        assert (await only_sse.call("web_echo", '{"text": "over SSE"}')).output == "over SSE"
    finally:
        await catalog.aclose()
        sse.stop()


async def test_the_shared_mcp_json_fixture(mcp_json: Path) -> None:
    catalog = ToolCatalog.from_settings(Settings(tools_mcp_config=mcp_json))
    try:
        assert catalog.plugin_ids() == ["mcp/calc", "mcp/web"]
        toolset = await catalog.toolset(ToolSelection(all_configured=True))
        assert (await toolset.call("echo", '{"text": "hi"}')).output == "hi"
        assert (await toolset.call("web_echo", '{"text": "hi"}')).output == "hi"
    finally:
        await catalog.aclose()


async def test_a_stdio_server_that_died_while_idle_is_replaced_before_the_call(tmp_path: Path) -> None:
    catalog = catalog_for(tmp_path, {"calc": stdio_entry()})
    provider = catalog.providers["mcp/calc"]
    try:
        toolset = await catalog.toolset(ToolSelection(all_configured=True))
        pid = int((await toolset.call("pid", "{}")).output)
        os.kill(pid, signal.SIGKILL)
        connection = provider._connection  # type: ignore[attr-defined]
        for _ in range(200):  # the session notices the end of the server's output
            if not connection.alive:
                break
            await asyncio.sleep(0.05)
        outcome = await toolset.call("add", '{"a": 1, "b": 2}')
        assert outcome.output == "3"
        assert int((await toolset.call("pid", "{}")).output) != pid
    finally:
        await catalog.aclose()
