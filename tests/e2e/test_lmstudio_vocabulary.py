"""Both revisions of the LM Studio event vocabulary, chosen by config and per request.

The model calls a tool no provider offers (there are no integrations yet): the current
vocabulary reports a lone `tool_call.failure` (`metadata.type` `invalid_name`), the earlier one a
lone `tool_call.result`. Either way `chat.end.result` and the non-streaming body carry an
`invalid_tool_call` output item.
"""

from __future__ import annotations

import httpx
import pytest
from lmstudio_support import (
    BROWSER_ARGUMENTS,
    BROWSER_REASONING,
    Vocabulary,
    assert_lmstudio_error,
    chat_body,
    comparable,
    lms,
    lms_server,
    lms_v0,
    lms_v0_server,
    post_chat,
    stream_chat,
)

pytestmark = pytest.mark.e2e
__all__ = ["lms", "lms_server", "lms_v0", "lms_v0_server"]  # fixtures

BROWSER = {"model": "lms-chat", "input": "Please open the browser."}
REASON = "Cannot find tool with name open_browser."
FAILURE = {
    "type": "tool_call.failure",
    "reason": REASON,
    "metadata": {"type": "invalid_name", "tool_name": "open_browser"},
}
INVALID_TOOL_CALL = {
    "type": "invalid_tool_call",
    "reason": REASON,
    "metadata": {"type": "invalid_name", "tool_name": "open_browser"},
}


def tool_events(names: list[str]) -> list[str]:
    return [n for n in names if n.startswith("tool_call.")]


def assert_current(client: httpx.Client, **kwargs: dict[str, str]) -> None:
    stream = stream_chat(client, BROWSER, vocabulary="current", **kwargs)
    assert tool_events(stream.names) == ["tool_call.failure"]
    assert stream.of("tool_call.failure") == [FAILURE]
    assert stream.result["output"] == [{"type": "reasoning", "content": BROWSER_REASONING}, INVALID_TOOL_CALL]


def assert_v0(client: httpx.Client, **kwargs: dict[str, str]) -> None:
    stream = stream_chat(client, BROWSER, vocabulary="v0", **kwargs)
    assert tool_events(stream.names) == ["tool_call.result"]
    (result,) = stream.of("tool_call.result")
    assert result["tool"] == "open_browser"
    assert result["arguments"] == BROWSER_ARGUMENTS
    assert result["output"] == REASON
    # The earlier revision has no failure item either way: the body is the same as ever.
    assert stream.result["output"] == [{"type": "reasoning", "content": BROWSER_REASONING}, INVALID_TOOL_CALL]


def test_the_current_vocabulary_is_the_default(lms: httpx.Client) -> None:
    assert_current(lms)


@pytest.mark.parametrize(
    "selector",
    [{"params": {"events": "v0"}}, {"headers": {"X-Sluicegate-Events": "v0"}}],
    ids=["query", "header"],
)
def test_a_request_can_ask_for_v0(lms: httpx.Client, selector: dict[str, dict[str, str]]) -> None:
    assert_v0(lms, **selector)


def test_v0_by_config(lms_v0: httpx.Client) -> None:
    assert_v0(lms_v0)


@pytest.mark.parametrize(
    "selector",
    [{"params": {"events": "current"}}, {"headers": {"X-Sluicegate-Events": "current"}}],
    ids=["query", "header"],
)
def test_a_request_can_ask_for_current_on_a_v0_server(
    lms_v0: httpx.Client, selector: dict[str, dict[str, str]]
) -> None:
    assert_current(lms_v0, **selector)


@pytest.mark.parametrize("vocabulary", ["current", "v0"])
def test_several_unknown_tools_after_a_message(lms: httpx.Client, vocabulary: Vocabulary) -> None:
    body = {"model": "lms-chat", "input": "Show me everything."}
    stream = stream_chat(lms, body, vocabulary=vocabulary, params={"events": vocabulary})
    result_event = "tool_call.failure" if vocabulary == "current" else "tool_call.result"

    assert tool_events(stream.names) == [result_event, result_event]
    assert stream.names.index("message.end") < stream.names.index(result_event)
    names = [i["metadata"]["tool_name"] for i in stream.result["output"] if i["type"] == "invalid_tool_call"]
    assert names == ["open_browser", "take_screenshot"]
    assert comparable(stream.result) == comparable(chat_body(lms, body))


def test_non_streaming_body_has_an_invalid_tool_call_item(lms: httpx.Client) -> None:
    body = chat_body(lms, BROWSER)

    assert body["output"] == [{"type": "reasoning", "content": BROWSER_REASONING}, INVALID_TOOL_CALL]
    assert body["stats"]["total_output_tokens"] > len(BROWSER_REASONING.split())  # the call's tokens too
    # The vocabulary never changes the body.
    assert comparable(chat_body(lms, BROWSER, params={"events": "v0"})) == comparable(body)


def test_an_unknown_vocabulary_is_a_400(lms: httpx.Client) -> None:
    response = post_chat(lms, {**BROWSER, "stream": True}, params={"events": "v9"})
    assert_lmstudio_error(response, 400, param="events", mentions=("v9",))
    response = post_chat(lms, BROWSER, headers={"X-Sluicegate-Events": "v1"})
    assert_lmstudio_error(response, 400, param="events", mentions=("v1",))
