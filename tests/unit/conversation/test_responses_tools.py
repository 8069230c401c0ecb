"""The Responses route's tool plumbing: which providers a request selects, and which approval
answers are valid and run."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sluicegate.conversation.approvals import Approvals, resolve_approvals
from sluicegate.core.errors import SluicegateError
from sluicegate.core.tool_selection import PluginChoice, RequestServer
from sluicegate.dialects.responses.conversation import to_item, to_items
from sluicegate.dialects.responses.dialect import tool_selection
from sluicegate.dialects.responses.request import parse_responses_request
from sluicegate.store.base import StoredResponse
from sluicegate.store.sqlite import SQLiteStore

Json = dict[str, Any]
REQUEST = {
    "type": "mcp_approval_request",
    "id": "mcpr_1",
    "server_label": "web",
    "name": "add",
    "arguments": "{}",
}


def answer(request_id: str = "mcpr_1", approve: bool = True) -> Json:
    return {
        "type": "mcp_approval_response",
        "id": "mcpa_1",
        "approval_request_id": request_id,
        "approve": approve,
    }


async def approvals_of(history: list[Json], items: list[Json], store: SQLiteStore) -> Approvals:
    return await resolve_approvals(to_items(history), to_items(items), store)


def test_selection_offers_every_configured_provider_and_the_request_servers() -> None:
    req = parse_responses_request(
        {
            "model": "m",
            "input": "hi",
            "tools": [
                {"type": "mcp", "server_label": "web", "server_url": "https://x/mcp", "headers": {"k": "v"}},
                {"type": "mcp", "server_label": "calc", "allowed_tools": ["add"]},
                {"type": "mcp", "server_label": "files", "allowed_tools": ["read"]},
                {"type": "mcp", "server_label": "ghost"},
            ],
        }
    )
    selection = tool_selection(req, ["files", "mcp/calc", "mcp/other"])
    assert selection.plugins == [
        PluginChoice("files", ["read"]),  # a plugin named by its id
        PluginChoice("mcp/calc", ["add"]),
        PluginChoice("mcp/other", None),  # configured, not named: offered whole
        PluginChoice("mcp/ghost", None),  # named, not configured: the catalog refuses it
    ]
    assert selection.servers == [RequestServer("web", "https://x/mcp", {"k": "v"}, None)]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    db = SQLiteStore(tmp_path / "store.sqlite3")
    db.read_item = to_item  # as the wiring sets it
    yield db
    await db.aclose()


async def test_approved_requests_from_the_history_run_once(store: SQLiteStore) -> None:
    approvals = await approvals_of([REQUEST, answer()], [answer()], store)
    assert (approvals.approved, approvals.fetched) == ([to_item(REQUEST)], [])
    already = {"type": "mcp_call", "id": "fc_1", "approval_request_id": "mcpr_1"}
    assert (await approvals_of([REQUEST, already, answer()], [answer()], store)).approved == []
    assert (
        await approvals_of([REQUEST, answer(approve=False)], [answer(approve=False)], store)
    ).approved == []


async def test_a_request_found_only_in_the_store_is_fetched(store: SQLiteStore) -> None:
    now = time.time()
    await store.put(
        StoredResponse("resp_1", {"id": "resp_1", "output": [REQUEST]}, [], [REQUEST], now, now + 60)
    )
    approvals = await approvals_of([answer()], [answer()], store)
    assert approvals.approved == approvals.fetched == [to_item(REQUEST)]


async def test_an_answer_to_an_unknown_request_names_the_parameter(store: SQLiteStore) -> None:
    with pytest.raises(SluicegateError) as caught:
        await approvals_of([answer("mcpr_x")], [{"type": "message"}, answer("mcpr_x")], store)
    assert (caught.value.info.param, caught.value.info.code) == (
        "input[1].approval_request_id",
        "approval_request_not_found",
    )
