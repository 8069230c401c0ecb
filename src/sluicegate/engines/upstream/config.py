"""The `[[models]]` table of an `engine = "openai"` model, validated key by key.

```toml
[[models]]
id = "qwen"                         # with discover = true: optional; "<id>/" is then the prefix
engine = "openai"
base_url = "http://10.0.0.5:8000/v1"   # or base_urls = [...] for replicas
api_key_env = "UPSTREAM_KEY"        # or api_key = "..."
upstream_model = "Qwen/Qwen3-8B"    # default: the id
headers = { "X-Team" = "search" }
connect_timeout = 10                # seconds; 0 disables a timeout
first_byte_timeout = 120            # request sent → the upstream's first byte
idle_timeout = 60                   # between two chunks
total_timeout = 0                   # the whole upstream request
think_tags = true                   # `<think>` in content becomes reasoning
health_check_interval = 10          # 0: no active checks
health_path = "/models"             # relative to base_url
routing = "least_busy"              # with replicas: or "prefix_affinity", "round_robin"
routing_overload_factor = 1.5       # prefix_affinity leaves a replica this busy (x the mean)
routing_table_size = 10000          # prefixes remembered (LRU)
routing_load_reports = true         # poll llama-server's /slots, /metrics and vLLM's /metrics (load.py)
discover = false                    # list the upstream's models and serve each
prefix = ""                         # discovered ids become prefix + upstream id (default "<id>/")
discover_interval = 60
vision = false                      # capability overrides
reasoning = false
tool_use = true
context_length = 32768
```
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from sluicegate.engines.base import Capabilities, ConfigError
from sluicegate.engines.upstream.routing import POLICIES, Policy

# How the API key is sent: OpenAI's `Authorization: Bearer`, or Anthropic's `x-api-key`.
Auth = Literal["bearer", "x-api-key"]
ANTHROPIC_VERSION = "2023-06-01"
_TIMEOUTS = {"connect_timeout": 10.0, "first_byte_timeout": 120.0, "idle_timeout": 60.0, "total_timeout": 0.0}
KEYS = {
    "id",
    "engine",
    "base_url",
    "base_urls",
    "api_key",
    "api_key_env",
    "upstream_model",
    "headers",
    *_TIMEOUTS,
    "think_tags",
    "health_check_interval",
    "health_path",
    "routing",
    "routing_overload_factor",
    "routing_table_size",
    "routing_load_reports",
    "discover",
    "prefix",
    "discover_interval",
    "vision",
    "reasoning",
    "tool_use",
    "context_length",
}


@dataclass(slots=True)
class UpstreamConfig:
    model_id: str
    base_urls: list[str]
    upstream_model: str
    headers: dict[str, str] = field(default_factory=dict)  # api key included
    connect_timeout: float | None = 10.0  # None: no limit
    first_byte_timeout: float | None = 120.0
    idle_timeout: float | None = 60.0
    total_timeout: float | None = None
    think_tags: bool = True
    health_check_interval: float = 10.0  # 0: no active checks
    health_path: str = "/models"
    routing: Policy = "least_busy"  # which replica a request goes to (routing.py)
    routing_overload_factor: float = 1.5
    routing_table_size: int = 10000
    routing_load_reports: bool = True  # with replicas and health checks: the upstreams' own load
    discover: bool = False
    prefix: str = ""
    discover_interval: float = 60.0
    capabilities: Capabilities = field(default_factory=Capabilities)
    context_length: int | None = None

    def for_model(self, model_id: str, upstream_model: str) -> UpstreamConfig:
        """A discovered model's config: this one, for another upstream model."""
        return replace(self, model_id=model_id, upstream_model=upstream_model, discover=False)


def _url(where: str, value: Any) -> str:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise ConfigError(f"{where} must be an http(s) URL like 'http://host:8000/v1', got {value!r}")
    return value.rstrip("/")


def _number(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"{where} must be a non-negative number of seconds, got {value!r}")
    return float(value)


def _bool(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where} must be true or false, got {value!r}")
    return value


def parse_config(
    table: dict[str, Any], env: dict[str, str] | None = None, *, auth: Auth = "bearer"
) -> UpstreamConfig:
    env = dict(os.environ) if env is None else env
    discover = _bool("discover", table.get("discover", False))
    model_id = table.get("id", "")
    if not isinstance(model_id, str) or not (model_id or discover):
        raise ConfigError("every [[models]] table needs a string `id` (optional only with discover = true)")
    engine = table.get("engine", "openai")
    where = f"model {model_id!r}" if model_id else f"an `{engine}` model with discover = true"
    unknown = sorted(set(table) - KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {unknown}; known keys: {', '.join(sorted(KEYS))}")

    if ("base_url" in table) == ("base_urls" in table):
        raise ConfigError(f"{where}: set exactly one of `base_url` or `base_urls`")
    if "base_url" in table:
        base_urls = [_url(f"{where}: base_url", table["base_url"])]
    else:
        raw = table["base_urls"]
        if not isinstance(raw, list) or not raw:
            raise ConfigError(f"{where}: base_urls must be a non-empty list of URLs")
        base_urls = [_url(f"{where}: base_urls[{i}]", u) for i, u in enumerate(raw)]
        if len(set(base_urls)) != len(base_urls):
            raise ConfigError(f"{where}: base_urls lists the same URL twice")

    headers: dict[str, str] = {}
    raw_headers = table.get("headers", {})
    if not isinstance(raw_headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw_headers.items()
    ):
        raise ConfigError(f"{where}: headers must be a table of strings, e.g. headers = {{ X-Team = 'a' }}")
    if "api_key" in table and "api_key_env" in table:
        raise ConfigError(f"{where}: set `api_key` or `api_key_env`, not both")
    api_key = table.get("api_key")
    if "api_key_env" in table:
        name = table["api_key_env"]
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: api_key_env must name an environment variable")
        api_key = env.get(name)
        if not api_key:
            raise ConfigError(f"{where}: api_key_env names ${name}, which is not set")
    if api_key is not None:
        if not isinstance(api_key, str) or not api_key:
            raise ConfigError(f"{where}: api_key must be a non-empty string")
        if auth == "bearer":
            headers["Authorization"] = f"Bearer {api_key}"
        else:
            headers["x-api-key"] = api_key
    if auth == "x-api-key":
        headers["anthropic-version"] = ANTHROPIC_VERSION
    headers.update(raw_headers)

    upstream_model = table.get("upstream_model", model_id)
    if not isinstance(upstream_model, str) or not (upstream_model or discover):
        raise ConfigError(f"{where}: upstream_model must be a non-empty string")
    config = UpstreamConfig(
        model_id=model_id, base_urls=base_urls, upstream_model=upstream_model, headers=headers
    )
    for key, default in _TIMEOUTS.items():
        seconds = _number(f"{where}: {key}", table.get(key, default))
        setattr(config, key, seconds or None)
    config.think_tags = _bool(f"{where}: think_tags", table.get("think_tags", True))
    config.health_check_interval = _number(
        f"{where}: health_check_interval", table.get("health_check_interval", 10.0)
    )
    health_path = table.get("health_path", "/models")
    if not isinstance(health_path, str) or not health_path.startswith("/"):
        raise ConfigError(f"{where}: health_path must be a path starting with '/', relative to base_url")
    config.health_path = health_path
    routing = table.get("routing", "least_busy")
    if routing not in POLICIES:
        raise ConfigError(f"{where}: routing must be one of {', '.join(POLICIES)}, got {routing!r}")
    config.routing = routing
    factor = table.get("routing_overload_factor", 1.5)
    if isinstance(factor, bool) or not isinstance(factor, int | float) or factor < 1:
        raise ConfigError(f"{where}: routing_overload_factor must be a number >= 1, got {factor!r}")
    config.routing_overload_factor = float(factor)
    size = table.get("routing_table_size", 10000)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ConfigError(f"{where}: routing_table_size must be a positive integer, got {size!r}")
    config.routing_table_size = size
    reports = table.get("routing_load_reports", True)
    if not isinstance(reports, bool):
        raise ConfigError(f"{where}: routing_load_reports must be true or false, got {reports!r}")
    config.routing_load_reports = reports
    config.discover = discover
    prefix = table.get("prefix", f"{model_id}/" if discover and model_id else "")
    if not isinstance(prefix, str):
        raise ConfigError(f"{where}: prefix must be a string")
    if "prefix" in table and not discover:
        raise ConfigError(f"{where}: prefix only applies with discover = true")
    config.prefix = prefix
    config.discover_interval = _number(f"{where}: discover_interval", table.get("discover_interval", 60.0))
    caps = config.capabilities
    caps.vision = _bool(f"{where}: vision", table.get("vision", False))
    caps.reasoning = _bool(f"{where}: reasoning", table.get("reasoning", False))
    if caps.reasoning:  # LM Studio's `reasoning` values, passed on as `reasoning_effort`
        caps.reasoning_options = ["low", "medium", "high"]
    caps.tool_use = _bool(f"{where}: tool_use", table.get("tool_use", True))
    caps.logprobs = True
    if "context_length" in table:
        length = table["context_length"]
        if isinstance(length, bool) or not isinstance(length, int) or length <= 0:
            raise ConfigError(f"{where}: context_length must be a positive integer")
        config.context_length = length
    return config
