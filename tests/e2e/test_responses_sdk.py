"""The Responses API driven by the official `openai` SDK against a real server process.

Streaming (`create(stream=True)` and the `responses.stream()` helper, which checks event order
and item identity), non-streaming, retrieve, delete, input items, multi-turn conversations
with `previous_response_id`, client function tools, reasoning, refusals, and the terminal states
(incomplete, failed).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.responses import Response
from responses_support import (
    FAIL_MESSAGE,
    HELLO,
    HELLO_WORDS,
    REFUSAL,
    THINK_CONTENT,
    THINK_REASONING,
    TOOL_ANSWER,
    WEATHER_ARGS,
    WEATHER_REASONING,
    Server,
    poll,
    running_server,
)

from sluicegate.engines.scripted import words

pytestmark = pytest.mark.e2e

MODEL = "scripted"
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
    "strict": True,
}
TIME_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "get_time",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": False,
}


@pytest.fixture(scope="module")
def responses_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(tmp_path_factory.mktemp("responses-sdk"), models={MODEL: "responses.yaml"}) as server:
        yield server


@pytest.fixture
def sdk(responses_server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=responses_server.api_url, api_key="unused", max_retries=0, timeout=30.0) as c:
        yield c


def prompt_cost(*texts: str) -> int:
    """The scripted engine's prompt token count for messages with these texts."""
    return sum(len(words(text)) + 4 for text in texts)


def summary(response: Response) -> dict[str, Any]:
    """What must agree between a streamed and a non-streamed response (no ids, no timestamps)."""
    items: list[tuple[Any, ...]] = []
    for item in response.output:
        if item.type == "message":
            parts = [(p.type, p.text if p.type == "output_text" else p.refusal) for p in item.content]
            items.append(("message", item.role, item.status, tuple(parts)))
        elif item.type == "reasoning":
            items.append(("reasoning", tuple((p.type, p.text) for p in item.content or [])))
        elif item.type == "function_call":
            items.append(("function_call", item.name, item.arguments, item.status))
        else:
            items.append((item.type,))
    assert response.usage is not None
    return {
        "status": response.status,
        "output": items,
        "output_text": response.output_text,
        "usage": response.usage.model_dump(),
        "error": response.error,
        "incomplete_details": response.incomplete_details,
    }


# --- streaming ------------------------------------------------------------------------------


def test_create_stream_true_yields_the_full_text_lifecycle(sdk: openai.OpenAI) -> None:
    stream = sdk.responses.create(model=MODEL, input="Hello there", stream=True)
    events = list(stream)
    types = [e.type for e in events]
    assert types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * len(HELLO_WORDS),
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.delta for e in events if e.type == "response.output_text.delta"] == HELLO_WORDS
    created, final = events[0].response, events[-1].response
    assert created.status == "in_progress" and created.output == [] and created.id.startswith("resp_")
    assert final.id == created.id and final.status == "completed"
    assert final.output_text == HELLO
    assert final.usage is not None
    assert final.usage.input_tokens == prompt_cost("Hello there")
    assert final.usage.output_tokens == len(HELLO_WORDS)
    assert final.usage.total_tokens == final.usage.input_tokens + final.usage.output_tokens


PROMPTS = {
    "text": ("Hello", []),
    "reasoning": ("Please think about it", []),
    "tool_call": ("What is the weather in Paris?", [WEATHER_TOOL]),
    "two_tool_calls": ("Weather in two cities please", [WEATHER_TOOL, TIME_TOOL]),
    "refusal": ("Tell me the secret", []),
}


@pytest.mark.parametrize("case", list(PROMPTS))
def test_stream_helper_final_response_equals_non_streamed(sdk: openai.OpenAI, case: str) -> None:
    prompt, tools = PROMPTS[case]
    with sdk.responses.stream(model=MODEL, input=prompt, tools=tools) as stream:
        events = list(stream)  # the helper checks order and identity; it must raise nothing
        streamed = stream.get_final_response()
    plain = sdk.responses.create(model=MODEL, input=prompt, tools=tools)
    assert events[-1].type == "response.completed"
    assert streamed.id != plain.id
    assert summary(streamed) == summary(plain)
    assert streamed.status == "completed"
    # The streamed final response is the stored one.
    assert summary(sdk.responses.retrieve(streamed.id)) == summary(streamed)


def test_non_streaming_create_then_retrieve_and_delete(sdk: openai.OpenAI) -> None:
    created = sdk.responses.create(model=MODEL, input="Hello", metadata={"suite": "e2e"}, temperature=0.5)
    assert created.status == "completed" and created.output_text == HELLO
    assert created.metadata == {"suite": "e2e"} and created.temperature == 0.5
    (message,) = created.output
    assert message.type == "message" and message.id.startswith("msg_")

    retrieved = sdk.responses.retrieve(created.id)
    assert retrieved.model_dump() == created.model_dump()

    assert sdk.responses.delete(created.id) is None
    with pytest.raises(openai.NotFoundError) as caught:
        sdk.responses.retrieve(created.id)
    assert created.id in caught.value.message
    with pytest.raises(openai.NotFoundError):
        sdk.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.input_items.list(created.id)
    # Its items are gone too: nothing can continue from it or refer to it.
    with pytest.raises(openai.NotFoundError):
        sdk.responses.create(model=MODEL, input="again", previous_response_id=created.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.create(model=MODEL, input=[{"type": "item_reference", "id": message.id}])


def test_store_false_is_not_retrievable(sdk: openai.OpenAI) -> None:
    created = sdk.responses.create(model=MODEL, input="Hello", store=False)
    assert created.output_text == HELLO
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(created.id)


def test_input_items_list_order_limit_and_pagination(sdk: openai.OpenAI) -> None:
    given = [
        {"role": "developer", "content": "Answer briefly."},
        {"role": "user", "content": "first"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        {
            "type": "message",
            "role": "user",
            "id": "msg_client_given",
            "content": [{"type": "input_text", "text": "last"}],
        },
    ]
    created = sdk.responses.create(model=MODEL, input=given)  # type: ignore[arg-type]

    asc = sdk.responses.input_items.list(created.id, order="asc")
    assert [(i.role, i.content[0].text) for i in asc.data] == [  # type: ignore[union-attr]
        ("developer", "Answer briefly."),
        ("user", "first"),
        ("assistant", "ok"),
        ("user", "last"),
    ]
    ids = [i.id for i in asc.data]
    assert ids[-1] == "msg_client_given" and len(set(ids)) == 4
    assert all(i.id.startswith("msg_") for i in asc.data)
    assert asc.has_more is False and asc.first_id == ids[0] and asc.last_id == ids[-1]

    desc = sdk.responses.input_items.list(created.id)  # the default order is newest first
    assert [i.id for i in desc.data] == ids[::-1]

    page = sdk.responses.input_items.list(created.id, order="asc", limit=3)
    assert [i.id for i in page.data] == ids[:3] and page.has_more is True
    # Auto-pagination follows `after` through every page, in order, each item once.
    assert [i.id for i in sdk.responses.input_items.list(created.id, order="asc", limit=1)] == ids
    assert [i.id for i in sdk.responses.input_items.list(created.id, after=ids[2])] == ids[1::-1]


def test_multi_turn_with_previous_response_id_sends_the_history(sdk: openai.OpenAI) -> None:
    first = sdk.responses.create(model=MODEL, input="My name is Ada.", instructions="Be brief.")
    assert first.usage is not None
    assert first.usage.input_tokens == prompt_cost("Be brief.", "My name is Ada.")

    second = sdk.responses.create(model=MODEL, input="What is my name?", previous_response_id=first.id)
    assert second.previous_response_id == first.id
    assert second.output_text == HELLO
    # The model saw turn one (user and assistant) and this turn; instructions do not carry over.
    assert second.usage is not None
    assert second.usage.input_tokens == prompt_cost("My name is Ada.", HELLO, "What is my name?")

    third = sdk.responses.create(
        model=MODEL, input="And now?", previous_response_id=second.id, instructions="Be brief."
    )
    assert third.usage is not None
    assert third.usage.input_tokens == prompt_cost(
        "Be brief.", "My name is Ada.", HELLO, "What is my name?", HELLO, "And now?"
    )

    # The same conversation sent in full, without stored state, costs exactly the same.
    manual = sdk.responses.create(
        model=MODEL,
        instructions="Be brief.",
        input=[
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": HELLO},
            {"role": "user", "content": "What is my name?"},
            {"role": "assistant", "content": HELLO},
            {"role": "user", "content": "And now?"},
        ],
    )
    assert manual.usage is not None and manual.usage.input_tokens == third.usage.input_tokens
    # input_items lists only each turn's own input.
    assert [i.content[0].text for i in sdk.responses.input_items.list(third.id).data] == ["And now?"]  # type: ignore[union-attr]


def test_streamed_turn_continues_a_conversation(sdk: openai.OpenAI) -> None:
    first = sdk.responses.create(model=MODEL, input="Please think about it")
    with sdk.responses.stream(model=MODEL, input="Hello again", previous_response_id=first.id) as stream:
        final = stream.get_final_response()
    assert final.output_text == HELLO
    assert final.usage is not None
    # Reasoning rides along with the assistant turn; only message text is counted.
    assert final.usage.input_tokens == prompt_cost("Please think about it", THINK_CONTENT, "Hello again")


def _weather_call(sdk: openai.OpenAI) -> tuple[Response, Any]:
    response = sdk.responses.create(model=MODEL, input="What is the weather in Paris?", tools=[WEATHER_TOOL])
    assert response.status == "completed"  # a client tool call ends the response, completed
    reasoning, call = response.output
    assert reasoning.type == "reasoning" and reasoning.id.startswith("rs_")
    assert reasoning.content is not None and reasoning.content[0].text == WEATHER_REASONING
    assert call.type == "function_call" and call.name == "get_weather"
    assert call.id is not None and call.id.startswith("fc_") and call.call_id.startswith("call_")
    assert json.loads(call.arguments) == WEATHER_ARGS
    return response, call


def synthesised(server: Server) -> str:
    """The server's log lines about tool calls it had to make up (found in no history or store)."""
    return "\n".join(line for line in server.output().splitlines() if "synthesising the missing call" in line)


def test_function_tool_round_trip_with_previous_response_id(
    responses_server: Server, sdk: openai.OpenAI
) -> None:
    first, call = _weather_call(sdk)
    result = {"type": "function_call_output", "call_id": call.call_id, "output": '{"temperature": 22}'}
    second = sdk.responses.create(
        model=MODEL, previous_response_id=first.id, input=[result], tools=[WEATHER_TOOL]
    )
    assert second.status == "completed"
    assert second.output_text == TOOL_ANSWER  # the script answers this way only after a tool result
    (item,) = sdk.responses.input_items.list(second.id).data
    assert item.type == "function_call_output" and item.call_id == call.call_id

    # Without previous_response_id the server finds the call in the store; the only difference
    # the model sees is the user turn it did not get.
    alone = sdk.responses.create(model=MODEL, input=[result], tools=[WEATHER_TOOL])
    assert alone.output_text == TOOL_ANSWER
    assert call.call_id not in synthesised(responses_server)  # the stored call was used
    assert second.usage is not None and alone.usage is not None
    assert second.usage.input_tokens - alone.usage.input_tokens == prompt_cost(
        "What is the weather in Paris?"
    )

    # The client may also send the whole turn itself, the call included (stateless clients).
    manual = sdk.responses.create(
        model=MODEL,
        input=[
            {"role": "user", "content": "What is the weather in Paris?"},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            result,
        ],
        tools=[WEATHER_TOOL],
        store=False,
    )
    assert manual.output_text == TOOL_ANSWER
    assert manual.usage is not None and manual.usage.input_tokens == second.usage.input_tokens


def test_tool_result_for_a_call_nobody_knows_still_gets_an_answer(
    responses_server: Server, sdk: openai.OpenAI
) -> None:
    response = sdk.responses.create(
        model=MODEL,
        input=[{"type": "function_call_output", "call_id": "call_never_made", "output": "42"}],
    )
    assert response.output_text == TOOL_ANSWER
    poll(lambda: "call_never_made" in synthesised(responses_server), timeout=10)


def test_duplicate_tool_results_are_dropped(sdk: openai.OpenAI) -> None:
    first, call = _weather_call(sdk)
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
    once = sdk.responses.create(model=MODEL, previous_response_id=first.id, input=[result])
    twice = sdk.responses.create(model=MODEL, previous_response_id=first.id, input=[result, result])
    assert once.usage is not None and twice.usage is not None
    assert twice.usage.input_tokens == once.usage.input_tokens
    assert twice.output_text == TOOL_ANSWER


def test_streamed_function_call_events(sdk: openai.OpenAI) -> None:
    with sdk.responses.stream(
        model=MODEL, input="What is the weather in Paris?", tools=[WEATHER_TOOL]
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    added = [e.item for e in events if e.type == "response.output_item.added"]
    assert [(i.type, getattr(i, "arguments", None)) for i in added] == [
        ("reasoning", None),
        ("function_call", ""),
    ]
    arg_events = [e for e in events if e.type == "response.function_call_arguments.delta"]
    deltas = [e.delta for e in arg_events]
    assert len(deltas) > 1 and json.loads("".join(deltas)) == WEATHER_ARGS
    # The helper's running snapshot (item arguments + deltas) is exactly the arguments so far.
    assert [e.snapshot for e in arg_events] == list(itertools.accumulate(deltas))
    (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done.name == "get_weather" and json.loads(done.arguments) == WEATHER_ARGS
    call = final.output[1]
    assert call.type == "function_call" and done.item_id == call.id
    # A strict tool: the helper parsed the arguments for us.
    assert call.parsed_arguments == WEATHER_ARGS  # type: ignore[union-attr]


def test_reasoning_is_streamed_as_a_reasoning_item(sdk: openai.OpenAI) -> None:
    events = list(sdk.responses.create(model=MODEL, input="Please think about it", stream=True))
    types = [e.type for e in events]
    steps = len(words(THINK_REASONING))
    assert types[2 : 4 + steps + 3] == [
        "response.output_item.added",
        "response.content_part.added",
        *["response.reasoning_text.delta"] * steps,
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    added = events[2]
    assert added.item.type == "reasoning" and added.output_index == 0
    assert events[3].part.type == "reasoning_text"
    reasoning_deltas = [e for e in events if e.type == "response.reasoning_text.delta"]
    assert "".join(e.delta for e in reasoning_deltas) == THINK_REASONING
    assert all(e.item_id == added.item.id for e in reasoning_deltas)
    (done,) = [e for e in events if e.type == "response.reasoning_text.done"]
    assert done.text == THINK_REASONING
    final = events[-1].response
    reasoning, message = final.output
    assert reasoning.type == "reasoning" and reasoning.id == added.item.id
    assert reasoning.content is not None and reasoning.content[0].text == THINK_REASONING
    assert message.type == "message" and final.output_text == THINK_CONTENT
    assert final.usage is not None
    assert final.usage.output_tokens_details.reasoning_tokens == len(words(THINK_REASONING))
    assert final.usage.output_tokens == len(words(THINK_REASONING)) + len(words(THINK_CONTENT))
    assert final.usage.input_tokens_details.cached_tokens == 5


def test_refusal_streams_refusal_events(sdk: openai.OpenAI) -> None:
    events = list(sdk.responses.create(model=MODEL, input="Tell me the secret", stream=True))
    deltas = [e.delta for e in events if e.type == "response.refusal.delta"]
    assert "".join(deltas) == REFUSAL and len(deltas) == len(words(REFUSAL))
    (done,) = [e for e in events if e.type == "response.refusal.done"]
    assert done.refusal == REFUSAL
    assert not [e for e in events if e.type.startswith("response.output_text")]
    final = events[-1].response
    assert final.status == "completed"
    (message,) = final.output
    assert message.type == "message"
    assert [(p.type, p.refusal) for p in message.content] == [("refusal", REFUSAL)]  # type: ignore[union-attr]


def test_max_output_tokens_ends_incomplete(sdk: openai.OpenAI) -> None:
    events = list(sdk.responses.create(model=MODEL, input="Hello", max_output_tokens=3, stream=True))
    last = events[-1]
    assert last.type == "response.incomplete"
    assert not [e for e in events if e.type == "response.completed"]
    response = last.response
    assert response.status == "incomplete"
    assert (
        response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"
    )
    assert response.output_text == "".join(HELLO_WORDS[:3])
    assert response.usage is not None and response.usage.output_tokens == 3
    assert response.max_output_tokens == 3

    plain = sdk.responses.create(model=MODEL, input="Hello", max_output_tokens=3)
    assert plain.status == "incomplete" and plain.output_text == response.output_text
    stored = sdk.responses.retrieve(response.id)
    assert stored.status == "incomplete" and stored.incomplete_details is not None
    assert stored.incomplete_details.reason == "max_output_tokens"


def test_mid_stream_engine_error_fails_the_response(sdk: openai.OpenAI) -> None:
    events = list(sdk.responses.create(model=MODEL, input="this will fail", stream=True))
    last = events[-1]
    assert last.type == "response.failed"
    assert [e.delta for e in events if e.type == "response.output_text.delta"] == ["This", " will", " break"]
    response = last.response
    assert response.status == "failed"
    assert response.error is not None
    assert response.error.code == "model_error" and response.error.message == FAIL_MESSAGE
    stored = sdk.responses.retrieve(response.id)
    assert stored.status == "failed" and stored.error is not None and stored.error.code == "model_error"
    assert stored.output_text == "This will break"

    with pytest.raises(openai.InternalServerError) as caught:
        sdk.responses.create(model=MODEL, input="this will fail")
    assert caught.value.status_code == 500
    assert caught.value.code == "model_error" and FAIL_MESSAGE in caught.value.message
    # The failed non-streamed response is stored too, under the id the error carries.
    failed_id = caught.value.response.headers["x-request-id"]
    assert failed_id.startswith("resp_")
    assert sdk.responses.retrieve(failed_id).status == "failed"


def test_stream_helper_raises_nothing_for_a_failure_but_has_no_final_response(sdk: openai.OpenAI) -> None:
    with sdk.responses.stream(model=MODEL, input="this will fail") as stream:
        events = list(stream)
        assert events[-1].type == "response.failed"
        with pytest.raises(RuntimeError, match=r"response\.completed"):
            stream.get_final_response()


def test_unknown_model_is_a_clean_404(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        sdk.responses.create(model="no-such-model", input="Hello")
    assert "no-such-model" in caught.value.message


def test_the_store_is_a_file_under_the_data_dir(responses_server: Server, sdk: openai.OpenAI) -> None:
    import sqlite3

    created = sdk.responses.create(model=MODEL, input="Hello")
    path: Path = responses_server.store_file
    assert path.is_file()
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        (row,) = db.execute("SELECT response FROM responses WHERE id = ?", (created.id,)).fetchall()
    assert json.loads(row[0])["id"] == created.id
