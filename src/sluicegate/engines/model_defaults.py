"""A model's default sampling (`[[models]] sampling = {...}`): what a request that sets none of
them gets, as llama-server's `--temp`/`--n-predict`/`--top-k`, LM Studio's per-model inference
settings and Ollama's Modelfile `PARAMETER`s give. Read with the dialects' own field parser, so
a default has the names and limits of the request field it stands in for; a request's own
value always wins."""

from __future__ import annotations

from typing import Any

from sluicegate.core.errors import SluicegateError
from sluicegate.core.request import SamplingParams
from sluicegate.core.validation import INT32_MAX, Fields, sampling_fields
from sluicegate.engines.base import ConfigError

# The keys a `sampling` table takes: the sampling fields every dialect reads, and the limit
# (listed: a field added to SamplingParams is not a model default until it is named here).
_UNSET = SamplingParams()
KEYS = frozenset(
    {
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "typical_p",
        "repeat_penalty",
        "repeat_last_n",
        "presence_penalty",
        "frequency_penalty",
        "seed",
        "max_tokens",
        "dry_multiplier",
        "dry_base",
        "dry_allowed_length",
        "dry_penalty_last_n",
        "dry_sequence_breakers",
        "xtc_probability",
        "xtc_threshold",
        "top_n_sigma",
        "mirostat",
        "mirostat_tau",
        "mirostat_eta",
    }
)


def parse(model_id: str, table: Any) -> SamplingParams | None:
    """The `sampling` table of a `[[models]]` table (None: no defaults)."""
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(f"model {model_id!r}: `sampling` must be a table, e.g. {{ temperature = 0.7 }}")
    unknown = sorted(set(table) - KEYS)
    if unknown:
        raise ConfigError(f"model {model_id!r}: unknown `sampling` keys {unknown}; known: {sorted(KEYS)}")
    f = Fields(table, f"models[{model_id}].sampling")
    try:
        defaults = sampling_fields(f)
        defaults.max_tokens = f.integer("max_tokens", low=1, high=INT32_MAX)
    except SluicegateError as error:
        raise ConfigError(f"model {model_id!r}: {error}") from None
    return defaults


def apply(defaults: SamplingParams | None, sampling: SamplingParams) -> None:
    """Fill what the request left unset from the model's defaults (in place)."""
    if defaults is None:
        return
    for name in KEYS:
        mine, default = getattr(sampling, name), getattr(defaults, name)
        if mine == getattr(_UNSET, name) and default != getattr(_UNSET, name):
            setattr(sampling, name, default)
