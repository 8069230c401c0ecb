"""The `anthropic` engine: any Anthropic-compatible upstream (Anthropic's API, or another
server's `/v1/messages`) behind every dialect.

```toml
[[models]]
id = "claude"
engine = "anthropic"
base_url = "https://api.anthropic.com/v1"   # or base_urls = [...]; the same keys as `openai`
api_key_env = "ANTHROPIC_API_KEY"           # sent as x-api-key, with anthropic-version
upstream_model = "claude-sonnet-4-5"
reasoning = true
```

The upstream hears streamed Messages (anthropic_body.py) and its events are decoded by
anthropic_wire.py; replicas, failover, timeouts and relaying are the shared `UpstreamEngine`'s.
"""

from __future__ import annotations

from typing import ClassVar

import orjson

from sluicegate.core.request import ChatRequest
from sluicegate.engines.upstream.anthropic_body import Signatures, messages_body
from sluicegate.engines.upstream.anthropic_wire import MessagesDecoder
from sluicegate.engines.upstream.base import UpstreamEngine
from sluicegate.engines.upstream.config import Auth, UpstreamConfig
from sluicegate.engines.upstream.replicas import ReplicaSet

MESSAGES_PATH = "/messages"
# Upstream signatures by thinking text, one memory per upstream (its base URLs): every model
# served by one upstream accepts its signatures, another upstream would refuse them.
_SIGNATURES: dict[tuple[str, ...], Signatures] = {}


class AnthropicUpstreamEngine(UpstreamEngine):
    kind: ClassVar[str] = "anthropic"
    auth: ClassVar[Auth] = "x-api-key"
    path: ClassVar[str] = MESSAGES_PATH

    def __init__(self, config: UpstreamConfig, replicas: ReplicaSet | None = None) -> None:
        super().__init__(config, replicas)
        self.signatures = _SIGNATURES.setdefault(tuple(sorted(config.base_urls)), Signatures())

    def request_body(self, request: ChatRequest) -> bytes:
        return orjson.dumps(messages_body(request, self.config.upstream_model, self.signatures))

    def decoder(self) -> MessagesDecoder:
        return MessagesDecoder(self.signatures.remember)
