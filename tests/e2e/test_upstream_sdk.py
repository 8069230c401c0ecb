"""Gateway mode, what works: a real `sluicegate serve` in front of the fake upstream, driven by
the official openai SDK (its stream helpers included) through Chat Completions and Responses,
and by an LM Studio client for prompt processing. Each upstream shape becomes what the
dialect's own clients expect."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from conftest import StartServer
from e2e_support import Server, stream_raw
from fake_upstream import FakeUpstream, Scenario, chunk, text_stream, usage
from lmstudio_support import stream_chat
from upstream_support import REPLICA_HEADER, upstream_model

pytestmark = pytest.mark.e2e

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
RESPONSES_WEATHER = {"type": "function", **WEATHER["function"]}


def tool_start(index: int, call_id: str | None, name: str, arguments: str = "") -> bytes:
    call: dict[str, Any] = {
        "index": index,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }
    if call_id:
        call["id"] = call_id
    return chunk({"tool_calls": [call]})


def tool_args(index: int, arguments: str) -> bytes:
    return chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})


SCENARIOS = {
    "reason": Scenario(
        frames=[
            chunk({"role": "assistant", "content": ""}),
            chunk({"reasoning_content": "The user"}),
            chunk({"reasoning_content": " greets."}),
            chunk({"content": "Hi"}),
            chunk({"content": " there"}),
            chunk(finish_reason="stop"),
            chunk(choices=False, usage=usage(21, 6, cached=16, reasoning=4)),
        ]
    ),
    "vllm-reasoning": Scenario(  # vLLM since late 2025: `reasoning`, usage on every chunk
        frames=[
            chunk({"role": "assistant", "content": ""}, usage=usage(9, 0)),
            chunk({"reasoning": "Hmm."}, usage=usage(9, 1)),
            chunk({"content": "Done."}, usage=usage(9, 2)),
            chunk(finish_reason="stop", usage=usage(9, 2)),
        ]
    ),
    "tools": Scenario(
        frames=[
            chunk({"role": "assistant", "content": None}),
            tool_start(0, "call_paris", "get_weather"),
            tool_args(0, '{"city":'),
            tool_args(0, '"Paris"}'),
            tool_start(1, "call_rome", "get_weather"),
            tool_args(1, '{"city":"Rome"}'),
            chunk(finish_reason="tool_calls"),
            chunk(choices=False, usage=usage(30, 20)),
        ]
    ),
    # llama-server style: no id ever, the name repeated, all arguments in the last delta
    "tools-bare": Scenario(
        frames=[
            chunk({"role": "assistant", "content": None}),
            chunk({"tool_calls": [{"index": 0, "function": {"name": "get_weather"}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"name": "get_weather", "arguments": ""}}]}),
            chunk(
                {
                    "tool_calls": [
                        {"index": 0, "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}
                    ]
                }
            ),
            chunk(finish_reason="tool_calls"),
        ]
    ),
    "legacy-call": Scenario(
        frames=[
            chunk(
                {
                    "role": "assistant",
                    "content": None,
                    "function_call": {"name": "get_weather", "arguments": ""},
                }
            ),
            chunk({"function_call": {"arguments": '{"city":"Lima"}'}}),
            chunk(finish_reason="function_call"),
        ]
    ),
    "refusal": Scenario(
        frames=[
            chunk({"role": "assistant", "content": None, "refusal": ""}),
            chunk({"refusal": "I can't"}),
            chunk({"refusal": " help."}),
            chunk(finish_reason="stop"),
        ]
    ),
    "logprobs": Scenario(
        frames=[
            chunk({"role": "assistant", "content": ""}, logprobs={"content": [], "refusal": None}),
            chunk(
                {"content": "Yes"},
                logprobs={
                    "content": [
                        {
                            "token": "Yes",
                            "logprob": -0.25,
                            "bytes": [89, 101, 115],
                            "top_logprobs": [
                                {"token": "Yes", "logprob": -0.25, "bytes": [89, 101, 115]},
                                {"token": "No", "logprob": -1.5, "bytes": [78, 111]},
                            ],
                        }
                    ],
                    "refusal": None,
                },
            ),
            chunk(finish_reason="stop"),
        ]
    ),
    "length": Scenario(frames=text_stream(["cut", " off"], finish="length")),
    "think": Scenario(
        frames=[
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "<think>"}),
            chunk({"content": "Weighing it."}),
            chunk({"content": "</think>"}),
            chunk({"content": "Yes."}),
            chunk(finish_reason="stop"),
        ]
    ),
    "slow-prompt": Scenario(frames=text_stream(["ready"]), body_delay=0.4),
    "split": Scenario(frames=text_stream(["split", " across", " writes"]), split=True),
}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream(name="sdk") as upstream:
        upstream.scenarios.update(SCENARIOS)
        yield upstream


@pytest.fixture(scope="module")
def server(start_server: StartServer, fake: FakeUpstream) -> Server:
    models = [upstream_model(name, fake, health_check_interval=0) for name in SCENARIOS]
    models.append(upstream_model("plain", fake, scenario="hello", health_check_interval=0))
    models.append(
        upstream_model("think-raw", fake, scenario="think", think_tags=False, health_check_interval=0)
    )
    return start_server({"heartbeat_seconds": 5}, models)


@pytest.fixture
def client(server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0, timeout=30.0) as sdk:
        yield sdk


def ask(text: str = "Hi") -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


# --- Chat Completions ------------------------------------------------------------------------


def test_chat_stream_helper_gets_content_and_usage(client: openai.OpenAI, fake: FakeUpstream) -> None:
    with client.chat.completions.stream(
        model="plain", messages=ask(), stream_options={"include_usage": True}
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "content.delta"]
        final = stream.get_final_completion()
    assert "".join(deltas) == "Hello from sdk"
    assert final.choices[0].message.content == "Hello from sdk"
    assert final.choices[0].finish_reason == "stop"
    assert final.usage is not None and (final.usage.prompt_tokens, final.usage.completion_tokens) == (10, 3)
    sent = fake.chat_requests("hello")[-1].body
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["messages"] == ask()


def test_chat_reasoning_cached_and_reasoning_tokens(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(
        model="reason", messages=ask(), stream_options={"include_usage": True}
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert message.content == "Hi there"
    assert (message.model_extra or {}).get("reasoning_content") == "The user greets."
    assert final.usage is not None
    assert (
        final.usage.prompt_tokens_details is not None
        and final.usage.prompt_tokens_details.cached_tokens == 16
    )
    assert final.usage.completion_tokens_details is not None
    assert final.usage.completion_tokens_details.reasoning_tokens == 4


def test_chat_vllm_reasoning_field_and_usage_on_every_chunk(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model="vllm-reasoning", messages=ask())
    message = completion.choices[0].message
    assert message.content == "Done."
    assert (message.model_extra or {}).get("reasoning_content") == "Hmm."
    assert completion.usage is not None and completion.usage.completion_tokens == 2


def test_think_tags_in_content_are_reasoning_unless_turned_off(client: openai.OpenAI) -> None:
    parsed = client.chat.completions.create(model="think", messages=ask()).choices[0].message
    assert (parsed.content, (parsed.model_extra or {}).get("reasoning_content")) == ("Yes.", "Weighing it.")
    raw = client.chat.completions.create(model="think-raw", messages=ask()).choices[0].message
    assert raw.content == "<think>Weighing it.</think>Yes."
    with client.responses.stream(model="think", input="Hi") as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert [o.type for o in final.output] == ["reasoning", "message"] and final.output_text == "Yes."


def test_chat_parallel_tool_calls_keep_the_upstream_ids(client: openai.OpenAI, fake: FakeUpstream) -> None:
    with client.chat.completions.stream(
        model="tools", messages=ask("Paris and Rome?"), tools=[WEATHER]
    ) as stream:  # type: ignore[list-item]
        for _ in stream:
            pass
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in calls] == [  # type: ignore[union-attr]
        ("call_paris", "get_weather", {"city": "Paris"}),
        ("call_rome", "get_weather", {"city": "Rome"}),
    ]
    sent = fake.chat_requests("tools")[-1].body
    assert sent["tools"] == [WEATHER] and sent["tool_choice"] == "auto"


@pytest.mark.parametrize(("model", "city"), [("tools-bare", "Oslo"), ("legacy-call", "Lima")])
def test_chat_tool_calls_without_ids_or_in_the_legacy_shape(
    client: openai.OpenAI, model: str, city: str
) -> None:
    with client.chat.completions.stream(model=model, messages=ask(), tools=[WEATHER]) as stream:  # type: ignore[list-item]
        for _ in stream:
            pass
        final = stream.get_final_completion()
    (call,) = final.choices[0].message.tool_calls or []
    assert call.id.startswith("call_") and len(call.id) > 10  # synthesized once, not concatenated
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"city": city}  # type: ignore[union-attr]
    assert final.choices[0].finish_reason == "tool_calls"


def test_chat_refusal(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(model="refusal", messages=ask()) as stream:
        events = [e.type for e in stream]
        final = stream.get_final_completion()
    assert "refusal.done" in events
    assert final.choices[0].message.refusal == "I can't help."


def test_chat_logprobs(client: openai.OpenAI, fake: FakeUpstream) -> None:
    completion = client.chat.completions.create(
        model="logprobs", messages=ask(), logprobs=True, top_logprobs=2
    )
    logprobs = completion.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None
    (entry,) = logprobs.content
    assert (entry.token, entry.logprob) == ("Yes", -0.25)
    assert [t.token for t in entry.top_logprobs] == ["Yes", "No"]
    sent = fake.chat_requests("logprobs")[-1].body
    assert sent["logprobs"] is True and sent["top_logprobs"] == 2


def test_chat_finish_length_reaches_the_sdk(client: openai.OpenAI) -> None:
    with (
        pytest.raises(openai.LengthFinishReasonError),
        client.chat.completions.stream(model="length", messages=ask()) as stream,
    ):
        stream.get_final_completion()


def test_frames_split_across_writes_and_the_replica_header(server: Server, fake: FakeUpstream) -> None:
    raw = stream_raw(server.base_url, {"model": "split", "stream": True, "messages": ask()})
    assert raw.response.headers[REPLICA_HEADER] == fake.base_url
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in raw.chunks if c["choices"])
    assert text == "split across writes"
    assert raw.frames[-1].is_done
    plain = httpx.post(
        server.api_url + "/chat/completions", json={"model": "split", "messages": ask()}, timeout=10
    )
    assert plain.status_code == 200 and plain.headers[REPLICA_HEADER] == fake.base_url


def test_connections_to_the_upstream_are_reused(client: openai.OpenAI, fake: FakeUpstream) -> None:
    client.chat.completions.create(model="plain", messages=ask())  # a connection in the pool
    before = fake.connections
    for _ in range(3):
        with client.chat.completions.stream(model="plain", messages=ask()) as stream:
            stream.get_final_completion()
    assert fake.connections == before


# --- Responses -------------------------------------------------------------------------------


def test_responses_stream_helper_reasoning_text_and_usage(client: openai.OpenAI, fake: FakeUpstream) -> None:
    with client.responses.stream(model="reason", input="Hi", instructions="Be kind.") as stream:
        types = [e.type for e in stream]
        final = stream.get_final_response()
    assert final.status == "completed"
    assert [o.type for o in final.output] == ["reasoning", "message"]
    assert final.output_text == "Hi there"
    assert "response.reasoning_text.delta" in types
    assert final.usage is not None and final.usage.input_tokens_details.cached_tokens == 16
    assert final.usage.output_tokens_details.reasoning_tokens == 4
    sent = fake.chat_requests("reason")[-1].body
    assert sent["messages"] == [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"}]


def test_responses_function_calls_and_their_results_reach_the_upstream(
    client: openai.OpenAI, fake: FakeUpstream
) -> None:
    with client.responses.stream(model="tools", input="Paris and Rome?", tools=[RESPONSES_WEATHER]) as stream:  # type: ignore[list-item]
        for _ in stream:
            pass
        final = stream.get_final_response()
    calls = [o for o in final.output if o.type == "function_call"]
    assert [(c.call_id, json.loads(c.arguments)) for c in calls] == [  # type: ignore[union-attr]
        ("call_paris", {"city": "Paris"}),
        ("call_rome", {"city": "Rome"}),
    ]
    follow = client.responses.create(
        model="plain",
        previous_response_id=final.id,
        input=[{"type": "function_call_output", "call_id": "call_paris", "output": "sunny"}],
    )
    assert follow.output_text == "Hello from sdk"
    messages = fake.chat_requests("hello")[-1].body["messages"]
    assert messages[-1] == {"role": "tool", "content": "sunny", "tool_call_id": "call_paris"}
    assistant = next(m for m in messages if m["role"] == "assistant")
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_paris", "call_rome"]


def test_responses_refusal(client: openai.OpenAI) -> None:
    with client.responses.stream(model="refusal", input="Hi") as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    (message,) = final.output
    assert message.type == "message"
    assert [c.type for c in message.content] == ["refusal"]


# --- LM Studio -------------------------------------------------------------------------------


def test_lmstudio_sees_prompt_processing_while_the_upstream_is_silent(server: Server) -> None:
    with httpx.Client(base_url=server.base_url, timeout=30) as lms:
        stream = stream_chat(lms, {"model": "slow-prompt", "input": "Hi"})
    names = stream.names
    assert (
        names.index("prompt_processing.start")
        < names.index("prompt_processing.end")
        < names.index("message.start")
    )
    assert stream.text("message") == "ready"
