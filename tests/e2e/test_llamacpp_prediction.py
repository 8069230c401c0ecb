"""OpenAI's Predicted Outputs through a real server and the official `openai` SDK: the llamacpp
engine drafts from `prediction` (no `speculative` setting needed), the answer is unchanged,
and the usage says how many predicted tokens were taken and refused."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from e2e_support import Server

pytestmark = pytest.mark.e2e

MODEL = "tiny-predict"
PROMPT = "Rewrite this file with the names changed."


@pytest.fixture(scope="module")
def sdk(start_server: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    from sluicegate.demo.model import make_demo_gguf

    gguf = str(make_demo_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", ends_replies=False))
    table = {"id": MODEL, "engine": "llamacpp", "path": gguf, "batch_size": 64, "context_length": 1024}
    server: Server = start_server(models=[table])  # type: ignore[operator]
    with openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0, timeout=60.0) as client:
        yield client


def _ask(sdk: openai.OpenAI, **extra: object) -> openai.types.chat.ChatCompletion:
    return sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": PROMPT}],
        max_tokens=60,
        temperature=0,
        **extra,  # type: ignore[arg-type]
    )


def test_prediction_drafts_and_the_usage_counts_it(sdk: openai.OpenAI) -> None:
    plain = _ask(sdk)
    text = plain.choices[0].message.content
    assert text and plain.usage is not None and plain.usage.completion_tokens_details is not None
    assert plain.usage.completion_tokens_details.accepted_prediction_tokens == 0

    predicted = _ask(sdk, prediction={"type": "content", "content": text})
    assert predicted.choices[0].message.content == text
    usage = predicted.usage
    assert usage is not None and usage.completion_tokens_details is not None
    assert usage.completion_tokens == plain.usage.completion_tokens
    assert (usage.completion_tokens_details.accepted_prediction_tokens or 0) > 30

    # An edited prediction (as content parts): the answer is still the model's own.
    half = len(text) // 2
    parts = [{"type": "text", "text": text[:half]}, {"type": "text", "text": " and now for something else"}]
    edited = _ask(sdk, prediction={"type": "content", "content": parts})
    assert edited.choices[0].message.content == text
    details = edited.usage.completion_tokens_details if edited.usage else None
    assert details is not None and (details.rejected_prediction_tokens or 0) > 0


def test_prediction_streamed_with_usage(sdk: openai.OpenAI) -> None:
    text = _ask(sdk).choices[0].message.content or ""
    stream = sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": PROMPT}],
        max_tokens=60,
        temperature=0,
        prediction={"type": "content", "content": text},
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens_details is not None
    assert (usage.completion_tokens_details.accepted_prediction_tokens or 0) > 30


def test_a_bad_prediction_is_a_400_naming_it(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        _ask(sdk, prediction={"type": "file", "content": "x"})
    assert caught.value.body is not None and caught.value.body.get("param") == "prediction.type"  # type: ignore[union-attr]
