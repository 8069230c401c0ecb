"""Pooled outputs (embeddings, rerank scores) of a llamacpp model: each input's tokens checked,
then decoded one input at a time on the engine's worker thread, stopped before the next input
when the caller is gone."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

from sluicegate.core.embeddings import EmbedInput, EmbedRequest
from sluicegate.core.errors import EngineFailure, SluicegateError, invalid
from sluicegate.core.rerank import RerankRequest
from sluicegate.engines.llamacpp.rerank import rerank_tokens
from sluicegate.engines.llamacpp.runtime import LlamaRuntime
from sluicegate.engines.llamacpp.server_stats import STATS

if TYPE_CHECKING:  # numpy where first used: a chat server never needs it (bindings.py)
    import numpy as np


def embedding_inputs(
    request: EmbedRequest,
    tokenize: Callable[[EmbedInput], list[int]],
    vocab_size: int,
    context_length: int,
    model_id: str,
) -> Iterator[list[int]]:
    """Each input's tokens, checked (on the worker thread: 2,048 texts take a while)."""
    for text in request.inputs:
        if isinstance(text, list) and any(isinstance(t, int) and not 0 <= t < vocab_size for t in text):
            raise invalid(f"Invalid 'input': token ids must be in [0, {vocab_size}).", param="input")
        tokens = tokenize(text)  # a text, token ids, or (llama-server's) ids with texts among them
        if len(tokens) > context_length:
            raise invalid(
                f"An input is {len(tokens)} tokens, too large for model {model_id!r} to embed "
                f"(its context is {context_length} tokens).",
                param="input",
                code="context_length_exceeded",
            )
        yield tokens


def rerank_inputs(
    request: RerankRequest, model: Any, template: str | None, context_length: int, model_id: str
) -> Iterator[list[int]]:
    """Query and document as one sequence per document, checked (on the worker thread)."""
    for index, document in enumerate(request.documents):
        tokens = rerank_tokens(model, template, request.query, document)
        if len(tokens) > context_length:
            raise invalid(
                f"Query and document {index} are {len(tokens)} tokens, more than model "
                f"{model_id!r} can rank (its context is {context_length} tokens).",
                param="documents",
                code="context_length_exceeded",
            )
        yield tokens


async def run_pooled(
    runtime: LlamaRuntime, executor: Executor, inputs: Callable[[LlamaRuntime], Iterator[list[int]]]
) -> tuple[list[np.ndarray], int]:
    """The pooled output of each input, and their tokens, on the worker thread: tokenized
    and checked first, then decoded one at a time. Cancelled (the client left, the deadline
    passed), the worker stops before its next input, so the slot is free again at once."""
    cancelled = threading.Event()

    def work() -> tuple[list[np.ndarray], int]:
        sequences: list[list[int]] = []
        for tokens in inputs(runtime):
            if cancelled.is_set():
                raise _Cancelled
            sequences.append(tokens)
        outputs = []
        started = time.perf_counter()
        for tokens in sequences:
            if cancelled.is_set():
                raise _Cancelled
            outputs.append(runtime.embed(tokens))
        total = sum(map(len, sequences))
        STATS.pooled(total, len(sequences), time.perf_counter() - started)
        return outputs, total

    try:
        return await asyncio.get_running_loop().run_in_executor(executor, work)
    except (SluicegateError, EngineFailure):
        raise
    except Exception as exc:
        raise EngineFailure(f"llama.cpp failed: {exc}", code="engine_error") from exc
    finally:
        cancelled.set()  # a client gone: the worker stops before the next input


class _Cancelled(Exception):
    """The worker's way out of a task whose caller is gone (nobody reads it)."""


def normalised(vector: np.ndarray, dimensions: int | None) -> list[float]:
    """L2-normalised, after truncating to `dimensions` (Matryoshka-style, as OpenAI's
    text-embedding-3 models do)."""
    import numpy as np  # the vector is numpy's already

    if dimensions is not None:
        vector = vector[:dimensions]
    norm = float(np.linalg.norm(vector))
    values: list[float] = (vector / norm if norm > 0 else vector).tolist()
    return values
