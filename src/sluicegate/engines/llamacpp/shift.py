"""Context shift (`context_shift = true`, llama-server's `--context-shift`): a sequence whose
context fills while it generates drops half of its tokens after the first `keep` and goes on.

As llama-server does it (tools/server/server-context.cpp, `pre_decode`): when the cache holds
all but one of the context's cells, the cells of the first half of the tokens after `keep`
(the BOS token, if the model adds one, and a request's `n_keep` more: -1 keeps the prompt) are removed and the later cells moved back by as many
positions (`llama_memory_seq_rm`, `llama_memory_seq_add`); the model then goes on reading a
context with a hole in the middle. Only where the request asked for more tokens than fit: a
request with no limit still ends where the context is full, so none runs forever. Not for a
model with a projector (an image's cells cannot be cut in half; llama-server turns the shift
off there too) nor one whose memory cannot move cells (`llama_memory_can_shift`).
"""

from __future__ import annotations

from typing import Any

import llama_cpp


def kept(shift_keep: int, prompt: int) -> int:
    """The tokens a shift keeps: `Job.shift_keep`, where -1 is the whole prompt (`n_keep: -1`)."""
    return prompt if shift_keep < 0 else shift_keep


def due(cached: int, n_ctx: int) -> bool:
    """Whether a sequence with `cached` cells must shift before it decodes its next token."""
    return cached + 1 >= n_ctx


def span(cached: int, n_ctx: int, keep: int) -> tuple[int, int]:
    """(first token dropped, how many): half of the tokens after `keep`, leaving at least one."""
    keep = min(keep, n_ctx - 4)
    left = cached - keep
    return keep, max(0, min(left // 2, left - 1))


def shift(memory: Any, seq_id: int, tokens: list[int], n_ctx: int, keep: int) -> int:
    """Drop the span's cells from `seq_id` and move the later ones back; `tokens` (what the
    stream holds, in order) loses the same tokens. Returns how many were dropped."""
    start, count = span(len(tokens), n_ctx, keep)
    if count <= 0:
        return 0
    end = start + count
    llama_cpp.llama_memory_seq_rm(memory, seq_id, start, end)
    llama_cpp.llama_memory_seq_add(memory, seq_id, end, -1, -count)
    del tokens[start:end]
    return count
