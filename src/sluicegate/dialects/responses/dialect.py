"""OpenAI Responses `POST /v1/responses` as a `Dialect`: stored state, background runs, MCP
tools with approvals. Retrieval, deletion, cancellation and input items are plain routes
(`routes/responses_stored.py`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.core.request import ChatRequest, RequestOptions
from sluicegate.core.sealing import Sealer
from sluicegate.core.tool_selection import PluginChoice, RequestServer, ToolSelection
from sluicegate.dialects.base import (
    ConversationInput,
    Dialect,
    DialectSpec,
    EncoderContext,
    ServerTools,
    Turn,
)
from sluicegate.dialects.openai_errors import openai_error
from sluicegate.dialects.responses.conversation import to_items
from sluicegate.dialects.responses.encoder import ReasoningNames, ResponsesEncoder, ResponseState
from sluicegate.dialects.responses.hosted import resolve_hosted
from sluicegate.dialects.responses.mcp_request import approval_policy
from sluicegate.dialects.responses.request import ResponsesRequest, parse_responses_request
from sluicegate.dialects.responses.sealed import reasoning_sealer

Json = dict[str, Any]
# A failed non-streamed response's HTTP status, by its error code (500 for the rest).
FAILED_STATUS_KIND = {
    "request_timeout": ErrorKind.TIMEOUT,
    "context_length_exceeded": ErrorKind.INVALID_REQUEST,
    "invalid_prompt": ErrorKind.INVALID_REQUEST,
    "rate_limit_exceeded": ErrorKind.RATE_LIMITED,
    "server_is_overloaded": ErrorKind.OVERLOADED,
    "store_unavailable": ErrorKind.OVERLOADED,
}


def tool_selection(req: ResponsesRequest, configured: list[str]) -> ToolSelection:
    """Request servers, plus every configured provider (`configured`: the catalog's plugin
    ids), each chosen explicitly rather than with `all_configured` so that a configured server
    (or plugin) the request names by label gets that tool's `allowed_tools`."""
    named = {_plugin_id(s.server_label, configured): s for s in req.mcp_servers if s.server_url is None}
    selection = ToolSelection()
    for plugin_id in configured:
        server = named.pop(plugin_id, None)
        selection.plugins.append(PluginChoice(plugin_id, server.allowed_tools if server else None))
    # Labels naming no configured server: the catalog refuses them, naming the known ones.
    selection.plugins += [PluginChoice(plugin_id, s.allowed_tools) for plugin_id, s in named.items()]
    for server in req.mcp_servers:
        if server.server_url is not None:
            selection.servers.append(
                RequestServer(server.server_label, server.server_url, server.headers, server.allowed_tools)
            )
    return selection


def _plugin_id(label: str, configured: list[str]) -> str:
    """A configured MCP server `mcp/<label>`, or a plugin named `<label>` (e.g. `files`)."""
    return label if label in configured and f"mcp/{label}" not in configured else f"mcp/{label}"


def chat_request(req: ResponsesRequest) -> ChatRequest:
    fmt = req.text.get("format", {})
    return ChatRequest(
        model=req.model,
        messages=[],
        tools=req.tool_specs,
        tool_choice=req.canonical_tool_choice,
        parallel_tool_calls=req.parallel_tool_calls,
        sampling=req.sampling,
        reasoning_effort=(req.reasoning or {}).get("effort"),
        response_format=fmt if fmt.get("type") != "text" else None,
        options=RequestOptions(ttl=req.ttl, context_overflow=req.context_overflow),
    )


SPEC = DialectSpec("responses", ("/v1/responses", "/responses"), openai_error)  # `/responses`: without `/v1`


class ResponsesDialect(Dialect):
    spec = SPEC
    path = "/v1/responses"
    also = ("/responses",)  # a base URL without `/v1`

    def __init__(
        self,
        configured_plugins: Callable[[], list[str]],
        reasoning_names: ReasoningNames = "openai",
        *,
        hosted_tools: dict[str, str] | None = None,
        sealer: Sealer | None = None,
    ) -> None:
        self.configured_plugins = configured_plugins
        self.reasoning_names = reasoning_names
        self.hosted_tools = hosted_tools or {}  # hosted tool type → the server-side provider serving it
        self.sealer = sealer

    def parse(self, body: Any, query: Mapping[str, str], headers: Mapping[str, str]) -> Turn:
        req = parse_responses_request(body)
        hosted = resolve_hosted(req, self.hosted_tools, self.configured_plugins())
        return Turn(
            headers=hosted.headers(),
            request=req,
            chat=chat_request(req),
            stream=req.stream,
            conversation=ConversationInput(
                input_items=to_items(req.input_items),
                previous_response_id=req.previous_response_id,
                instructions=req.instructions,
            ),
            tools=ServerTools(
                tool_selection(req, self.configured_plugins()),
                param="tools",
                needs_approval=approval_policy(req.mcp_servers),
                listed_labels=frozenset(s.server_label for s in req.mcp_servers),
            ),
            store=req.store,
            background=req.background,
        )

    def encoder(self, turn: Turn, context: EncoderContext) -> ResponsesEncoder:
        seal = reasoning_sealer(self.sealer, context.scope) if self.sealer is not None else None
        turn.request.model = turn.chat.model  # the served id: an alias or `default_model` resolved
        state = ResponseState(context.turn_id, turn.request, created_at=context.created, seal_reasoning=seal)
        return ResponsesEncoder(state, context.accumulator, reasoning_names=self.reasoning_names)

    def failure(self, result_error: ErrorInfo, body: Json | None) -> ErrorInfo:
        """A failed non-streaming response answers with the error its object carries."""
        error = (body or {}).get("error") or {}
        code = error.get("code") or result_error.code
        kind = FAILED_STATUS_KIND.get(code or "", ErrorKind.ENGINE)
        return replace(
            result_error, kind=kind, message=error.get("message") or result_error.message, code=code
        )
