"""OpenAI Chat Completions as a `Dialect`: stateless; configured server-side tools run unseen."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sluicegate.core.tool_selection import ToolSelection
from sluicegate.dialects.base import Choices, Dialect, DialectSpec, EncoderContext, ServerTools, Turn
from sluicegate.dialects.chat_completions.encoder import (
    ChatCompletionsEncoder,
    ReasoningField,
    encoder_for,
    usage_body,
)
from sluicegate.dialects.chat_completions.request import parse_chat_request
from sluicegate.dialects.choices import IndexedChoices
from sluicegate.dialects.openai_errors import openai_error

# `/chat/`: the same API without `/v1` (a base URL without it; llama-server answers there too).
SPEC = DialectSpec("chat_completions", ("/v1/chat/", "/chat/"), openai_error)


class ChatCompletionsDialect(Dialect):
    spec = SPEC
    path = "/v1/chat/completions"
    also = ("/chat/completions",)  # a base URL without `/v1`, as llama-server answers it too

    def __init__(
        self,
        reasoning_field: ReasoningField = "reasoning_content",
        *,
        prefill_assistant: bool = False,
        verbose: bool = False,
    ) -> None:
        self.reasoning_field = reasoning_field
        self.prefill_assistant = prefill_assistant
        self.verbose = verbose  # `[chat_completions] verbose`: `__verbose` unless a request says no

    def parse(self, body: Any, query: Mapping[str, str], headers: Mapping[str, str]) -> Turn:
        chat, options = parse_chat_request(
            body, prefill_assistant=self.prefill_assistant, verbose=self.verbose
        )
        return Turn(
            request=options,
            chat=chat,
            stream=options.stream,
            # Configured MCP servers and plugins run server-side; the client sees only its own calls.
            tools=ServerTools(ToolSelection(all_configured=True), param="tools"),
            id_prefix="chatcmpl-",
            id_length=32,
        )

    def encoder(self, turn: Turn, context: EncoderContext) -> ChatCompletionsEncoder:
        return self._encoder(turn, context)

    def choices(self, turn: Turn) -> Choices:
        return IndexedChoices(turn, self._encoder, usage_body)

    def _encoder(
        self, turn: Turn, context: EncoderContext, choice: int | None = None
    ) -> ChatCompletionsEncoder:
        """The response's encoder, or (`choice`) that of one of `n` > 1 choices (`encoder_for`)."""
        return encoder_for(turn, context, self.reasoning_field, choice)
