"""Responses conversation items → chat messages, and the clean-up done before generating."""

from __future__ import annotations

from typing import Any

from sluicegate.conversation.messages import items_to_messages, orphan_call_ids
from sluicegate.core.events import Item, ItemKind
from sluicegate.core.request import ContentPart, Message, ToolCall
from sluicegate.dialects.responses.items import output_item

Json = dict[str, Any]


def user(text: str) -> Json:
    return {
        "type": "message",
        "id": "msg_u",
        "role": "user",
        "content": [{"type": "input_text", "text": text}],
    }


def assistant(text: str) -> Json:
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return {"type": "message", "id": "msg_a", "role": "assistant", "content": content}


def call(call_id: str, name: str = "get_weather", arguments: str = '{"city": "Paris"}') -> Json:
    return {
        "type": "function_call",
        "id": "fc_" + call_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def result(call_id: str, output: str = "sunny") -> Json:
    return {"type": "function_call_output", "id": "fco_" + call_id, "call_id": call_id, "output": output}


def reasoning(text: str, *, summary: str | None = None) -> Json:
    item: Json = {"type": "reasoning", "id": "rs_1", "summary": []}
    if summary is not None:
        item["summary"] = [{"type": "summary_text", "text": summary}]
    if text:
        item["content"] = [{"type": "reasoning_text", "text": text}]
    return item


def shape(messages: list[Message]) -> list[tuple[Any, ...]]:
    return [
        (m.role, m.content, [(c.id, c.name, c.arguments) for c in m.tool_calls], m.tool_call_id, m.reasoning)
        for m in messages
    ]


def test_instructions_become_a_leading_system_message() -> None:
    messages = items_to_messages([user("hi")], "Be brief.")
    assert shape(messages) == [("system", "Be brief.", [], None, None), ("user", "hi", [], None, None)]
    assert shape(items_to_messages([user("hi")], None)) == [("user", "hi", [], None, None)]


def test_roles_and_text_parts_are_kept() -> None:
    developer = {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]}
    multi = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "one "}, {"type": "input_text", "text": "two"}],
    }
    messages = items_to_messages([developer, multi, assistant("ok")], None)
    assert [(m.role, m.content) for m in messages] == [
        ("developer", "rules"),
        ("user", "one two"),
        ("assistant", "ok"),
    ]


def test_images_become_content_parts() -> None:
    item = {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "what is this?"},
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"},
        ],
    }
    (message,) = items_to_messages([item], None)
    assert message.content == [
        ContentPart("text", text="what is this?"),
        ContentPart("image", image_url="data:image/png;base64,AAAA"),
    ]


def test_function_calls_join_the_assistant_turn_they_follow() -> None:
    items = [user("weather?"), assistant("Let me check."), call("call_1"), call("call_2", "get_time", "{}")]
    items += [result("call_1"), result("call_2", "noon")]
    messages = items_to_messages(items, None)
    assert shape(messages) == [
        ("user", "weather?", [], None, None),
        (
            "assistant",
            "Let me check.",
            [("call_1", "get_weather", '{"city": "Paris"}'), ("call_2", "get_time", "{}")],
            None,
            None,
        ),
        ("tool", "sunny", [], "call_1", None),
        ("tool", "noon", [], "call_2", None),
    ]


def test_a_call_without_assistant_text_opens_its_own_assistant_turn() -> None:
    messages = items_to_messages([user("weather?"), call("call_1"), result("call_1")], None)
    assert shape(messages)[1] == (
        "assistant",
        "",
        [("call_1", "get_weather", '{"city": "Paris"}')],
        None,
        None,
    )
    assert len(messages) == 3


def test_reasoning_rides_with_the_next_assistant_message() -> None:
    messages = items_to_messages([user("q"), reasoning("thinking hard"), assistant("answer")], None)
    assert shape(messages)[1] == ("assistant", "answer", [], None, "thinking hard")


def test_reasoning_before_a_call_is_attached_to_the_call_turn() -> None:
    messages = items_to_messages(
        [user("q"), reasoning("need a tool"), call("call_1"), result("call_1")], None
    )
    assert messages[1].role == "assistant" and messages[1].reasoning == "need a tool"
    assert [c.id for c in messages[1].tool_calls] == ["call_1"]


def test_reasoning_with_only_a_summary_uses_the_summary() -> None:
    messages = items_to_messages([user("q"), reasoning("", summary="short version"), assistant("a")], None)
    assert messages[1].reasoning == "short version"


def test_reasoning_content_wins_over_summary() -> None:
    messages = items_to_messages([user("q"), reasoning("full text", summary="summary"), assistant("a")], None)
    assert messages[1].reasoning == "full text"


def test_duplicate_tool_results_are_dropped() -> None:
    items = [user("q"), call("call_1"), result("call_1", "first"), result("call_1", "second")]
    messages = items_to_messages(items, None)
    tools = [(m.tool_call_id, m.content) for m in messages if m.role == "tool"]
    assert tools == [("call_1", "first")]


def test_a_result_whose_call_is_unknown_gets_a_synthesised_call() -> None:
    messages = items_to_messages([user("q"), result("call_x", "42")], None)
    assert shape(messages) == [
        ("user", "q", [], None, None),
        ("assistant", "", [("call_x", "unknown_tool", "{}")], None, None),
        ("tool", "42", [], "call_x", None),
    ]


def test_a_stored_call_is_used_for_a_result_without_history() -> None:
    known = {"call_x": call("call_x", "get_weather", '{"city": "Oslo"}')}
    messages = items_to_messages([result("call_x", "snow")], None, known)
    assert shape(messages) == [
        ("assistant", "", [("call_x", "get_weather", '{"city": "Oslo"}')], None, None),
        ("tool", "snow", [], "call_x", None),
    ]


def test_known_calls_are_not_used_when_the_call_is_in_the_history() -> None:
    known = {"call_1": call("call_1", "other_tool", "{}")}
    messages = items_to_messages([user("q"), call("call_1"), result("call_1")], None, known)
    assert [m.role for m in messages] == ["user", "assistant", "tool"]
    assert messages[1].tool_calls == [ToolCall("call_1", "get_weather", '{"city": "Paris"}')]


def test_a_result_before_its_call_is_dropped_as_an_orphan() -> None:
    messages = items_to_messages(
        [user("q"), result("call_1", "early"), call("call_1"), result("call_1")], None
    )
    assert shape(messages) == [
        ("user", "q", [], None, None),
        ("assistant", "", [("call_1", "get_weather", '{"city": "Paris"}')], None, None),
        ("tool", "sunny", [], "call_1", None),
    ]


def test_orphan_call_ids_lists_results_without_calls() -> None:
    items = [user("q"), call("call_1"), result("call_1"), result("call_2"), result("call_3")]
    assert orphan_call_ids(items) == ["call_2", "call_3"]
    assert orphan_call_ids([user("q")]) == []


def test_output_items_for_each_kind() -> None:
    message = Item(index=0, kind=ItemKind.MESSAGE, id="msg_1", text="hi", done=True)
    assert output_item(message, "completed") == {
        "type": "message",
        "id": "msg_1",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "hi", "annotations": [], "logprobs": []}],
    }
    refusal = Item(index=1, kind=ItemKind.REFUSAL, id="msg_2", parts=["no", "pe"])
    assert output_item(refusal, "in_progress")["content"] == [{"type": "refusal", "refusal": "nope"}]
    thought = Item(index=2, kind=ItemKind.REASONING, id="rs_1", text="hmm", done=True)
    assert output_item(thought, "completed") == {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "hmm"}],
    }
    tool = Item(index=3, kind=ItemKind.TOOL_CALL, id="fc_1", call_id="call_1", name="f", text="{}", done=True)
    assert output_item(tool, "completed") == {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "f",
        "arguments": "{}",
        "status": "completed",
    }


def test_a_call_the_conversation_moved_on_from_is_dropped() -> None:
    # No result came, and the user spoke again: templates and upstreams refuse an unanswered call.
    items = [user("weather?"), assistant("Let me check."), call("call_1"), user("never mind")]
    assert shape(items_to_messages(items, None)) == [
        ("user", "weather?", [], None, None),
        ("assistant", "Let me check.", [], None, None),  # its text stays
        ("user", "never mind", [], None, None),
    ]


def test_an_assistant_turn_left_empty_by_the_drop_goes_too() -> None:
    items = [user("weather?"), call("call_1"), user("never mind"), assistant("ok")]
    assert shape(items_to_messages(items, None)) == [
        ("user", "weather?", [], None, None),
        ("user", "never mind", [], None, None),
        ("assistant", "ok", [], None, None),
    ]
    # a turn that still carries reasoning is not empty
    items = [user("weather?"), reasoning("need a tool"), call("call_1"), user("never mind")]
    assert shape(items_to_messages(items, None))[1] == ("assistant", "", [], None, "need a tool")


def test_only_the_unanswered_calls_of_a_turn_are_dropped() -> None:
    items = [user("q"), call("call_1"), call("call_2", "get_time", "{}"), result("call_1"), user("next")]
    assert shape(items_to_messages(items, None)) == [
        ("user", "q", [], None, None),
        ("assistant", "", [("call_1", "get_weather", '{"city": "Paris"}')], None, None),
        ("tool", "sunny", [], "call_1", None),
        ("user", "next", [], None, None),
    ]


def test_calls_of_the_latest_turn_are_kept_while_their_results_may_still_come() -> None:
    both = [("call_1", "get_weather", '{"city": "Paris"}'), ("call_2", "get_time", "{}")]
    messages = items_to_messages([user("q"), call("call_1"), call("call_2", "get_time", "{}")], None)
    assert shape(messages)[1:] == [("assistant", "", both, None, None)]
    items = [user("q"), call("call_1"), call("call_2", "get_time", "{}"), result("call_1")]
    assert shape(items_to_messages(items, None))[1:] == [
        ("assistant", "", both, None, None),
        ("tool", "sunny", [], "call_1", None),
    ]


def test_a_result_separated_from_its_call_moves_up_to_follow_it() -> None:
    items = [user("q"), call("c1"), assistant("checking"), result("c1"), user("and?")]
    messages = items_to_messages(items, None)
    roles = [(m.role, m.tool_call_id or [c.id for c in m.tool_calls]) for m in messages]
    assert roles == [("user", []), ("assistant", ["c1"]), ("tool", "c1"), ("assistant", []), ("user", [])]
