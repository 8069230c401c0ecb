"""LM Studio REST v1 `POST /api/v1/chat` as a `Dialect`: named events, stored chats that
continue in any stateful dialect (its input mapped to our own conversation items), `integrations`
as server-side tools."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluicegate.core.errors import ErrorKind, SluicegateError, invalid
from sluicegate.core.ids import new_id
from sluicegate.core.items import ConversationItem, MessageItem
from sluicegate.core.request import ChatRequest, ContentPart, RequestOptions, Role
from sluicegate.dialects.base import (
    ConversationInput,
    Dialect,
    DialectSpec,
    EncoderContext,
    ServerTools,
    Turn,
)
from sluicegate.dialects.lmstudio.encoder import LMStudioEncoder, Vocabulary, encoder_for, lmstudio_error
from sluicegate.dialects.lmstudio.request import LMStudioChatRequest, parse_lmstudio_chat, tool_selection

Json = dict[str, Any]
VOCABULARY_HEADER = "x-sluicegate-events"


@dataclass(slots=True)
class LMStudioTurn:
    request: LMStudioChatRequest
    vocabulary: Vocabulary


def _message(role: Role, parts: list[ContentPart]) -> MessageItem:
    return MessageItem(role, parts, new_id("msg_"), origin=SPEC_NAME)


SPEC_NAME = "lmstudio"
# LM Studio owns its versioned REST paths; the other `/api/` paths are Ollama's.
SPEC = DialectSpec(SPEC_NAME, ("/api/v1/", "/api/v0/"), lmstudio_error)


class LMStudioDialect(Dialect):
    spec = SPEC
    path = "/api/v1/chat"

    def __init__(self, default_vocabulary: str = "current", retention_days: float = 30.0) -> None:
        self.default_vocabulary = default_vocabulary
        self.retention_days = retention_days

    def _vocabulary(self, query: Mapping[str, str], headers: Mapping[str, str]) -> Vocabulary:
        chosen = query.get("events") or headers.get(VOCABULARY_HEADER) or self.default_vocabulary
        if chosen not in ("current", "v0"):
            raise invalid(f"Unknown event vocabulary '{chosen}'; use 'current' or 'v0'.", "events")
        return "v0" if chosen == "v0" else "current"

    def parse(self, body: Any, query: Mapping[str, str], headers: Mapping[str, str]) -> Turn:
        req = parse_lmstudio_chat(body)
        vocabulary = self._vocabulary(query, headers)
        items: list[ConversationItem] = []
        if req.system_prompt is not None:
            items.append(_message("system", [ContentPart("text", text=req.system_prompt)]))
        items.append(_message("user", req.input_parts))
        chat = ChatRequest(
            model=req.model,
            messages=[],
            sampling=req.sampling,
            reasoning_effort=req.reasoning,
            options=RequestOptions(context_length=req.context_length, context_overflow=req.context_overflow),
        )
        tools = (
            ServerTools(tool_selection(req.integrations), param="integrations") if req.integrations else None
        )
        return Turn(
            request=LMStudioTurn(req, vocabulary),
            chat=chat,
            stream=req.stream,
            conversation=ConversationInput(
                input_items=items,
                previous_response_id=req.previous_response_id,
                replace_system=True,
                previous_not_found=self._previous_not_found,
            ),
            tools=tools,
            store=req.store,
        )

    def _previous_not_found(self, response_id: str) -> SluicegateError:
        return SluicegateError(
            ErrorKind.NOT_FOUND,
            f"Could not find stored response for previous_response_id '{response_id}'. "
            "It may never have existed, have been stored with store=false, been deleted, or expired "
            f"(responses are kept {self.retention_days:g} days).",
            param="previous_response_id",
            code="previous_response_not_found",
        )

    def check(self, turn: Turn, info: Any) -> None:
        req: LMStudioChatRequest = turn.request.request
        if req.reasoning is not None:
            caps = info.capabilities
            allowed = caps.reasoning_options if caps.reasoning else []
            if req.reasoning not in allowed:
                supported = ", ".join(f"'{o}'" for o in allowed) or "none (this model does not reason)"
                raise invalid(
                    f"Reasoning setting '{req.reasoning}' is not supported by model '{req.model}'. "
                    f"Supported settings: {supported}",
                    "reasoning",
                    code="invalid_value",
                )
        maximum = info.context_length
        if req.context_length is not None and maximum is not None and req.context_length > maximum:
            raise invalid(
                f"context_length {req.context_length} is above the maximum of model '{req.model}' ({maximum}).",
                "context_length",
                code="invalid_value",
            )

    def encoder(self, turn: Turn, context: EncoderContext) -> LMStudioEncoder:
        return encoder_for(turn, context)  # compiled: no keyword arguments parsed per stream
