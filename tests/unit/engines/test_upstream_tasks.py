"""An upstream's embeddings and rerank answers read as `Engine.embed`'s and `Engine.rerank`'s
results: base64 vectors decoded, scores by index, any other shape a 502 (never a 500)."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from sluicegate.core.errors import SluicegateError
from sluicegate.engines.upstream.embeddings import checked_embeddings, embed_result, rerank_result


def test_an_embeddings_answer_in_either_encoding() -> None:
    packed = base64.b64encode(np.asarray([0.5, -1.0], dtype="<f4").tobytes()).decode()
    answer = checked_embeddings(
        {"data": [{"embedding": [1.0, 0.0]}, {"embedding": packed}], "usage": {"prompt_tokens": 3}}, "r"
    )
    result = embed_result(answer)
    assert result.vectors == [[1.0, 0.0], [0.5, -1.0]] and result.prompt_tokens == 3


def test_a_rerank_answer_by_index() -> None:
    answer = {"results": [{"index": 1, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.2}]}
    assert rerank_result(answer, 3, "r").scores == [0.2, 0.9, 0.0]  # one left out (top_n): 0


@pytest.mark.parametrize(
    "answer",
    [
        None,
        [1, 2],
        {"error": {"message": "nope"}},
        {"results": [{"index": 5, "relevance_score": 1}]},
        {"results": [{"index": 0, "relevance_score": "high"}]},
    ],
)
def test_any_other_rerank_answer_is_the_upstream_s_failure(answer: object) -> None:
    with pytest.raises(SluicegateError) as caught:
        rerank_result(answer, 2, "r")
    assert caught.value.info.status == 502
