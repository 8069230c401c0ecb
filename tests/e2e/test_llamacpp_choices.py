"""`n` > 1 choices on the llamacpp engine, driven by the official `openai` SDK on the demo GGUF:
Chat Completions and `/v1/completions`, streamed and not — every choice with its index and its
own finish reason, the usage summed once (the prompt counted once), distinct choices with a
seed at temperature 1, identical ones at temperature 0, and `n` out of range refused."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import openai
import pytest

pytestmark = pytest.mark.e2e

MODEL = "tiny"
MESSAGES = [{"role": "user", "content": "Tell me a long story about the sea."}]
TOKENS = 24


def one(sdk: openai.OpenAI, **extra: object) -> openai.types.chat.ChatCompletion:
    return sdk.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=TOKENS,
        **extra,  # type: ignore[arg-type]
    )


def folded(
    stream: Iterable[Any], text_of: Callable[[Any], str]
) -> tuple[dict[int, str], dict[int, str], list[Any]]:
    """A stream of `n` choices' chunks (Chat Completions' or Completions'): each choice's text
    and finish reason, and the usage chunks (no choices in them); nothing after a finish."""
    text: dict[int, str] = defaultdict(str)
    finish: dict[int, str] = {}
    usage = []
    for chunk in stream:
        if chunk.usage is not None:
            assert chunk.choices == []
            usage.append(chunk.usage)
        for choice in chunk.choices:
            assert choice.index not in finish  # nothing after a choice's finish
            text[choice.index] += text_of(choice)
            if choice.finish_reason is not None:
                finish[choice.index] = choice.finish_reason
    return text, finish, usage


def test_three_choices_not_streamed(tiny_sdk: openai.OpenAI) -> None:
    completion = one(tiny_sdk, n=3, temperature=1.0, seed=5)
    assert [c.index for c in completion.choices] == [0, 1, 2]
    assert all(c.finish_reason == "length" and c.message.content for c in completion.choices)
    single = one(tiny_sdk, temperature=1.0, seed=5)
    assert single.usage is not None and completion.usage is not None
    # The prompt once, every choice's output.
    assert completion.usage.prompt_tokens == single.usage.prompt_tokens
    assert completion.usage.completion_tokens == 3 * TOKENS
    assert completion.usage.total_tokens == single.usage.prompt_tokens + 3 * TOKENS
    # With a seed, choice i samples with seed + i: they differ; choice 0 is the single request's.
    texts = [c.message.content for c in completion.choices]
    assert len(set(texts)) == 3
    assert texts[0] == single.choices[0].message.content


def test_temperature_zero_gives_the_same_choice_n_times(tiny_sdk: openai.OpenAI) -> None:
    completion = one(tiny_sdk, n=3, temperature=0.0)
    texts = {c.message.content for c in completion.choices}
    assert len(completion.choices) == 3 and len(texts) == 1 and texts != {""}


def test_three_choices_streamed(tiny_sdk: openai.OpenAI) -> None:
    stream = tiny_sdk.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=TOKENS,
        temperature=1.0,
        seed=5,
        n=3,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, finish, usage = folded(stream, lambda choice: choice.delta.content or "")
    assert finish == {0: "length", 1: "length", 2: "length"}
    assert len(set(text.values())) == 3
    [total] = usage  # once, summed
    assert total.completion_tokens == 3 * TOKENS
    # The same choices as the request not streamed.
    assert [text[i] for i in range(3)] == [
        c.message.content for c in one(tiny_sdk, n=3, temperature=1.0, seed=5).choices
    ]


def test_the_sdk_stream_helper_accumulates_every_choice(tiny_sdk: openai.OpenAI) -> None:
    with tiny_sdk.chat.completions.stream(
        model=MODEL,
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=TOKENS,
        temperature=0.0,
        n=2,
    ) as stream:
        for _event in stream:
            pass
        # (`get_final_completion` refuses a `length` finish: the snapshot is what it would parse.)
        final = stream.current_completion_snapshot
    assert [c.index for c in final.choices] == [0, 1]
    assert final.choices[0].message.content == final.choices[1].message.content


def test_completions_two_choices(tiny_sdk: openai.OpenAI) -> None:
    completion = tiny_sdk.completions.create(
        model=MODEL, prompt="Once upon a time", max_tokens=TOKENS, n=2, temperature=1.0, seed=3
    )
    assert [c.index for c in completion.choices] == [0, 1]
    assert completion.choices[0].text != completion.choices[1].text
    assert completion.usage is not None and completion.usage.completion_tokens == 2 * TOKENS
    stream = tiny_sdk.completions.create(
        model=MODEL,
        prompt="Once upon a time",
        max_tokens=TOKENS,
        n=2,
        temperature=1.0,
        seed=3,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, finish, usage = folded(stream, lambda choice: choice.text)
    assert finish == {0: "length", 1: "length"}
    assert [text[0], text[1]] == [c.text for c in completion.choices]
    [total] = usage
    assert total.prompt_tokens == completion.usage.prompt_tokens
    assert total.completion_tokens == 2 * TOKENS


@pytest.mark.parametrize("n", [0, 129])
def test_n_out_of_range_is_a_400(tiny_sdk: openai.OpenAI, n: int) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        one(tiny_sdk, n=n)
    assert caught.value.param == "n"  # type: ignore[attr-defined]
