"""Settings: defaults, then a TOML file, then environment variables, then command-line flags.

```toml
[server]
host = "127.0.0.1"
port = 8321
api_key = "sk-local"            # or a list `api_keys = [...]`; none: no auth
heartbeat_seconds = 15
request_timeout_seconds = 600   # 0 disables
idle_timeout_seconds = 120      # 0 disables
max_body_bytes = 16777216
max_concurrent_requests = 512   # 429 above this (per worker)
workers = 1                     # server processes on the port; > 1 needs [store] backend = "redis"
stream_buffer_bytes = 262144    # per stream: frames waiting for a slow client before generation pauses
max_json_depth = 64             # request bodies nested deeper get a 400; 0: no limit
header_timeout_seconds = 10     # a request's line and headers must arrive within this; else closed
keep_alive_seconds = 5          # an idle keep-alive connection is closed after this
max_instances = 4               # instances of one model; 0: no cap
max_loaded_model_bytes = 17179869184  # GGUF bytes loaded at once, idle JIT loads evicted first;
                                # default: the machine's physical memory; 0: no cap
data_dir = "~/.local/share/sluicegate"
models_dir = "~/models"         # *.gguf under it are models, downloads go here; default: <data_dir>/models
slot_save_path = "~/slots"      # llama-server's slot save/restore files; default: <data_dir>/slots
jit_ttl_seconds = 3600          # a JIT-loaded model idle this long is unloaded; 0: never
jit_auto_evict = false          # true: a JIT load unloads the previous JIT-loaded model
reaper_interval_seconds = 5     # how often idle models are checked
log_format = "text"             # or "json": one object per line (--log-format)
log_prompts = false             # true: request bodies and answers in the access log (--log-prompts)
max_image_bytes = 16777216      # per image (local models with a projector); more: a 400
max_image_pixels = 32000000     # per image, width x height
max_images_per_request = 16
max_request_pixels = 100000000  # all of one request's images, decoded: more is a 400
allow_image_urls = false        # true: fetch http(s) image URLs (public hosts, or [tools] allowed_hosts)
image_fetch_timeout_seconds = 10
media_path = "~/pictures"       # file:// image URLs are read from under it (llama-server's --media-path); default: none
max_audio_bytes = 16777216      # per audio clip (local models whose projector hears); more: a 400
max_audio_seconds = 300         # per audio clip, by its header
max_audio_per_request = 16
cors_origins = ["http://localhost:5173"]  # browser apps allowed to call the server; "*": any
default_model = "my-model"      # serves requests that name no model or an unknown one
metrics = true                  # false: GET /metrics answers 501 (llama-server without --metrics)
slots = true                    # false: GET /slots answers 501 (llama-server's --no-slots)

[chat_completions]
reasoning_field = "reasoning_content"   # or "reasoning", or "both"
prefill_assistant = false               # true: a last assistant message is continued (llama-server's default)
verbose = false                         # true: every non-streamed answer gets `__verbose` (llama-server's --verbose)

[responses]
retention_days = 30                     # stored responses expire after this
reasoning_events = "openai"             # or "open_responses" (response.reasoning.delta/.done)
websocket_max_seconds = 3600            # a WebSocket connection ends after this (websocket_connection_limit_reached)
websocket_cached_responses = 8          # per WebSocket: recent responses kept for store:false continuation

[responses.hosted_tools]                # hosted tool type → the server-side provider serving it
web_search = "mcp/search"               # (others the client does not run are left out, with a warning)

[lmstudio]
events = "current"                      # or "v0": tool_call.result instead of success/failure

[tools]                                 # server-side tools (docs/tools.md)
mcp_config = "mcp.json"                 # Claude Desktop format; relative to this file's folder
call_timeout_seconds = 60               # per tool call; an mcp.json server's "timeout" overrides
max_rounds = 25                         # tool rounds per response
allow_request_servers = false           # MCP servers named by URL in a request
allowed_hosts = []                      # non-public hosts request servers may use anyway

[tools.plugins.files]                   # a plugin is enabled by its table
root = "shared"

[store]
backend = "sqlite"              # or "redis": state shared by several replicas
path = "~/.local/share/sluicegate/sluicegate.sqlite3"   # sqlite; default: <data_dir>/sluicegate.sqlite3
url = "redis://127.0.0.1:6379/0"                        # redis
retention_days = 30             # the same setting as [responses] retention_days

[tracing]                       # OpenTelemetry traces (docs/operations.md); off by default
exporter = "otlp"               # or "console", "none"; OTEL_TRACES_EXPORTER overrides
endpoint = "http://127.0.0.1:4318/v1/traces"  # OTLP/HTTP; default: OTEL_EXPORTER_OTLP_* or the exporter's
service_name = "sluicegate"     # OTEL_SERVICE_NAME overrides
sample_ratio = 1.0              # of requests traced (a client's sampled traceparent is followed)

[[models]]
id = "my-model"
engine = "scripted"
script = "script.yaml"          # relative to this file's folder
ttl = 600                       # optional: this model's idle TTL when JIT-loaded
aliases = ["gpt-*"]             # optional: other names (globs) requests may use for it
sampling = { temperature = 0.7 } # optional: defaults for what a request leaves unset
```
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sluicegate.core.allowlist import AllowList
from sluicegate.core.errors import ConfigError
from sluicegate.core.json_limits import DEFAULT_MAX_JSON_DEPTH

DEFAULT_PORT = 8321
ENV_PREFIX = "SLUICEGATE_"


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "sluicegate"


@dataclass(slots=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    api_keys: list[str] = field(default_factory=list)
    admin_key: str | None = None  # manages runtime keys (/admin/keys, `sluicegate keys`); turns auth on
    limits_on_store_failure: Literal["open", "closed"] = "open"  # runtime keys' counters unreachable
    prices: dict[str, dict[str, float]] = field(default_factory=dict)  # model glob → money per 1M tokens
    # `[teams.NAME]`: limits and a budget shared by every runtime key whose owner is NAME
    teams: dict[str, dict[str, Any]] = field(default_factory=dict)
    heartbeat_seconds: float = 15.0
    request_timeout_seconds: float = 600.0
    idle_timeout_seconds: float = 120.0
    max_body_bytes: int = 16 * 1024 * 1024
    max_concurrent_requests: int = 512  # per worker
    workers: int = 1  # server processes on the port; more than one needs the Redis store
    stream_buffer_bytes: int = (
        256 * 1024
    )  # per stream: bytes waiting for a slow client; past it, the engine waits
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    header_timeout_seconds: float = 10.0  # slow clients: request line and headers within this
    keep_alive_seconds: float = 5.0  # idle keep-alive connections are closed after this
    max_instances: int = 4  # instances of one model the models API may load; 0: no cap
    max_loaded_model_bytes: int | None = None  # GGUF bytes loaded at once; None: physical RAM, 0: no cap
    data_dir: Path = field(default_factory=default_data_dir)
    jit_ttl_seconds: float = 3600.0
    jit_auto_evict: bool = False
    reaper_interval_seconds: float = 5.0
    log_level: str = "info"
    log_format: Literal["text", "json"] = "text"
    log_prompts: bool = False  # request bodies and answers in the access log (off: no prompt text)
    max_image_bytes: int = 16 * 1024 * 1024  # per image, for engines that decode images themselves
    max_image_pixels: int = 32_000_000
    max_images_per_request: int = 16
    max_request_pixels: int = 100_000_000  # all of one request's images: caps the memory they take
    allow_image_urls: bool = False  # fetch http(s) image URLs, through the SSRF guard
    image_fetch_timeout_seconds: float = 10.0
    media_path: Path | None = None  # file:// image URLs are read from under it; None: refused
    max_audio_bytes: int = 16 * 1024 * 1024  # per audio clip, for engines that hear audio themselves
    max_audio_seconds: float = 300.0  # its spectrogram is computed while the request is checked
    max_audio_per_request: int = 16
    cors_origins: list[str] = field(default_factory=list)  # browser origins allowed; "*": any
    default_model: str | None = None  # serves requests naming no model or an unknown one
    metrics: bool = True  # GET /metrics served; false: a 501, as llama-server without --metrics
    slots: bool = True  # GET /slots served; false: a 501, as llama-server's --no-slots
    reasoning_field: str = "reasoning_content"
    prefill_assistant: bool = False  # a last assistant message is the start of the reply
    verbose: bool = False  # `__verbose` in every answer unless the request says `verbose: false`
    responses_retention_days: float = 30.0
    responses_reasoning_events: Literal["openai", "open_responses"] = "openai"
    responses_hosted_tools: dict[str, str] = field(default_factory=dict)  # hosted type → plugin id
    responses_websocket_max_seconds: float = 3600.0  # the spec's 60-minute connection limit
    responses_websocket_cached_responses: int = 8  # per connection, for store:false continuation
    store_path: Path | None = None  # None: <data_dir>/sluicegate.sqlite3
    store_backend: Literal["sqlite", "redis"] = "sqlite"
    store_url: str = "redis://127.0.0.1:6379/0"  # the redis backend's server
    models_dir: Path | None = None  # None: <data_dir>/models
    slot_save_path: Path | None = None  # llama-server's slot files; None: <data_dir>/slots
    lmstudio_events: Literal["current", "v0"] = "current"
    models: list[dict[str, Any]] = field(default_factory=list)
    tools_mcp_config: Path | None = None
    tools_call_timeout_seconds: float = 60.0
    tools_max_rounds: int = 25
    tools_allow_request_servers: bool = False
    tools_allowed_hosts: list[str] = field(default_factory=list)
    tools_plugins: dict[str, dict[str, Any]] = field(default_factory=dict)
    tracing_exporter: Literal["otlp", "console", "none"] = "none"
    tracing_endpoint: str | None = None
    tracing_service_name: str = "sluicegate"
    tracing_sample_ratio: float = 1.0
    base_dir: Path = field(default_factory=Path.cwd)  # where relative paths in the config start


_SERVER_KEYS: dict[str, type | tuple[type, ...]] = {
    "host": str,
    "port": int,
    "api_key": str,
    "api_keys": list,
    "admin_key": str,
    "limits_on_store_failure": str,
    "heartbeat_seconds": (int, float),
    "request_timeout_seconds": (int, float),
    "idle_timeout_seconds": (int, float),
    "max_body_bytes": int,
    "max_concurrent_requests": int,
    "workers": int,
    "stream_buffer_bytes": int,
    "max_json_depth": int,
    "header_timeout_seconds": (int, float),
    "keep_alive_seconds": (int, float),
    "max_instances": int,
    "max_loaded_model_bytes": int,
    "data_dir": str,
    "models_dir": str,
    "slot_save_path": str,
    "jit_ttl_seconds": (int, float),
    "jit_auto_evict": bool,
    "reaper_interval_seconds": (int, float),
    "log_level": str,
    "log_format": str,
    "log_prompts": bool,
    "max_image_bytes": int,
    "max_image_pixels": int,
    "max_images_per_request": int,
    "max_request_pixels": int,
    "allow_image_urls": bool,
    "image_fetch_timeout_seconds": (int, float),
    "media_path": str,
    "max_audio_bytes": int,
    "max_audio_seconds": (int, float),
    "max_audio_per_request": int,
    "cors_origins": list,
    "default_model": str,
    "metrics": bool,
    "slots": bool,
}
_CHAT_KEYS: dict[str, tuple[Any, ...]] = {
    "reasoning_field": ("reasoning_content", "reasoning", "both"),
    "prefill_assistant": (True, False),
    "verbose": (True, False),
}
# The keys each table accepts: the loader refuses any other, and the configuration reference
# (docs/gen_config.py) is checked against these, so neither can drift from the other.
RESPONSES_KEYS = (
    "retention_days",
    "reasoning_events",
    "hosted_tools",
    "websocket_max_seconds",
    "websocket_cached_responses",
)
LMSTUDIO_KEYS = ("events",)
STORE_KEYS = ("backend", "path", "url", "retention_days")
TOOLS_KEYS = (
    "mcp_config",
    "call_timeout_seconds",
    "max_rounds",
    "allow_request_servers",
    "allowed_hosts",
    "plugins",
)
TRACING_KEYS = ("exporter", "endpoint", "service_name", "sample_ratio")
_TOP_KEYS = {
    "server",
    "chat_completions",
    "responses",
    "lmstudio",
    "store",
    "models",
    "tools",
    "tracing",
    "prices",
    "teams",
}
TEAM_KEYS = ("rpm", "tpm", "concurrent", "budget")
TEAM_BUDGET_KEYS = ("tokens", "cost", "period")
PRICE_KEYS = ("input", "cached_input", "output")  # per million tokens, under a model id or glob


def table_keys() -> dict[str, tuple[str, ...]]:
    """Every key of every table the loader accepts (engines check their own `[[models]]` keys)."""
    return {
        "server": tuple(_SERVER_KEYS),
        "chat_completions": tuple(_CHAT_KEYS),
        "responses": RESPONSES_KEYS,
        "lmstudio": LMSTUDIO_KEYS,
        "store": STORE_KEYS,
        "tools": TOOLS_KEYS,
        "tracing": TRACING_KEYS,
    }


def _apply_prices(settings: Settings, table: Any, source: str) -> None:
    """`[prices]`: `"gpt-4o*" = { input = 2.5, cached_input = 1.25, output = 10 }` (per million
    tokens), for the usage and budgets of runtime keys (docs/teams.md)."""
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: [prices] must be a table")
    for model, entry in table.items():
        if not isinstance(entry, dict) or not set(entry) <= set(PRICE_KEYS):
            raise ConfigError(
                f"{source}: [prices].{model!r} takes {', '.join(PRICE_KEYS)} (per million tokens)"
            )
        if any(_wrong_type(v, (int, float)) or v < 0 for v in entry.values()):
            raise ConfigError(f"{source}: [prices].{model!r} must be numbers ≥ 0")
        settings.prices[model] = {k: float(v) for k, v in entry.items()}


def _apply_teams(settings: Settings, table: Any, source: str) -> None:
    """`[teams.NAME]`: `rpm`, `tpm`, `concurrent` and `budget = { tokens, cost, period }`, shared
    by every runtime key whose `owner` is NAME (docs/teams.md)."""
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: [teams] must be a table of teams")
    for name, entry in table.items():
        where = f"{source}: [teams.{name}]"
        if not isinstance(entry, dict) or not set(entry) <= set(TEAM_KEYS):
            raise ConfigError(f"{where} takes {', '.join(TEAM_KEYS)}")
        team: dict[str, Any] = {"rpm": None, "tpm": None, "concurrent": None, "budget": None}
        for key in ("rpm", "tpm", "concurrent"):
            if key in entry:
                if _wrong_type(entry[key], int) or entry[key] < 0:
                    raise ConfigError(f"{where}.{key} must be a whole number ≥ 0")
                team[key] = entry[key]
        budget = entry.get("budget")
        if budget is not None:
            if not isinstance(budget, dict) or not set(budget) <= set(TEAM_BUDGET_KEYS):
                raise ConfigError(f"{where}.budget takes {', '.join(TEAM_BUDGET_KEYS)}")
            tokens, cost = budget.get("tokens"), budget.get("cost")
            if tokens is not None and (_wrong_type(tokens, int) or tokens < 0):
                raise ConfigError(f"{where}.budget.tokens must be a whole number ≥ 0")
            if cost is not None and (_wrong_type(cost, (int, float)) or cost < 0):
                raise ConfigError(f"{where}.budget.cost must be a number ≥ 0")
            if budget.get("period", "month") not in ("day", "month"):
                raise ConfigError(f'{where}.budget.period must be "day" or "month"')
            team["budget"] = {
                "tokens": tokens,
                "cost": None if cost is None else float(cost),
                "period": budget.get("period", "month"),
            }
        settings.teams[name] = team


def _wrong_type(value: Any, expected: type | tuple[type, ...]) -> bool:
    """TOML booleans are ints to isinstance; only a bool key takes one."""
    return isinstance(value, bool) != (expected is bool) or not isinstance(value, expected)


def _apply_server(settings: Settings, table: dict[str, Any], source: str) -> None:
    for key, value in table.items():
        expected = _SERVER_KEYS.get(key)
        if expected is None:
            raise ConfigError(f"{source}: unknown key [server].{key}; known keys: {', '.join(_SERVER_KEYS)}")
        if _wrong_type(value, expected):
            raise ConfigError(f"{source}: [server].{key} has the wrong type ({type(value).__name__})")
        if key == "api_key":
            settings.api_keys = [value]
        elif key == "api_keys":
            if not all(isinstance(k, str) and k for k in value):
                raise ConfigError(f"{source}: [server].api_keys must be a list of non-empty strings")
            settings.api_keys = list(value)
        elif key == "admin_key":
            if not value:
                raise ConfigError(f"{source}: [server].admin_key must not be empty")
            settings.admin_key = value
        elif key == "data_dir":  # relative to the config file, like every other path in it
            data_dir = Path(value).expanduser()
            settings.data_dir = data_dir if data_dir.is_absolute() else settings.base_dir / data_dir
        elif key == "cors_origins":
            if not all(isinstance(o, str) and (o in ("*", "localhost") or "://" in o) for o in value):
                raise ConfigError(
                    f"{source}: [server].cors_origins must list origins like "
                    '"http://localhost:5173", "localhost" (any port on this machine) or "*"'
                )
            settings.cors_origins = list(value)
        elif key == "default_model" and not value:
            raise ConfigError(f"{source}: [server].default_model must be a model id")
        elif key in ("models_dir", "slot_save_path", "media_path"):
            path = Path(value).expanduser()
            setattr(settings, key, path if path.is_absolute() else settings.base_dir / path)
        elif key == "limits_on_store_failure" and value not in ("open", "closed"):
            raise ConfigError(f'{source}: [server].limits_on_store_failure must be "open" or "closed"')
        elif key == "log_format" and value not in ("text", "json"):
            raise ConfigError(f'{source}: [server].log_format must be "text" or "json"')
        elif key == "workers" and value < 1:
            raise ConfigError(f"{source}: [server].workers must be at least 1")
        elif key == "reaper_interval_seconds" and value <= 0:  # a zero interval would spin
            raise ConfigError(f"{source}: [server].reaper_interval_seconds must be positive")
        else:
            if isinstance(value, int | float) and value < 0:
                raise ConfigError(f"{source}: [server].{key} must not be negative")
            setattr(settings, key, value)


def load_settings(
    config_path: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None
) -> Settings:
    env = dict(os.environ) if env is None else env
    settings = Settings()
    own_models_dir = False
    path_text = config_path or env.get(ENV_PREFIX + "CONFIG")
    if path_text:
        path = Path(path_text).expanduser().resolve()
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read config {path}: {exc.strerror}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
        settings.base_dir = path.parent
        unknown = set(data) - _TOP_KEYS
        if unknown:
            raise ConfigError(f"{path}: unknown tables {sorted(unknown)}; known: {sorted(_TOP_KEYS)}")
        server = data.get("server", {})
        if not isinstance(server, dict):
            raise ConfigError(f"{path}: [server] must be a table")
        _apply_server(settings, server, str(path))
        own_models_dir = "models_dir" in server
        chat = data.get("chat_completions", {})
        if not isinstance(chat, dict):
            raise ConfigError(f"{path}: [chat_completions] must be a table")
        for key, value in chat.items():
            if key not in _CHAT_KEYS or not any(
                value == v and type(value) is type(v) for v in _CHAT_KEYS[key]
            ):
                raise ConfigError(
                    f"{path}: [chat_completions].{key} must be one of {_CHAT_KEYS.get(key, ())}"
                )
            setattr(settings, key, value)
        _apply_responses(settings, data.get("responses", {}), str(path))
        _apply_store(settings, data.get("store", {}), str(path))
        _apply_tools(settings, data.get("tools", {}), str(path))
        _apply_tracing(settings, data.get("tracing", {}), str(path))
        _apply_prices(settings, data.get("prices", {}), str(path))
        _apply_teams(settings, data.get("teams", {}), str(path))
        lmstudio = data.get("lmstudio", {})
        for key, value in lmstudio.items() if isinstance(lmstudio, dict) else [("", None)]:
            if key not in LMSTUDIO_KEYS or value not in ("current", "v0"):
                raise ConfigError(f"{path}: [lmstudio] takes only events = 'current' | 'v0'")
            settings.lmstudio_events = value
        models = data.get("models", [])
        if not isinstance(models, list) or not all(isinstance(m, dict) for m in models):
            raise ConfigError(f"{path}: models must be declared as [[models]] tables")
        settings.models = models
    own_models_dir |= _apply_env(settings, env)
    if not own_models_dir:  # follow data_dir wherever the file or the environment put it
        settings.models_dir = settings.data_dir / "models"
    return settings


def _apply_responses(settings: Settings, table: Any, source: str) -> None:
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: [responses] must be a table")
    for key, value in table.items():
        if key not in RESPONSES_KEYS:
            raise ConfigError(
                f"{source}: unknown key [responses].{key}; known keys: {', '.join(RESPONSES_KEYS)}"
            )
        if key == "retention_days":
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigError(f"{source}: [responses].retention_days must be a positive number")
            settings.responses_retention_days = float(value)
        elif key == "reasoning_events":
            if value not in ("openai", "open_responses"):
                raise ConfigError(
                    f"{source}: [responses].reasoning_events must be 'openai' or 'open_responses'"
                )
            settings.responses_reasoning_events = value
        elif key == "hosted_tools":
            if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and v for k, v in value.items()
            ):
                raise ConfigError(
                    f"{source}: [responses.hosted_tools] maps tool types to provider ids (strings)"
                )
            settings.responses_hosted_tools = dict(value)
        elif key == "websocket_max_seconds":
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigError(f"{source}: [responses].websocket_max_seconds must be a positive number")
            settings.responses_websocket_max_seconds = float(value)
        elif key == "websocket_cached_responses":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(
                    f"{source}: [responses].websocket_cached_responses must be a positive integer"
                )
            settings.responses_websocket_cached_responses = value
        else:
            raise ConfigError(f"{source}: unknown key [responses].{key}")


_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def _apply_store(settings: Settings, table: Any, source: str) -> None:
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: [store] must be a table")
    for key, value in table.items():
        if key not in STORE_KEYS:
            raise ConfigError(f"{source}: unknown key [store].{key}; known keys: {', '.join(STORE_KEYS)}")
        if key == "path" and isinstance(value, str) and value:
            path = Path(value).expanduser()
            settings.store_path = path if path.is_absolute() else settings.base_dir / path
        elif key == "backend" and value in ("sqlite", "redis"):
            settings.store_backend = value
        elif key == "url" and isinstance(value, str) and value.startswith(_REDIS_SCHEMES):
            settings.store_url = value
        elif key == "retention_days":  # the same setting as [responses].retention_days
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigError(f"{source}: [store].retention_days must be a positive number")
            settings.responses_retention_days = float(value)
        else:
            raise ConfigError(f"{source}: [store].{key} is unknown or has a bad value ({value!r})")


def _apply_tools(settings: Settings, table: Any, source: str) -> None:
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: [tools] must be a table")
    for key, value in table.items():
        where = f"{source}: [tools].{key}"
        if key not in TOOLS_KEYS:
            raise ConfigError(f"{where} is unknown; known keys: {', '.join(TOOLS_KEYS)}")
        if key == "mcp_config":
            if not isinstance(value, str) or not value:
                raise ConfigError(f"{where} must be the path of an mcp.json file")
            settings.tools_mcp_config = settings.base_dir / Path(value).expanduser()
        elif key == "call_timeout_seconds":
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigError(f"{where} must be a positive number")
            settings.tools_call_timeout_seconds = float(value)
        elif key == "max_rounds":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{where} must be a positive integer")
            settings.tools_max_rounds = value
        elif key == "allow_request_servers":
            if not isinstance(value, bool):
                raise ConfigError(f"{where} must be true or false")
            settings.tools_allow_request_servers = value
        elif key == "allowed_hosts":
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                raise ConfigError(f"{where} must be a list of host names, addresses or networks")
            try:
                AllowList.parse(value)
            except ValueError as exc:
                raise ConfigError(f"{where}: {exc}") from None
            settings.tools_allowed_hosts = list(value)
        elif key == "plugins":
            if not isinstance(value, dict) or not all(isinstance(t, dict) for t in value.values()):
                raise ConfigError(f"{where} must hold one [tools.plugins.<id>] table per plugin")
            settings.tools_plugins = {name: dict(t) for name, t in value.items()}
        else:
            raise ConfigError(f"{where} is unknown; known keys: {', '.join(TOOLS_KEYS)}")


def _apply_tracing(settings: Settings, table: Any, source: str) -> None:
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: [tracing] must be a table")
    for key, value in table.items():
        where = f"{source}: [tracing].{key}"
        if key not in TRACING_KEYS:
            raise ConfigError(f"{where} is unknown; known keys: {', '.join(TRACING_KEYS)}")
        if key == "exporter":
            if value not in ("otlp", "console", "none"):
                raise ConfigError(f'{where} must be "otlp", "console" or "none"')
            settings.tracing_exporter = value
        elif key == "endpoint":
            if not isinstance(value, str) or not value.startswith(("http://", "https://")):
                raise ConfigError(f"{where} must be an http(s) URL (the OTLP/HTTP traces endpoint)")
            settings.tracing_endpoint = value
        elif key == "service_name":
            if not isinstance(value, str) or not value:
                raise ConfigError(f"{where} must be a non-empty string")
            settings.tracing_service_name = value
        elif key == "sample_ratio":
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise ConfigError(f"{where} must be a number from 0 to 1")
            settings.tracing_sample_ratio = float(value)
        else:
            raise ConfigError(f"{where} is unknown; known keys: {', '.join(TRACING_KEYS)}")


def _apply_otel_env(settings: Settings, env: dict[str, str]) -> None:
    """The standard OpenTelemetry variables: `OTEL_SDK_DISABLED=true` turns tracing off,
    `OTEL_TRACES_EXPORTER` (otlp, console, none) picks the exporter, `OTEL_SERVICE_NAME` the name."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        settings.tracing_exporter = "none"
        return
    if exporter := env.get("OTEL_TRACES_EXPORTER", "").split(",")[0].strip().lower():
        if exporter not in ("otlp", "console", "none"):
            raise ConfigError(
                f"OTEL_TRACES_EXPORTER={exporter!r}: Sluicegate exports to otlp or console (or none)"
            )
        settings.tracing_exporter = exporter  # type: ignore[assignment]
    if name := env.get("OTEL_SERVICE_NAME"):
        settings.tracing_service_name = name


def _apply_env(settings: Settings, env: dict[str, str]) -> bool:
    """Environment overrides; says whether it set the models folder."""
    _apply_otel_env(settings, env)
    if host := env.get(ENV_PREFIX + "HOST"):
        settings.host = host
    if port := env.get(ENV_PREFIX + "PORT"):
        if not (port.isascii() and port.isdigit()):
            raise ConfigError(f"{ENV_PREFIX}PORT must be a number, got {port!r}")
        settings.port = int(port)
    if key := env.get(ENV_PREFIX + "API_KEY"):
        settings.api_keys = [key]
    if admin := env.get(ENV_PREFIX + "ADMIN_KEY"):
        settings.admin_key = admin
    if data_dir := env.get(ENV_PREFIX + "DATA_DIR"):
        settings.data_dir = Path(data_dir).expanduser()
    if models_dir := env.get(ENV_PREFIX + "MODELS_DIR"):
        settings.models_dir = Path(models_dir).expanduser().resolve()
        return True
    return False


def slot_save_dir(settings: Settings) -> Path:
    """Where llama-server's `POST /slots/{id}?action=save` writes and `restore` reads."""
    return settings.slot_save_path or settings.data_dir / "slots"


def models_dir(settings: Settings) -> Path:
    """Where GGUF files are found and downloads go (a Settings built in code may leave it unset)."""
    return settings.models_dir or settings.data_dir / "models"


def store_path(settings: Settings) -> Path:
    return settings.store_path or settings.data_dir / "sluicegate.sqlite3"
