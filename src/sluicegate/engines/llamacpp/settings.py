"""The `[[models]]` keys of the llamacpp engine, validated once at startup."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sluicegate.core.errors import SluicegateError
from sluicegate.engines.base import ConfigError
from sluicegate.engines.llamacpp.lora import LoraFile, parse_lora
from sluicegate.engines.llamacpp.overflow import Policy, policy_value
from sluicegate.engines.llamacpp.speculative import SpeculativeSettings
from sluicegate.engines.llamacpp.template import template_source
from sluicegate.parsing import ReasoningStyle, ToolCallFormat, reasoning_setting, tool_format_setting

KEYS = frozenset(
    {
        "id",
        "engine",
        "path",
        "context_length",
        "n_gpu_layers",
        "threads",
        "batch_size",
        "tool_call_format",
        "reasoning",
        "thinking",
        "chat_template",
        "parallel",
        "seed",
        "flash_attention",
        "repack",
        "kv_cache_budget_mib",
        "context_overflow",
        "embedding",
        "batching",
        "stream_interval_ms",
        "mmproj",
        "rerank",
        "speculative",
        "draft_model",
        "draft_max",
        "draft_min",
        "draft_p_min",
        "draft_adaptive",
        "ngram_size",
        "lora",
        "context_shift",
    }
)
DEFAULT_BATCH_SIZE = 512


@dataclass(frozen=True, slots=True)
class LlamaCppSettings:
    path: Path
    context_length: int | None = None  # None: the model's own, capped by kv_cache_budget_mib
    kv_cache_budget_mib: int | None = None  # None: context.default_budget_mib()
    context_overflow: Policy = "error"  # or "rolling_window", "truncate_middle" (overflow.py)
    embedding: bool | None = None  # None: an embedding model when the GGUF states a pooling type
    rerank: bool | None = None  # None: a reranker when the GGUF states rank pooling
    n_gpu_layers: int = 0  # -1: all
    threads: int | None = None  # None: half the cores to decode, all of them for prompts
    batch_size: int = DEFAULT_BATCH_SIZE
    tool_call_format: ToolCallFormat | None = None  # None: detected from the chat template
    reasoning: ReasoningStyle | None = None
    reasoning_set: bool = False  # whether `reasoning` came from the config (None can mean "none")
    # The template's thinking switch (`enable_thinking`) when a request sets no reasoning effort,
    # as llama-server's `--reasoning on|off|auto`: True, False, or None (auto: on for a model
    # that reasons, as llama.cpp passes it).
    thinking: bool | None = None
    chat_template: str | None = None  # None: the GGUF's own
    # Without batching: instances, each with its own weights and context. With batching:
    # sequences of one context (None: chosen from the KV-cache budget, at most 4).
    parallel: int | None = None
    batching: bool = True  # continuous batching (scheduler.py); false: one sequence per context
    # With batching: a running stream's tokens reach its client at most this often, several
    # per write (its first token and its end at once); 0: every token as it is sampled.
    stream_interval_ms: int = 30
    seed: int | None = None
    flash_attention: bool | None = None  # None: llama.cpp decides (on where it helps)
    # llama.cpp's CPU "repack" of Q4_0/Q8_0/... weights into interleaved layouts (its "extra
    # buffer types"): faster prompts, but it crashed in llama_decode on an AVX-512 machine, so
    # it is opt-in.
    repack: bool = False
    # The vision projector (mmproj GGUF); None: an `mmproj*.gguf` beside the model, if any.
    mmproj: Path | None = None
    # Speculative decoding (speculative.py): n-gram lookup or a draft model; None: off.
    speculative: SpeculativeSettings | None = None
    # LoRA adapters loaded beside the model (lora.py), each at its starting scale.
    lora: tuple[LoraFile, ...] = ()
    # llama-server's `--context-shift` (shift.py): a sequence whose context fills while it
    # generates drops half of it and goes on, instead of stopping there.
    context_shift: bool = False


THINKING = {"on": True, "off": False, "auto": None}


def thinking_setting(value: Any) -> bool | None:
    """`thinking = "on" | "off" | "auto"` (llama-server's `--reasoning`)."""
    if value not in THINKING:
        raise ValueError(f'`thinking` must be "on", "off" or "auto", not {value!r}')
    return THINKING[value]


def _integer(model: str, key: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"model {model!r}: `{key}` must be an integer >= {low}, got {value!r}")
    return int(value)


def _string(model: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"model {model!r}: `{key}` must be a non-empty string, got {value!r}")
    return value


def _path(model: str, key: str, value: Any, base_dir: Path) -> Path:
    path = Path(_string(model, key, value)).expanduser()
    return path if path.is_absolute() else base_dir / path


def _speculative(model: str, table: dict[str, Any], base_dir: Path) -> SpeculativeSettings | None:
    """`speculative = "ngram"` or `draft_model = "…gguf"`, and the draft's limits."""
    kind = table.get("speculative")
    if kind is not None and kind not in ("ngram", "draft", "none"):
        raise ConfigError(f'model {model!r}: `speculative` must be "ngram", "draft" or "none", got {kind!r}')
    tuning = [
        key
        for key in ("draft_max", "draft_min", "draft_p_min", "draft_adaptive", "ngram_size")
        if key in table
    ]
    if "draft_model" in table:
        if kind not in (None, "draft"):
            raise ConfigError(f'model {model!r}: `draft_model` goes with `speculative = "draft"` (or none)')
        kind = "draft"
    if kind == "draft" and "draft_model" not in table:
        raise ConfigError(f'model {model!r}: `speculative = "draft"` needs `draft_model`, the draft GGUF')
    if kind in (None, "none"):
        if tuning:
            raise ConfigError(f"model {model!r}: {tuning} need `speculative` or `draft_model`")
        return None
    if table.get("batching") is False:
        raise ConfigError(f"model {model!r}: speculative decoding needs `batching = true`")
    values: dict[str, Any] = {"kind": kind}
    if kind == "draft":
        path = _path(model, "draft_model", table["draft_model"], base_dir)
        if not path.is_file():
            raise ConfigError(f"model {model!r}: no draft model GGUF file at {path}")
        values["draft_model"] = path
    elif "draft_p_min" in table or "draft_adaptive" in table:
        key = "draft_p_min" if "draft_p_min" in table else "draft_adaptive"
        raise ConfigError(f"model {model!r}: `{key}` is for a draft model, not n-gram drafts")
    if kind != "ngram" and "ngram_size" in table:
        raise ConfigError(f'model {model!r}: `ngram_size` is for `speculative = "ngram"`')
    for key, low in (("draft_max", 1), ("draft_min", 0), ("ngram_size", 1)):
        if key in table:
            values[key] = _integer(model, key, table[key], low)
    if "draft_p_min" in table:
        p_min = table["draft_p_min"]
        if isinstance(p_min, bool) or not isinstance(p_min, int | float) or not 0 <= p_min <= 1:
            raise ConfigError(f"model {model!r}: `draft_p_min` must be a number in [0, 1], got {p_min!r}")
        values["draft_p_min"] = float(p_min)
    if "draft_adaptive" in table:
        if not isinstance(table["draft_adaptive"], bool):
            raise ConfigError(f"model {model!r}: `draft_adaptive` must be true or false")
        values["draft_adaptive"] = table["draft_adaptive"]
    settings = SpeculativeSettings(**values)
    if settings.draft_min > settings.draft_max:
        raise ConfigError(f"model {model!r}: `draft_min` ({settings.draft_min}) is above `draft_max`")
    return settings


def parse_settings(table: dict[str, Any], base_dir: Path) -> LlamaCppSettings:
    model = str(table.get("id"))
    unknown = set(table) - KEYS
    if unknown:
        raise ConfigError(
            f"model {model!r}: unknown keys {sorted(unknown)} for engine llamacpp; known: {sorted(KEYS)}"
        )
    if "path" not in table:
        raise ConfigError(f"model {model!r}: engine llamacpp needs `path`, the GGUF file")
    path = Path(_string(model, "path", table["path"])).expanduser()
    path = path if path.is_absolute() else base_dir / path
    if not path.is_file():
        raise ConfigError(f"model {model!r}: no GGUF file at {path}")
    values: dict[str, Any] = {"path": path}
    if "mmproj" in table:
        mmproj = Path(_string(model, "mmproj", table["mmproj"])).expanduser()
        mmproj = mmproj if mmproj.is_absolute() else base_dir / mmproj
        if not mmproj.is_file():
            raise ConfigError(f"model {model!r}: no projector (mmproj) GGUF file at {mmproj}")
        values["mmproj"] = mmproj
    for key, low in (
        ("context_length", 16),
        ("threads", 1),
        ("batch_size", 1),
        ("parallel", 1),
        ("seed", 0),
        ("kv_cache_budget_mib", 1),
        ("stream_interval_ms", 0),
    ):
        if key in table:
            values[key] = _integer(model, key, table[key], low)
    for key in ("flash_attention", "repack", "embedding", "batching", "rerank", "context_shift"):
        if key in table:
            if not isinstance(table[key], bool):
                raise ConfigError(f"model {model!r}: `{key}` must be true or false")
            values[key] = table[key]
    if "context_overflow" in table:
        try:
            values["context_overflow"] = policy_value(table["context_overflow"], "context_overflow")
        except SluicegateError as exc:
            raise ConfigError(f"model {model!r}: {exc}") from exc
    if "n_gpu_layers" in table:
        values["n_gpu_layers"] = _integer(model, "n_gpu_layers", table["n_gpu_layers"], -1)
    values["speculative"] = _speculative(model, table, base_dir)
    if "lora" in table:
        values["lora"] = parse_lora(model, table["lora"], base_dir)
    try:
        if "tool_call_format" in table:
            values["tool_call_format"] = tool_format_setting(
                _string(model, "tool_call_format", table["tool_call_format"])
            )
        if "reasoning" in table:
            values["reasoning"] = reasoning_setting(_string(model, "reasoning", table["reasoning"]))
            values["reasoning_set"] = True
        if "thinking" in table:
            values["thinking"] = thinking_setting(table["thinking"])
    except ValueError as exc:
        raise ConfigError(f"model {model!r}: {exc}") from exc
    if "chat_template" in table:
        source = _string(model, "chat_template", table["chat_template"])
        try:
            values["chat_template"] = template_source(source, base_dir)
        except ConfigError as exc:
            raise ConfigError(f"model {model!r}: {exc}") from exc
    return LlamaCppSettings(**values)
