"""An agent framework built on the Responses API (`openai-agents`) runs against Sluicegate.

A multi-turn agent with a Python function tool, through `OpenAIResponsesModel`: the model asks
for the tool, the framework runs it and sends the result back, the model answers; then a second
turn continues the conversation. Streamed and not, with the history sent back in full
(`to_input_list()`, reasoning items included) or chained with `previous_response_id`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import agents
import openai
import pytest
from agents import Agent, ModelSettings, OpenAIResponsesModel, RunConfig, Runner, function_tool
from responses_support import AGENT_FINAL, AGENT_REASONING, AGENT_THANKS, Server, running_server

pytestmark = pytest.mark.e2e

MODEL = "scripted"


@pytest.fixture(scope="module")
def agents_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    agents.set_tracing_disabled(True)
    with running_server(tmp_path_factory.mktemp("responses-agents"), models={MODEL: "responses.yaml"}) as s:
        yield s


@pytest.fixture
async def client(agents_server: Server) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=agents_server.api_url, api_key="unused", max_retries=0, timeout=30.0
    ) as sdk:
        yield sdk


class WeatherTool:
    """A function tool that records every call it gets."""

    def __init__(self) -> None:
        self.calls: list[str] = []

        @function_tool
        def get_weather(city: str) -> str:
            """Get the current weather for a city."""
            self.calls.append(city)
            return f"sunny and 22 degrees in {city}"

        self.tool = get_weather


def make_agent(client: openai.AsyncOpenAI, tool: WeatherTool) -> Agent:
    return Agent(
        name="Weather agent",
        instructions="You answer weather questions with the get_weather tool.",
        tools=[tool.tool],
        model=OpenAIResponsesModel(model=MODEL, openai_client=client),
        model_settings=ModelSettings(temperature=0.2),
    )


def item_types(items: list[dict[str, object]]) -> list[object]:
    return [item.get("type", "message") for item in items]


async def test_agent_runs_a_tool_round_trip_over_two_turns(client: openai.AsyncOpenAI) -> None:
    tool = WeatherTool()
    agent = make_agent(client, tool)

    first = await Runner.run(
        agent, "agent weather: is it nice in Paris?", run_config=RunConfig(tracing_disabled=True)
    )
    assert first.final_output == AGENT_FINAL
    assert tool.calls == ["Paris"]
    history = first.to_input_list()
    assert item_types(history) == ["message", "reasoning", "function_call", "function_call_output", "message"]
    assert history[1]["content"] == [{"type": "reasoning_text", "text": AGENT_REASONING}]  # type: ignore[typeddict-item]
    assert len(first.raw_responses) == 2  # the call, then the answer

    # Turn two sends the whole history back: messages, reasoning with content, call and result.
    second = await Runner.run(agent, [*history, {"role": "user", "content": "agent thanks"}])
    assert second.final_output == AGENT_THANKS
    assert tool.calls == ["Paris"]  # no second tool call
    usage = second.context_wrapper.usage
    assert usage.requests == 1 and usage.input_tokens > first.raw_responses[-1].usage.input_tokens


async def test_agent_streamed_with_previous_response_id(client: openai.AsyncOpenAI) -> None:
    tool = WeatherTool()
    agent = make_agent(client, tool)

    run = Runner.run_streamed(agent, "agent weather for Paris, please", auto_previous_response_id=True)
    kinds: list[str] = []
    text = ""
    async for event in run.stream_events():
        if event.type == "run_item_stream_event":
            kinds.append(event.item.type)
        elif event.type == "raw_response_event" and event.data.type == "response.output_text.delta":
            text += event.data.delta
    assert run.is_complete
    assert run.final_output == AGENT_FINAL and text == AGENT_FINAL
    assert tool.calls == ["Paris"]
    assert kinds == ["reasoning_item", "tool_call_item", "tool_call_output_item", "message_output_item"]
    assert run.last_response_id is not None and run.last_response_id.startswith("resp_")

    # The stored conversation carries the next turn: only the new message is sent.
    follow = Runner.run_streamed(agent, "agent thanks", previous_response_id=run.last_response_id)
    async for _ in follow.stream_events():
        pass
    assert follow.final_output == AGENT_THANKS
    assert tool.calls == ["Paris"]
    stored = await client.responses.retrieve(follow.last_response_id or "")
    assert stored.previous_response_id == run.last_response_id and stored.output_text == AGENT_THANKS
