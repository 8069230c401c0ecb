"""A LoRA adapter for the demo model (model.py), as llama.cpp's convert_lora_to_gguf.py writes
one: `general.type = "adapter"`, `adapter.type = "lora"`, `adapter.lora.alpha`, and for a weight
W a pair `W.lora_a` (ne [W.ne0, rank]) and `W.lora_b` (ne [rank, W.ne1]), llama.cpp adding
`scale * alpha / rank * B @ A` to W. This one adapts the output projection (and the first layer's values) with random
weights, strongly enough that every greedy choice moves (tests: a scale changes the output)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from sluicegate.demo.model import finish_gguf


def make_demo_lora(base: str | Path, path: str | Path, *, rank: int = 4, seed: int = 1) -> Path:
    """Write an adapter for the demo GGUF at `base` to `path` and return it."""
    reader = gguf.GGUFReader(str(base))
    arch = str(bytes(reader.fields["general.architecture"].parts[-1]), "utf-8")
    output = next(t for t in reader.tensors if t.name == "output.weight")
    n_embd, n_vocab = int(output.shape[0]), int(output.shape[1])
    rng = np.random.default_rng(seed)
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    writer = gguf.GGUFWriter(str(tmp), arch)
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(rank))  # alpha / rank = 1
    # numpy shapes are the reverse of ne: A is (rank, n_embd), B is (n_vocab, rank).
    a = rng.standard_normal((rank, n_embd)) / np.sqrt(n_embd)
    b = rng.standard_normal((n_vocab, rank)) * 8.0
    writer.add_tensor("output.weight.lora_a", a.astype(np.float32))
    writer.add_tensor("output.weight.lora_b", b.astype(np.float32))
    # And the first layer's values: the KV cache differs with the scale too (a cache computed
    # under one scale is not another's).
    v_a = rng.standard_normal((rank, n_embd)) / np.sqrt(n_embd)
    v_b = rng.standard_normal((n_embd, rank))
    writer.add_tensor("blk.0.attn_v.weight.lora_a", v_a.astype(np.float32))
    writer.add_tensor("blk.0.attn_v.weight.lora_b", v_b.astype(np.float32))
    return finish_gguf(writer, tmp, path)
