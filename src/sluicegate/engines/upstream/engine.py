"""The `openai` engine: any OpenAI-compatible upstream (vLLM, SGLang, llama-server, Ollama,
LM Studio, OpenAI) generates; Sluicegate adds the dialects, tools, state and robustness.

The upstream hears streamed Chat Completions (request_body.py) and its chunks are decoded by
wire.py; a text completion goes to its `/completions` (completions.py); replicas, failover, timeouts and relaying are the shared `UpstreamEngine`'s (base.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any, ClassVar

import orjson

from sluicegate.core.embeddings import EmbedRequest, EmbedResult
from sluicegate.core.errors import invalid
from sluicegate.core.request import ChatRequest
from sluicegate.core.rerank import RerankRequest, RerankResult
from sluicegate.core.speech import Upload
from sluicegate.engines.base import Capabilities, ModelInfo, Task
from sluicegate.engines.upstream.audio import relay_bytes
from sluicegate.engines.upstream.base import UpstreamEngine
from sluicegate.engines.upstream.completions import COMPLETIONS_PATH, CompletionChunkDecoder, completion_body
from sluicegate.engines.upstream.config import UpstreamConfig
from sluicegate.engines.upstream.embeddings import (
    EMBEDDINGS_PATH,
    MAX_UPSTREAM_BODY,
    RERANK_PATH,
    checked_embeddings,
    embed_result,
    rerank_result,
)
from sluicegate.engines.upstream.relay import REPLICA_HEADER, StreamDecoder
from sluicegate.engines.upstream.request_body import request_body
from sluicegate.engines.upstream.wire import ChunkDecoder, ContentParser
from sluicegate.parsing import THINK, OutputParser

__all__ = ["CHAT_PATH", "REPLICA_HEADER", "OpenAIUpstreamEngine"]

CHAT_PATH = "/chat/completions"


def content_parser(config: UpstreamConfig) -> ContentParser | None:
    """With `think_tags`, `<think>...</think>` an upstream leaves in `content` (one started
    without a reasoning parser) becomes reasoning; text without a tag passes straight through."""
    return OutputParser(reasoning=THINK) if config.think_tags else None


class OpenAIUpstreamEngine(UpstreamEngine):
    kind: ClassVar[str] = "openai"
    path: ClassVar[str] = CHAT_PATH

    _offered: tuple[Capabilities, Capabilities] | None = None  # (config's, with completions)

    def info(self) -> ModelInfo:
        info = super().info()
        # Completions are relayed to the upstream's `/completions`: whether its model takes a
        # suffix is the upstream's to say (its 400 reaches the client). Derived once per
        # capabilities object of the config (info() runs on every request), and again when the
        # config's is another one. Shared like the config's own, which `super().info()` shares.
        configured = info.capabilities
        offered = self._offered
        if offered is None or offered[0] is not configured:
            offered = self._offered = (configured, replace(configured, completion=True, fill_in_middle=True))
        info.capabilities = offered[1]
        return info

    def check_completion(self, request: ChatRequest) -> None:
        super().check_completion(request)
        prompt = request.prompt
        assert prompt is not None
        if prompt.extra or prompt.middle:  # llama-server's infill fields: no OpenAI equivalent
            raise invalid(
                f"Model {self.model_id!r} is served by an OpenAI-compatible upstream, which takes "
                "no 'input_extra' or infill 'prompt'; send 'input_prefix' and 'input_suffix' only.",
                param="input_extra" if prompt.extra else "prompt",
            )

    def request_body(self, request: ChatRequest) -> bytes:
        if request.prompt is not None:
            return orjson.dumps(completion_body(request, self.config.upstream_model))
        return orjson.dumps(request_body(request, self.config.upstream_model))

    def decoder(self) -> ChunkDecoder:
        return ChunkDecoder(content_parser(self.config))

    def route(self, request: ChatRequest) -> tuple[str, StreamDecoder]:
        if request.prompt is not None:  # text: no `<think>` tags looked for
            return COMPLETIONS_PATH, CompletionChunkDecoder(None)
        return self.path, self.decoder()

    def tasks(self) -> frozenset[Task]:
        """What an OpenAI-compatible server may offer besides chat; one that does not answers
        with its own error, relayed."""
        return frozenset({"chat", "embeddings", "rerank", "transcription", "speech"})

    def relay_audio(self, path: str, body: Upload | dict[str, Any]) -> AsyncIterator[bytes] | None:
        """OpenAI's audio endpoints, relayed (engines/upstream/audio.py)."""
        return relay_bytes(self, path, body)

    async def embed(self, request: EmbedRequest) -> EmbedResult:
        """As an OpenAI embeddings request (for the dialects that relay nothing: Ollama's)."""
        body: dict[str, Any] = {"input": request.inputs}
        if request.dimensions is not None:
            body["dimensions"] = request.dimensions
        return embed_result(await self.relay(EMBEDDINGS_PATH, body))

    async def rerank(self, request: RerankRequest) -> RerankResult:
        answer, replica = await self._exchange_json(
            RERANK_PATH, {"query": request.query, "documents": request.documents}
        )
        return rerank_result(answer, len(request.documents), replica)

    async def _exchange_json(self, path: str, body: dict[str, Any]) -> tuple[Any, str]:
        try:
            payload = orjson.dumps({**body, "model": self.config.upstream_model})
        except orjson.JSONEncodeError as exc:
            raise invalid(f"The request cannot be sent upstream: {exc}.") from exc
        return await self.exchange(path, payload, max_bytes=MAX_UPSTREAM_BODY)

    async def relay(self, path: str, body: dict[str, Any]) -> Any:
        """The request relayed as it came (with the upstream's model name), under the chat
        stream's replica failover and clocks; the answer names our model id. An embeddings
        answer is checked to be one (an upstream's 200 of another shape is a 502)."""
        answer, replica = await self._exchange_json(path, body)
        if path == EMBEDDINGS_PATH:
            answer = checked_embeddings(answer, replica)
        if isinstance(answer, dict) and "model" in answer:
            answer["model"] = self.model_id  # the client asked for our id
        return answer
