"""The configuration reference, rendered from the code's own key lists (a mkdocs hook).

`docs/configuration.md` holds markers like `<!-- config-keys: server -->`; this hook replaces
each with a table of every key the loader accepts for that table, in the code's order. The keys
come from `sluicegate.config.table_keys()` and the engines' own key sets, the defaults from
`Settings` where the code has a plain one, the meanings from `MEANINGS` below. A key the code
accepts that has no meaning here (or a meaning for a key the code no longer accepts) fails
`mkdocs build` and `tests/unit/test_config_reference.py`: the reference cannot drift.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

# (default shown, meaning); a default of None is taken from `Settings`.
Entry = tuple[str | None, str]

MEANINGS: dict[str, dict[str, Entry]] = {
    "server": {
        "host": (
            None,
            'interface to listen on; several comma-separated (`"127.0.0.1,::1"`, as llama-server\'s '
            "`--host`) with `workers = 1`",
        ),
        "port": (None, "port"),
        "api_key": (
            "none",
            "one key. When set, every path except `/health` and the web pages (`/`, "
            "`/playground/*`, `/overview`, `/models`) needs `Authorization: Bearer KEY` (or `x-api-key: KEY`), unknown "
            "paths and wrong methods included: without a key they answer 401, never 404 or 405. "
            "Keys are compared in constant time. With no key, there is no auth.",
        ),
        "api_keys": (
            "none",
            "a list of keys, each as `api_key`; stored state is scoped to the key that made it",
        ),
        "admin_key": (
            "none",
            "the key of the admin API (`/admin/keys`), which issues, changes and revokes API keys at "
            "runtime ([Teams](teams.md)); when set, every API path needs a key, as with `api_key`. "
            "Also `SLUICEGATE_ADMIN_KEY`",
        ),
        "limits_on_store_failure": (
            None,
            "what a runtime key's limits do when their counters (Redis) cannot be reached: `open` "
            "lets requests through uncounted, `closed` answers 503",
        ),
        "heartbeat_seconds": (
            None,
            "send an SSE `: heartbeat` comment after this long with nothing sent; `0` turns heartbeats off",
        ),
        "request_timeout_seconds": (
            None,
            "deadline for the whole request: queueing, loading, generating and tool rounds; `0` disables it",
        ),
        "idle_timeout_seconds": (
            None,
            "the longest the engine (or a tool call) may go without producing any event; `0` disables it",
        ),
        "max_body_bytes": (None, "larger request bodies get a 413"),
        "max_concurrent_requests": (
            None,
            "requests in flight across the server (per worker); above this, 429",
        ),
        "workers": (
            None,
            "server processes sharing the port (`--workers N`). More than one needs "
            '`[store] backend = "redis"` and serves upstream and scripted models only; see '
            "[Operations](operations.md#workers)",
        ),
        "stream_buffer_bytes": (
            None,
            "per stream: frames waiting for a slow client. When it fills, the server stops pulling "
            "from the model (llama.cpp pauses between tokens, an upstream stops being read)",
        ),
        "max_json_depth": (
            None,
            "a request body whose arrays and objects nest deeper (the body itself is level 1) gets a "
            "400; `0` turns the check off",
        ),
        "max_instances": (
            None,
            "instances of one model that `POST /api/v1/models/load` (and `sluicegate models load`) "
            "may load; one more is a 400. Instances a model's own `parallel` asks for always load. "
            "`0`: no cap",
        ),
        "max_loaded_model_bytes": (
            "the machine's physical memory",
            "the GGUF bytes of every loaded (or loading) instance together. A load past it first "
            "unloads idle just-in-time loads, least recently used first; if that cannot make room, "
            "it is refused (503, `max_loaded_model_bytes_reached`). `0`: no cap",
        ),
        "header_timeout_seconds": (
            None,
            "a connection must send a request's line and headers within this, counted from when it "
            "opened or the request's first byte; one that sends nothing, or dribbles its headers, is "
            "closed. `0` turns it off",
        ),
        "keep_alive_seconds": (None, "an idle keep-alive connection (between requests) is closed after this"),
        "max_image_bytes": (
            None,
            "one image (a local model with a projector reads it): more is a 400 `image_too_large`",
        ),
        "max_image_pixels": (
            None,
            "one image's width x height, read from its header before it is decoded: more is a 400 `image_too_large`",
        ),
        "max_images_per_request": (
            None,
            "images in one request, the conversation's earlier turns included: more is a 400 `too_many_images`",
        ),
        "max_request_pixels": (
            None,
            "all of one request's images together, width x height each, read from their headers before "
            "they are decoded: more is a 400 `image_too_large` (3 bytes a pixel decoded, so this caps "
            "the memory one request's images take)",
        ),
        "allow_image_urls": (
            None,
            "`true`: http(s) image URLs are fetched for local vision models, through the SSRF guard "
            "(public addresses, or `[tools] allowed_hosts`); off, a URL is a 400 `image_url_not_allowed` "
            "(data URLs and base64 always work)",
        ),
        "image_fetch_timeout_seconds": (
            None,
            "with `allow_image_urls`: the longest one image's fetch may take",
        ),
        "media_path": (
            "none",
            "llama-server's `--media-path`: a folder `file://` image URLs are read from, the URL's "
            "path taken under it (`file://pics/cat.png`); `..` and links out of it are refused. "
            "Unset, a `file://` URL is a 400 `image_url_not_allowed`",
        ),
        "max_audio_bytes": (
            None,
            "one audio clip (Chat `input_audio`, a local model whose projector has an audio encoder "
            "hears it), and one upload to `/v1/audio/transcriptions`: more is a 400 `audio_too_large`",
        ),
        "max_audio_seconds": (
            None,
            "how long one audio clip may play, read from its header before it is decoded: longer is a "
            "400 `audio_too_long`; an upload to `/v1/audio/transcriptions` is held to it as it is "
            "decoded (what it decodes to, not what its header says)",
        ),
        "max_audio_per_request": (
            None,
            "audio clips in one request, the conversation's earlier turns included: more is a 400 "
            "`too_many_audio_clips`",
        ),
        "cors_origins": (
            "none",
            'origins (`"http://localhost:5173"`) whose pages may call the server from a browser; '
            '`"*"`: any; `"localhost"`: a page on this machine, any scheme and port (a loopback host: '
            "`localhost`, `127.0.0.1`, `[::1]`; llama-server's `--cors-origins localhost`). Preflights "
            "(`OPTIONS`) are answered before the API-key check (browsers send "
            "no key on them); every answer to an allowed origin, streams and errors included, carries "
            "`Access-Control-Allow-Origin`. Other origins get no CORS headers, so the browser refuses them",
        ),
        "default_model": (
            "none",
            "the model that serves a request naming no model, `model: null`, or a name the server "
            "does not have (after the models' `aliases`), in every dialect and in embeddings, rerank "
            "and `count_tokens`: what clients written for llama-server or LM Studio expect. Without "
            "it, a missing model is a 400 and an unknown one a 404",
        ),
        "metrics": (
            "`true`",
            "`false`: `GET /metrics` answers 501 in llama-server's error shape, as llama-server "
            "started without `--metrics` does",
        ),
        "slots": (
            "`true`",
            "`false`: `GET /slots` answers 501, as llama-server's `--no-slots` (slot save, restore "
            "and erase stay, as there)",
        ),
        "data_dir": (
            "`$XDG_DATA_HOME/sluicegate` or `~/.local/share/sluicegate`",
            "holds the SQLite store, the sealing key and, by default, the models folder",
        ),
        "models_dir": ("`<data_dir>/models`", "every `*.gguf` under it is a model; downloads go here"),
        "slot_save_path": (
            "`<data_dir>/slots`",
            "llama-server's `--slot-save-path`: the folder `POST /slots/{id}?action=save` writes a "
            "slot's KV cache to and `restore` reads from ([llama-server's API](llama-server.md))",
        ),
        "jit_ttl_seconds": (
            None,
            "a model loaded just in time is unloaded after this long idle; `0`: never",
        ),
        "jit_auto_evict": (
            None,
            "`true`: loading a model just in time first unloads the previous just-in-time loads",
        ),
        "reaper_interval_seconds": (None, "how often idle models are checked (> 0)"),
        "log_level": (None, "`debug`, `info`, `warning` or `error`"),
        "log_format": (
            None,
            "`text`: `time LEVEL logger: message` lines; `json`: one JSON object per line "
            "([Operations](operations.md#logs))",
        ),
        "log_prompts": (
            None,
            "`true`: the access line also carries the request body and the answer's text (first "
            "4096 characters each). Off, no prompt or answer text is ever logged",
        ),
    },
    "chat_completions": {
        "reasoning_field": (
            None,
            'the delta (and message) field that carries reasoning: `"reasoning_content"` '
            '(llama-server, DeepSeek; read by LiteLLM and Open WebUI), `"reasoning"` (OpenRouter, '
            'vLLM, Ollama) or `"both"`',
        ),
        "prefill_assistant": (
            None,
            "`true`: a request whose last message is the assistant's (no tool calls) continues it, "
            "as llama-server does unless started with `--no-prefill-assistant`; `false` (OpenAI's "
            "and vLLM's way): the model answers after it, and `continue_final_message` asks for "
            "the continuation",
        ),
        "verbose": (
            None,
            "`true`: every non-streamed answer carries llama-server's `__verbose` (the prompt the "
            "chat template rendered, the content, token counts and `stop_type`), as llama-server "
            "started with `--verbose` answers; a request's own `verbose` overrides it either way",
        ),
    },
    "responses": {
        "retention_days": (
            None,
            "a positive number: stored responses (and LM Studio chats) expire after this many days; "
            "expired records are purged hourly",
        ),
        "reasoning_events": (
            None,
            '`"openai"`: `response.reasoning_text.delta` / `.done` (the `openai` SDK, vLLM); '
            '`"open_responses"`: `response.reasoning.delta` / `.done` (the Open Responses schema)',
        ),
        "hosted_tools": (
            "`{}`",
            "a table mapping hosted tool types to the server-side provider serving them, e.g. "
            '`[responses.hosted_tools]` `web_search = "mcp/search"`; others are left out, named in '
            "`X-Sluicegate-Ignored-Tools` ([Responses for agents](responses-agents.md))",
        ),
        "websocket_max_seconds": (
            None,
            "a WebSocket connection ends after this long: a turn in flight finishes, then "
            "`websocket_connection_limit_reached` is sent and the socket closed",
        ),
        "websocket_cached_responses": (
            None,
            "how many of its most recent responses a WebSocket connection keeps in memory for "
            "`store: false` continuation",
        ),
    },
    "lmstudio": {
        "events": (
            None,
            'the tool-call events of `/api/v1/chat`: `"current"` (`tool_call.success` / '
            '`.failure`) or `"v0"` (`tool_call.result`); a request may choose its own',
        ),
    },
    "store": {
        "backend": (
            None,
            '`"sqlite"`: one file, one server process; `"redis"`: state shared by replicas',
        ),
        "path": ("`<data_dir>/sluicegate.sqlite3`", "sqlite: the file"),
        "url": (None, "redis: the server (`redis://`, `rediss://` or `unix://`)"),
        "retention_days": ("`30`", "the same setting as `[responses] retention_days`"),
    },
    "tools": {
        "mcp_config": ("none", "an `mcp.json` file of MCP servers (Claude Desktop format)"),
        "call_timeout_seconds": (
            None,
            "per tool call; an `mcp.json` server's `timeout` overrides it. Keep it below "
            "`idle_timeout_seconds`",
        ),
        "max_rounds": (None, "engine rounds in one response"),
        "allow_request_servers": (
            None,
            "allow MCP servers named by URL in a request (Responses `mcp` tools, LM Studio `ephemeral_mcp`)",
        ),
        "allowed_hosts": (
            "`[]`",
            "loopback, private or link-local hosts that request servers may use anyway: names, "
            'addresses or networks, each optionally with a port (`"10.0.0.0/8"`, `"127.0.0.1:9000"`)',
        ),
        "plugins": (
            "none",
            "`[tools.plugins.<id>]`: a table enables the plugin `<id>`; its keys are the plugin's "
            "settings (`enabled = false` turns it off)",
        ),
    },
    "tracing": {
        "exporter": (None, '`"otlp"` (needs `pip install \'sluicegate[otlp]\'`), `"console"` or `"none"`'),
        "endpoint": (
            "the exporter's own",
            "the OTLP/HTTP traces URL; without it `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / "
            "`OTEL_EXPORTER_OTLP_ENDPOINT` apply",
        ),
        "service_name": (None, "the `service.name` resource attribute"),
        "sample_ratio": (
            None,
            "the share of new traces recorded (0 to 1); a request whose `traceparent` says sampled is always followed",
        ),
    },
    "models": {
        "id": ("required", "what clients send as `model` (optional with `discover = true`)"),
        "engine": ("required", "an engine of the `sluicegate.engines` entry points"),
        "max_concurrency": (
            "`64`; `1` for `llamacpp`; `0` for `openai`",
            "generations run at once for this model (per instance); `0`: no cap",
        ),
        "max_queue": (
            "`256`",
            "requests allowed to wait for a slot; once full, new requests get 503 at once",
        ),
        "ttl": (
            "`[server] jit_ttl_seconds`",
            "idle seconds before a just-in-time load of this model is unloaded; `0`: never",
        ),
        "aliases": (
            "none",
            'other names requests may use for this model, glob patterns allowed (`["gpt-*", '
            '"text-embedding-3-small"]`): exact names are tried before patterns, patterns in the '
            "order the file declares them. A served id always means itself. `GET /v1/models` lists "
            "a model's id and exact aliases under `aliases`, as llama-server lists its `--alias` names",
        ),
        "tags": (
            "none",
            'labels shown with the model in `GET /v1/models` (`["chat", "small"]`), as '
            "llama-server's `--tags`; informational, never used for routing",
        ),
        "sampling": (
            "none",
            "default sampling for requests that leave it unset, by the request fields' names and "
            "limits: `{ temperature = 0.7, max_tokens = 512, top_k = 20 }` (also `top_p`, `min_p`, "
            "`typical_p`, `repeat_penalty`, `repeat_last_n`, `presence_penalty`, "
            "`frequency_penalty`, `seed`, and llama.cpp's DRY, XTC, `top_n_sigma` and mirostat "
            "fields): llama-server's `--temp`/`--n-predict`, Ollama's Modelfile `PARAMETER`s. A "
            "request's own value wins",
        ),
    },
    "llamacpp": {
        "path": ("required", "the GGUF file"),
        "context_length": (
            "the model's trained context, capped by `kv_cache_budget_mib`",
            "context to load with",
        ),
        "kv_cache_budget_mib": (
            "4096, or a quarter of the RAM if less",
            "memory the default context's KV cache may take",
        ),
        "context_overflow": (
            "`error`",
            "a prompt longer than the context: `error` (400 `context_length_exceeded`), "
            "`rolling_window` or `truncate_middle` (drop old turns)",
        ),
        "embedding": ("when the GGUF states a pooling type", "serve it as an embedding model"),
        "repack": ("`false`", "llama.cpp's CPU repacking of Q4_0/Q8_0 weights"),
        "n_gpu_layers": ("`0`", "layers on the GPU; `-1`: all"),
        "threads": ("half the cores to decode, all for prompts", "CPU threads"),
        "batch_size": ("`512`", "prompt tokens per decode call (one progress event each)"),
        "flash_attention": ("llama.cpp decides", "`true` or `false`"),
        "tool_call_format": (
            "from the chat template",
            "how tool calls are written: see [Parsing](parsing.md)",
        ),
        "reasoning": ("from the chat template", "`think` or `none`"),
        "thinking": (
            '`"auto"`',
            'the template\'s thinking switch (`enable_thinking`) for requests that set no reasoning effort: `"on"`, '
            '`"off"`, or `"auto"` (on for a model that reasons, as llama.cpp passes it); llama-server\'s '
            "`--reasoning`. A request's `reasoning_effort` (or `think`) wins",
        ),
        "chat_template": (
            "the GGUF's",
            "a Jinja file, the template text, or the name of one of llama.cpp's built-in templates "
            "(`chatml`, `llama3`, `gemma`, `phi3`, `mistral-v7`, `command-r`, `granite`), as "
            "llama-server's `--chat-template NAME`",
        ),
        "parallel": (
            "`1`; with `batching`, from the KV budget (at most 4)",
            "without `batching`: instances; with it: sequences of one context",
        ),
        "batching": ("`true`", "continuous batching: `parallel` sequences decoded in one step"),
        "stream_interval_ms": (
            "`30`",
            "with `batching`: a stream's tokens reach its client at most this often (with several streams and steps longer than this, every second step); `0`: every token",
        ),
        "seed": ("random", "the seed when a request gives none"),
        "mmproj": (
            "an `mmproj*.gguf` beside the GGUF",
            "the vision projector: the model reads images through libmtmd and is listed with `vision: true`",
        ),
        "rerank": ("when the GGUF states rank pooling", "serve it as a reranker (`POST /v1/rerank`)"),
        "lora": (
            "none",
            'LoRA adapter GGUFs loaded beside the model, llama-server\'s `--lora`: `["a.gguf", ...]` or '
            '`[{path = "a.gguf", scale = 0.5}, ...]` (scale 1 unless given); adapter `id`s follow the '
            "list. `/lora-adapters` and a request's `lora` change the scales "
            "([llama-server's API](llama-server.md#lora-adapters))",
        ),
        "speculative": (
            "off",
            '`"ngram"` (drafts from n-gram lookup in the prompt and output) or `"draft"` (with '
            "`draft_model`): speculative decoding, with batching; see [the llamacpp engine](engines-llamacpp.md)",
        ),
        "draft_model": (
            "none",
            'a draft GGUF with the target\'s vocabulary (implies `speculative = "draft"`)',
        ),
        "draft_max": ("`16`", "tokens drafted per step at most"),
        "draft_min": ("`0`", "a shorter draft is not tried"),
        "draft_p_min": ("`0.75`", "draft model: the draft stops where its top token is less likely"),
        "draft_adaptive": (
            "`true`",
            "draft model: back off where its drafts miss (`false`: draft `draft_max` tokens at every step, "
            "as llama-server does)",
        ),
        "ngram_size": ("`12`", "`ngram`: the tokens a match needs"),
        "context_shift": (
            "`false`",
            "llama-server's `--context-shift`: a sequence whose context fills while it writes drops half of "
            "it and goes on, up to the request's `max_tokens` ([the llamacpp engine](engines-llamacpp.md))",
        ),
    },
    "openai": {
        "base_url": ("one of the two is required", "the upstream's OpenAI base URL (`http://host:8000/v1`)"),
        "base_urls": ("", "a list of replicas"),
        "api_key": ("none", "sent as `Authorization: Bearer` (`anthropic`: `x-api-key`)"),
        "api_key_env": ("none", "the name of an environment variable holding the key"),
        "upstream_model": ("the `id`", "the model name the upstream knows"),
        "headers": ("none", "extra request headers"),
        "connect_timeout": ("`10`", "seconds; `0` disables it"),
        "first_byte_timeout": ("`120`", "seconds until the upstream answers; `0` disables it"),
        "idle_timeout": ("`60`", "seconds between upstream reads; `0` disables it"),
        "total_timeout": ("`0`", "seconds for the whole upstream request; `0` disables it"),
        "think_tags": ("`true`", "`<think>…</think>` left in `content` becomes reasoning"),
        "health_check_interval": ("`10`", "seconds between active health checks of each replica; `0`: none"),
        "health_path": ('`"/models"`', "the health check's path, relative to the base URL"),
        "routing": (
            '`"least_busy"`',
            "which replica a request goes to: `least_busy` (fewest requests in flight), "
            "`prefix_affinity` (where its prompt prefix was served last, for the upstream's prompt "
            "cache) or `round_robin`; see [Teams](teams.md#routing)",
        ),
        "routing_overload_factor": (
            "`1.5`",
            "`prefix_affinity` passes a replica over when its requests in flight reach this times "
            "the mean (and the least busy one's plus two)",
        ),
        "routing_table_size": ("`10000`", "prompt prefixes `prefix_affinity` remembers per model (LRU)"),
        "routing_load_reports": (
            "`true`",
            "with replicas and health checks: poll llama-server's `/slots` and `/metrics` and vLLM's "
            "`/metrics` and route by the load they report ([teams](teams.md#routing))",
        ),
        "discover": ("`false`", "serve every model the upstream lists on `/v1/models`"),
        "prefix": ('`"<id>/"`', "discovered models are served as `prefix + their id`"),
        "discover_interval": ("`60`", "seconds between discovery refreshes"),
        "vision": ("`false`", "the upstream model takes images"),
        "reasoning": ("`false`", "the upstream model reasons (for the listings)"),
        "tool_use": ("`true`", "the upstream model calls tools (for the listings)"),
        "context_length": ("none", "the upstream model's context (for the listings and checks)"),
    },
    "whisper": {
        "path": (
            "one of the two",
            "a folder holding a Whisper model in CTranslate2 format (`model.bin`, `config.json`, ...)",
        ),
        "packages": (
            "one of the two",
            "Python packages whose `data/` folders hold the model; files split as `NAME.part1`, `NAME.part2`, ... "
            "are joined once into `$SLUICEGATE_CACHE_DIR` (default `~/.cache/sluicegate`)",
        ),
        "compute_type": ('`"int8"`', "CTranslate2's compute type (`int8`, `int8_float32`, `float32`, ...)"),
        "threads": ("`0`", "CPU threads for CTranslate2; `0`: its own default"),
        "beam_size": ("`5`", "beam search width; `1` decodes greedily (faster)"),
        "language": ("none", "the language when a request names none; none: detected per request"),
        "vad_filter": ("`false`", "skip silence with Silero VAD before decoding"),
    },
    "piper": {
        "path": (
            "one of the two",
            "a Piper voice: its `.onnx` file (the `.onnx.json` beside it), or a folder with one",
        ),
        "packages": ("one of the two", "a Python package whose `data/` folder holds the voice"),
        "voice": ("the file's name", "the name the voice is listed under (`GET /v1/audio/voices`)"),
    },
    "scripted": {
        "script": (
            "the built-in demo script",
            "a YAML (or `.json`) script file: see [the scripted engine](engines-scripted.md)",
        ),
        "tasks": (
            '`["chat"]`',
            'what the model serves: `"chat"`, `"embeddings"` (`POST /v1/embeddings`, `/api/embed`: '
            'a vector of each input\'s SHA-256), `"rerank"` (`POST /v1/rerank`: the share of the '
            "query's words in each document), "
            '`"transcription"` and `"speech"` (the reply a '
            "word at a time as transcript segments or tones, failing on `error_after_deltas`); "
            "`token_delay_ms` paces them, an input at a time",
        ),
    },
}

_SETTINGS_FIELD = {  # table → how its keys are named on `Settings`
    "server": "{}",
    "chat_completions": "{}",
    "responses": "responses_{}",
    "lmstudio": "lmstudio_{}",
    "store": "store_{}",
    "tools": "tools_{}",
    "tracing": "tracing_{}",
}


def _documented_order(table: str) -> Any:
    """Sort an engine's keys (a set in the code) as this file lists them; new ones last."""
    order = list(MEANINGS.get(table, {}))
    return lambda key: (order.index(key) if key in order else len(order), key)


def code_keys() -> dict[str, tuple[str, ...]]:
    """Every key the loader and the built-in engines accept, per table, in the code's order."""
    from sluicegate.config import table_keys
    from sluicegate.engines.llamacpp.settings import KEYS as LLAMACPP
    from sluicegate.engines.lookup import MODEL_KEYS
    from sluicegate.engines.piper import KEYS as PIPER
    from sluicegate.engines.scripted import KEYS as SCRIPTED
    from sluicegate.engines.upstream.config import KEYS as UPSTREAM
    from sluicegate.engines.whisper import KEYS as WHISPER

    common = ("id", "engine", *MODEL_KEYS)
    keys = dict(table_keys())
    keys["models"] = common
    keys["llamacpp"] = tuple(sorted(LLAMACPP - set(common), key=_documented_order("llamacpp")))
    keys["openai"] = tuple(sorted(UPSTREAM - set(common), key=_documented_order("openai")))
    keys["scripted"] = tuple(sorted(SCRIPTED - set(common)))
    keys["whisper"] = tuple(sorted(WHISPER - set(common), key=_documented_order("whisper")))
    keys["piper"] = tuple(sorted(PIPER - set(common), key=_documented_order("piper")))
    return keys


def drift() -> list[str]:
    """Keys the code accepts with no meaning here, and meanings of keys the code does not accept."""
    problems = []
    for table, keys in code_keys().items():
        documented = MEANINGS.get(table, {})
        problems += [
            f"[{table}] {key}: accepted by the code, missing here" for key in keys if key not in documented
        ]
        problems += [f"[{table}] {key}: documented, not accepted" for key in documented if key not in keys]
    return problems


def _default(table: str, key: str) -> str:
    from sluicegate.config import Settings

    shown, _ = MEANINGS[table][key]
    if shown is not None:
        return shown
    name = _SETTINGS_FIELD[table].format(key)
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    value: Any = fields[name].default
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f'`"{value}"`' if isinstance(value, str) else f"`{value}`"


def render(table: str) -> str:
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for key in code_keys()[table]:
        rows.append(f"| `{key}` | {_default(table, key)} | {MEANINGS[table][key][1]} |")
    return "\n".join(rows)


MARKER = re.compile(r"<!-- config-keys: (\w+) -->")


def expand(markdown: str) -> str:
    return MARKER.sub(lambda m: render(m.group(1)), markdown)


# --- the mkdocs hook -----------------------------------------------------------------------------


def on_pre_build(config: Any, **kwargs: Any) -> None:
    from mkdocs.exceptions import PluginError

    problems = drift()
    if problems:
        raise PluginError("docs/gen_config.py is out of step with the code:\n  " + "\n  ".join(problems))


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return expand(markdown) if MARKER.search(markdown) else markdown


if __name__ == "__main__":  # `python docs/gen_config.py`: print the configuration page as built
    print(expand((Path(__file__).parent / "configuration.md").read_text()))
