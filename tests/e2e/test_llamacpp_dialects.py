"""Real llama.cpp behind every dialect: a tiny random-weight GGUF streams through Chat Completions,
Responses and LM Studio's REST API, driven by the clients users run. The model says nonsense,
so the assertions are about shape, counts, progress, cache reuse and reproducibility."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from e2e_support import Server
from lmstudio_support import stream_chat

pytestmark = pytest.mark.e2e

MODEL = "tiny"
LONG_PROMPT = "Please read the file and tell me what it says about the weather in Paris. " * 4


@pytest.fixture
def sdk(llama_server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=llama_server.api_url, api_key="unused", max_retries=0, timeout=60.0
    ) as client:
        yield client


def test_chat_completions_stream_with_logprobs(sdk: openai.OpenAI) -> None:
    stream = sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Hello there, what is the weather like?"}],
        max_tokens=24,
        logprobs=True,
        top_logprobs=3,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    usage = chunks[-1].usage
    assert text and finish == ["length"]
    assert usage is not None and usage.completion_tokens == 24 and usage.prompt_tokens > 10
    logprobs = [
        lp
        for c in chunks
        if c.choices and c.choices[0].logprobs
        for lp in c.choices[0].logprobs.content or []
    ]
    assert len(logprobs) == 24 and "".join(lp.token for lp in logprobs) == text
    values = [lp.logprob for lp in logprobs]
    assert all(v <= 0 for v in values) and len(set(values)) > 5  # real, varied log-probabilities
    for lp in logprobs:
        tops = [t.logprob for t in lp.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True) and lp.logprob <= tops[0] + 1e-6


def test_seed_reproduces_and_max_tokens_cuts(sdk: openai.OpenAI) -> None:
    def reply(seed: int) -> openai.types.chat.ChatCompletion:
        return sdk.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Tell me a story."}],
            max_tokens=16,
            temperature=1.0,
            seed=seed,
        )

    first, again, other = reply(11), reply(11), reply(12)
    assert first.choices[0].message.content == again.choices[0].message.content
    assert first.choices[0].message.content != other.choices[0].message.content
    assert first.choices[0].finish_reason == "length"
    assert first.usage is not None and first.usage.completion_tokens == 16


def test_responses_stream_and_cached_second_turn(sdk: openai.OpenAI) -> None:
    events = list(sdk.responses.create(model=MODEL, input=LONG_PROMPT, max_output_tokens=12, stream=True))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    # Cut by max_output_tokens (the model never ends a reply by itself): `response.incomplete`.
    assert events[-1].type == "response.incomplete"
    first = events[-1].response
    assert deltas and first.output_text == "".join(deltas)
    assert first.usage is not None and first.usage.output_tokens == 12
    second = sdk.responses.create(
        model=MODEL, input="And what about tomorrow?", previous_response_id=first.id, max_output_tokens=8
    )
    assert second.usage is not None
    # The first turn's prompt is a prefix of the second's: llama.cpp reuses its KV cache.
    cached = second.usage.input_tokens_details.cached_tokens
    assert cached >= first.usage.input_tokens - 1 > 20
    assert second.usage.input_tokens > first.usage.input_tokens


def test_lmstudio_load_and_prompt_progress(llama_server: Server) -> None:
    with httpx.Client(base_url=llama_server.base_url, timeout=60.0) as client:
        stream = stream_chat(client, {"model": "tiny-lms", "input": LONG_PROMPT, "max_output_tokens": 10})
    names = stream.names
    assert names[:2] == ["chat.start", "model_load.start"]
    loads = [e["progress"] for e in stream.of("model_load.progress")]
    assert len(loads) > 2 and loads == sorted(loads) and loads[-1] == 1.0  # llama.cpp's own callback
    prompt = [e["progress"] for e in stream.of("prompt_processing.progress")]
    # About 70 prompt tokens in batches of 16: one progress event per real llama_decode batch.
    assert len(prompt) >= 4 and prompt == sorted(prompt) and prompt[-1] == 1.0
    assert stream.text("message")
    assert stream.result["stats"]["total_output_tokens"] == 10
    assert stream.result["stats"]["model_load_time_seconds"] > 0


def test_listings_show_the_gguf(llama_server: Server) -> None:
    gguf = next(Path(llama_server.folder).parent.glob("gguf*/tiny.gguf"))
    with httpx.Client(base_url=llama_server.base_url, timeout=10.0) as client:
        lms = {m["key"]: m for m in client.get("/api/v1/models").json()["models"]}[MODEL]
        openai_model = client.get(f"/v1/models/{MODEL}").json()
    assert lms["architecture"] == "llama" and lms["format"] == "gguf"
    assert lms["quantization"] == {"name": "Q5_0", "bits_per_weight": 5}
    assert lms["size_bytes"] == gguf.stat().st_size
    assert lms["max_context_length"] == 2048
    assert lms["capabilities"]["trained_for_tool_use"] is True
    assert lms["capabilities"]["reasoning"] == {"allowed_options": ["off", "on"], "default": "on"}
    assert "nonsense" in lms["description"]
    meta = openai_model["meta"]
    assert (meta["architecture"], meta["quantization"], meta["size_bytes"]) == (
        "llama",
        "Q5_0",
        gguf.stat().st_size,
    )


def test_tools_render_and_what_cannot_be_honoured_is_a_400(llama_server: Server, sdk: openai.OpenAI) -> None:
    tools: list[openai.types.chat.ChatCompletionToolParam] = [
        {
            "type": "function",
            "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
        }
    ]
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "Weather?"}]
    reply = sdk.chat.completions.create(model=MODEL, messages=messages, tools=tools, max_tokens=4)
    assert reply.choices[0].finish_reason == "length" and reply.usage is not None
    assert reply.usage.prompt_tokens > 100  # the template rendered the tool block
    two = sdk.chat.completions.create(model=MODEL, messages=messages, tools=tools, n=2, max_tokens=4)
    assert [c.index for c in two.choices] == [0, 1]  # each choice may call the client's tools
    long = "Tell me about the weather in Paris, Rome, Berlin and every other city you know. " * 200
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": long}], max_tokens=4)
    assert caught.value.code == "context_length_exceeded"


def test_lmstudio_context_length_loads_just_in_time_then_caps_requests(llama_server: Server) -> None:
    with httpx.Client(base_url=llama_server.base_url, timeout=60.0) as client:
        # The chat that loads the model loads it with its `context_length`, not the configured 2048.
        stream = stream_chat(
            client, {"model": "tiny-ctx", "input": "hi", "context_length": 256, "max_output_tokens": 2}
        )
        assert "model_load.start" in stream.names
        listed = client.get("/api/v1/models").json()["models"]
        entry = next(m for m in listed if m["key"] == "tiny-ctx")
        assert [i["config"]["context_length"] for i in entry["loaded_instances"]] == [256]
        assert entry["max_context_length"] == 2048  # what a load may still ask for
        # So a prompt that 2048 would take no longer fits.
        long = {
            "model": "tiny-ctx",
            "messages": [{"role": "user", "content": LONG_PROMPT * 5}],
            "max_tokens": 2,
        }
        refused = client.post("/v1/chat/completions", json=long)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == "context_length_exceeded"

        # On the loaded model, a chat's `context_length` caps that chat: the prompt must fit...
        capped = client.post(
            "/api/v1/chat", json={"model": "tiny-ctx", "input": LONG_PROMPT, "context_length": 32}
        )
        assert capped.status_code == 400, capped.text
        assert (capped.json()["error"]["code"], capped.json()["error"]["param"]) == (
            "context_length_exceeded",
            "messages",
        )
        # ...and prompt plus output stay within it (the model never ends a reply by itself).
        short = stream_chat(
            client, {"model": "tiny-ctx", "input": "hi", "context_length": 64, "max_output_tokens": 200}
        )
        stats = short.result["stats"]
        assert 0 < stats["total_output_tokens"] < 200
        assert stats["input_tokens"] + stats["total_output_tokens"] == 64
        uncapped = stream_chat(client, {"model": "tiny-ctx", "input": "hi", "max_output_tokens": 100})
        assert uncapped.result["stats"]["total_output_tokens"] == 100
