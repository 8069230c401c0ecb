"""Ollama's `/api/chat` and `/api/generate` as `Dialect`s: stateless, streamed as NDJSON by
default; configured server-side tools run in the tool loop unseen, as in Chat Completions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sluicegate.core.errors import ErrorKind, SluicegateError, invalid
from sluicegate.core.tool_selection import ToolSelection
from sluicegate.dialects.base import Dialect, DialectSpec, EncoderContext, ServerTools, Turn
from sluicegate.dialects.ollama.encoder import OllamaEncoder
from sluicegate.dialects.ollama.errors import ollama_error
from sluicegate.dialects.ollama.names import resolve_name
from sluicegate.dialects.ollama.request import OllamaOptions, parse_chat, parse_generate

# Every `/api/` path LM Studio's versioned prefixes do not claim (the registry: longest wins).
SPEC = DialectSpec("ollama", ("/api/",), ollama_error, transport="ndjson")


def model_not_found(name: str) -> SluicegateError:
    # Ollama's own wording, which clients show as it is.
    return SluicegateError(
        ErrorKind.NOT_FOUND, f"model '{name}' not found", param="model", code="model_not_found"
    )


def resolve_model(name: str, models: Mapping[str, Any]) -> str:
    """The served id an Ollama name means; Ollama's 404 when none."""
    found = resolve_name(name, models, lambda i: _path(models[i]))
    if found is None:
        raise model_not_found(name)
    return found


def _path(model: Any) -> str | None:
    path = model.engine.info().details.get("path")
    return path if isinstance(path, str) else None


class OllamaChatDialect(Dialect):
    spec = SPEC
    path = "/api/chat"

    def parse(self, body: Any, query: Mapping[str, str], headers: Mapping[str, str]) -> Turn:
        chat, options = parse_chat(body) if self.path == "/api/chat" else parse_generate(body)
        if options.empty:
            raise invalid("no messages: a load or an unload has no turn", "messages")
        return Turn(
            request=options,
            chat=chat,
            stream=options.stream,
            tools=ServerTools(ToolSelection(all_configured=True), param="tools"),
            id_prefix="",
        )

    def resolve_model(self, requested: str, models: Mapping[str, Any]) -> str:
        return resolve_model(requested, models)

    def check(self, turn: Turn, info: Any) -> None:
        """What the model cannot do is Ollama's 400 (`"name" does not support thinking`); a
        `num_ctx` above the model's is capped, as Ollama serves any."""
        name = turn.request.name
        caps = info.capabilities
        if turn.request.think not in (None, False) and not caps.reasoning:
            raise invalid(f'"{name}" does not support thinking', "think")
        if turn.chat.tools and not caps.tool_use:
            raise invalid(f'"{name}" does not support tools', "tools")
        prompt = turn.chat.prompt
        if prompt is not None and prompt.fill_in_middle and not caps.fill_in_middle:
            raise invalid(f'"{name}" does not support insert', "suffix")
        if prompt is not None and not caps.completion:
            raise invalid(f'"{name}" does not support raw prompts', "raw")
        options = turn.chat.options
        maximum = info.context_length
        if options.context_length is not None and maximum is not None and options.context_length > maximum:
            options.context_length = maximum

    def encoder(self, turn: Turn, context: EncoderContext) -> OllamaEncoder:
        options: OllamaOptions = turn.request
        return OllamaEncoder(options.name, context.accumulator, generate=options.endpoint == "generate")


class OllamaGenerateDialect(OllamaChatDialect):
    path = "/api/generate"
