"""Anthropic Messages as a `Dialect`: stateless; configured server-side tools run unseen."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sluicegate.core.tool_selection import ToolSelection
from sluicegate.dialects.anthropic.encoder import PING, AnthropicEncoder, anthropic_error, anthropic_status
from sluicegate.dialects.anthropic.request import MessagesOptions, clamp_max_tokens, parse_messages_request
from sluicegate.dialects.anthropic.signature import ThinkingSigner
from sluicegate.dialects.base import Dialect, DialectSpec, EncoderContext, ServerTools, Turn

SPEC = DialectSpec("anthropic", ("/v1/messages",), anthropic_error, anthropic_status, heartbeat=PING)


class AnthropicDialect(Dialect):
    spec = SPEC
    path = "/v1/messages"

    def __init__(self, signer: ThinkingSigner) -> None:
        self.signer = signer

    def parse(self, body: Any, query: Mapping[str, str], headers: Mapping[str, str]) -> Turn:
        # `?beta=true` (Claude Code) and `anthropic-version` need nothing; betas are recorded.
        chat, options = parse_messages_request(body, self.signer, betas=headers.get("anthropic-beta"))
        return Turn(
            request=options,
            chat=chat,
            stream=options.stream,
            tools=ServerTools(ToolSelection(all_configured=True), param="tools"),
            id_prefix="msg_",
            id_length=32,
        )

    def check(self, turn: Turn, capabilities: Any) -> None:
        clamp_max_tokens(turn.chat, getattr(capabilities, "context_length", None))

    def encoder(self, turn: Turn, context: EncoderContext) -> AnthropicEncoder:
        options: MessagesOptions = turn.request
        return AnthropicEncoder(
            context.turn_id, turn.chat.model, self.signer, omit_thinking=options.omit_thinking
        )
