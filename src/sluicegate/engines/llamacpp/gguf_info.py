"""What a GGUF file says about itself, read from its header without loading the weights.

The model listings show these facts (architecture, quantization, size, context length, whether
the chat template knows tools and reasoning), so they must be available before any load.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sluicegate.engines.base import ConfigError
from sluicegate.engines.llamacpp.gguf_header import GGUFHeader, read_gguf_header
from sluicegate.engines.llamacpp.gguf_types import FILE_TYPES, TENSOR_TYPES

# llama.cpp's pooling types that make an embedding model (NONE = 0 and RANK = 4 do not).
POOLING_MEAN, POOLING_CLS, POOLING_LAST = 1, 2, 3
POOLING_RANK = 4  # a reranker: one score per input
POOLING_TYPES = (POOLING_MEAN, POOLING_CLS, POOLING_LAST)

# Architectures whose layers llama.cpp gives a sliding window when the header states one, and
# the layer pattern it assumes unless `attention.sliding_window_pattern` says otherwise: every
# n-th layer attends over the whole context, the last of each n (or the first, `dense_first`);
# llama.cpp's `load_swa_pattern` / `set_swa_pattern`. An architecture not listed is counted
# with every layer full: an overestimate, never an under-.
_SWA_PATTERNS: dict[str, tuple[int, bool]] = {
    "gemma2": (2, False),
    "gemma3": (6, False),
    "gemma3n": (5, False),
    "gemma-embedding": (6, False),
    "cohere2": (4, False),
    "cohere2moe": (4, True),
    "exaone4": (4, False),
    "olmo2": (4, False),
    "gpt-oss": (2, False),
    "afmoe": (4, False),
    "smallthinker": (4, True),
    "plamo3": (8, False),
}

# Markers of a template that can render tools, and of one that knows reasoning blocks.
_TOOL_MARKERS = ("tools", "tool_calls")
_REASONING_MARKERS = ("<think>", "reasoning_content", "enable_thinking", "<|channel|>")


@dataclass(frozen=True, slots=True)
class GGUFInfo:
    path: Path
    architecture: str
    name: str | None
    description: str | None
    organization: str | None
    quantization: str | None  # e.g. "Q8_0", "Q4_K_M", "F16"
    size_bytes: int
    parameters: int
    context_length: int | None
    chat_template: str | None
    bos_token: str
    eos_token: str
    add_bos: bool = False  # the tokenizer prepends BOS itself (`tokenizer.ggml.add_bos_token`)
    finetune: str | None = None  # `general.finetune` ("it", "Instruct" …); None: a base model or unsaid
    # The KV cache's shape, for the context a memory budget allows (None when the header is silent).
    n_layers: int | None = None
    n_head_kv: int | None = None
    head_dim_k: int | None = None
    head_dim_v: int | None = None
    # Sliding-window attention: the window, and how many of the layers use it (0: none).
    sliding_window: int = 0
    swa_layers: int = 0
    pooling: int | None = None  # an embedding model's pooling type (llama.cpp's enum), if stated
    embedding_length: int = 0
    vocab_size: int = 0
    # A reranker's prompt (`tokenizer.chat_template.rerank`), with {query} and {document} in it.
    rerank_template: str | None = None
    # The header names fill-in-the-middle tokens (llama.cpp may also find them by their text:
    # the engine asks the vocabulary itself when a FIM request comes).
    has_fim: bool = False

    @property
    def kv_bytes_per_token(self) -> int | None:
        """KV-cache bytes one token of context costs: n_layer x n_head_kv x (k + v head dims) x
        2 bytes (llama.cpp's default f16 cache)."""
        if not (self.n_layers and self.n_head_kv and self.head_dim_k and self.head_dim_v):
            return None
        return self.n_layers * self.n_head_kv * (self.head_dim_k + self.head_dim_v) * 2

    @property
    def kv_bytes_per_cell(self) -> int | None:
        """One layer's bytes for one cached token."""
        per_token = self.kv_bytes_per_token
        return per_token // self.n_layers if per_token and self.n_layers else None

    @property
    def supports_tools(self) -> bool:
        return self.chat_template is not None and any(m in self.chat_template for m in _TOOL_MARKERS)

    @property
    def supports_reasoning(self) -> bool:
        return self.chat_template is not None and any(m in self.chat_template for m in _REASONING_MARKERS)

    @property
    def bits_per_weight(self) -> int | None:
        """The nominal bits of the quantization's name (Q4_K_M → 4, F16 → 16), as LM Studio lists it."""
        found = re.search(r"(\d+)", self.quantization or "")
        return int(found.group(1)) if found else None

    @property
    def params_string(self) -> str | None:
        if not self.parameters:
            return None
        for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
            if self.parameters >= scale:
                value = self.parameters / scale
                return f"{value:.0f}{unit}" if value >= 10 else f"{value:.1f}".rstrip("0").rstrip(".") + unit
        return str(self.parameters)


def _quantization(header: GGUFHeader) -> str | None:
    """The file type's name, or failing that the type most of the weights are stored in."""
    file_type = header.fields.get("general.file_type")
    if isinstance(file_type, int) and file_type in FILE_TYPES:
        return FILE_TYPES[file_type].removeprefix("MOSTLY_").removeprefix("ALL_")
    counts: dict[str, int] = {}
    for tensor in header.tensors:
        name = TENSOR_TYPES.get(tensor.type, f"type {tensor.type}")
        counts[name] = counts.get(name, 0) + tensor.n_elements
    return max(counts, key=lambda name: counts[name]) if counts else None


def _swa_layers(architecture: str, fields: dict[str, object], n_layers: int | None) -> tuple[int, int]:
    """The sliding window and how many layers use it, as llama.cpp reads them from a header."""
    window = fields.get(f"{architecture}.attention.sliding_window")
    pattern = fields.get(f"{architecture}.attention.sliding_window_pattern")
    if not isinstance(window, int) or window <= 0 or not n_layers:
        return 0, 0
    if isinstance(pattern, list):  # one flag per layer
        return window, sum(1 for flag in pattern[:n_layers] if flag is True)
    if architecture not in _SWA_PATTERNS:
        return 0, 0
    every, dense_first = _SWA_PATTERNS[architecture]
    if isinstance(pattern, int) and not isinstance(pattern, bool):
        every = pattern
    if every == 0:
        return window, n_layers
    windowed = sum(
        1 for il in range(n_layers) if (il % every != 0 if dense_first else il % every < every - 1)
    )
    return window, windowed


def read_gguf_info(path: Path) -> GGUFInfo:
    """Read a GGUF's header; a file that is not a readable GGUF is a configuration error."""
    try:
        header = read_gguf_header(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} is not a readable GGUF file: {exc}") from exc
    fields = header.fields
    architecture = str(fields.get("general.architecture") or "unknown")
    context = fields.get(f"{architecture}.context_length")
    tokens = fields.get("tokenizer.ggml.tokens")
    tokens = tokens if isinstance(tokens, list) else []

    def token_text(key: str) -> str:
        token_id = fields.get(key)
        if not isinstance(token_id, int) or not 0 <= token_id < len(tokens):
            return ""
        return str(tokens[token_id])

    template = fields.get("tokenizer.chat_template")
    rerank = fields.get("tokenizer.chat_template.rerank")

    def integer(key: str) -> int | None:
        value = fields.get(f"{architecture}.{key}")
        if isinstance(value, list):  # per-layer counts (some architectures): the largest
            value = max((v for v in value if isinstance(v, int)), default=None)
        return int(value) if isinstance(value, int) and value > 0 else None

    n_embd, n_head = integer("embedding_length"), integer("attention.head_count")
    head_dim = n_embd // n_head if n_embd and n_head else None
    sliding_window, swa_layers = _swa_layers(architecture, fields, integer("block_count"))
    return GGUFInfo(
        path=path,
        architecture=architecture,
        name=fields.get("general.name"),
        description=fields.get("general.description"),
        organization=fields.get("general.organization"),
        quantization=_quantization(header),
        size_bytes=path.stat().st_size,
        parameters=sum(t.n_elements for t in header.tensors),
        context_length=int(context) if isinstance(context, int) else None,
        chat_template=template if isinstance(template, str) else None,
        bos_token=token_text("tokenizer.ggml.bos_token_id"),
        eos_token=token_text("tokenizer.ggml.eos_token_id"),
        add_bos=fields.get("tokenizer.ggml.add_bos_token") is True,
        finetune=fields.get("general.finetune") or None,
        n_layers=integer("block_count"),
        n_head_kv=integer("attention.head_count_kv") or n_head,
        head_dim_k=integer("attention.key_length") or head_dim,
        head_dim_v=integer("attention.value_length") or head_dim,
        sliding_window=sliding_window,
        swa_layers=swa_layers,
        pooling=fields.get(f"{architecture}.pooling_type"),
        embedding_length=n_embd or 0,
        vocab_size=len(tokens),
        rerank_template=rerank if isinstance(rerank, str) else None,
        has_fim=all(
            isinstance(fields.get(f"tokenizer.ggml.fim_{part}_token_id"), int)
            for part in ("pre", "suf", "mid")
        ),
    )
