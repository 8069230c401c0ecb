"""Every Responses tool type: parsed, offered to the model as functions, its calls rendered as
their own items (streamed and final), its input items turned into messages; and reasoning
summaries."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_responses_encoder import Run, ending, item

from sluicegate.conversation.messages import items_to_messages
from sluicegate.core.errors import SluicegateError
from sluicegate.core.events import FinishReason, ItemKind
from sluicegate.dialects.responses.hosted import IGNORED_HEADER, resolve_hosted
from sluicegate.dialects.responses.request import parse_responses_request

Json = dict[str, Any]
PATCH = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n"
LARK = {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}
TOOLS: list[Json] = [
    {"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
    {"type": "custom", "name": "apply_patch", "description": "Edit files.", "format": LARK},
    {
        "type": "namespace",
        "name": "agents",
        "description": "Sub-agents.",
        "tools": [{"type": "function", "name": "spawn", "parameters": {"type": "object"}}],
    },
    {"type": "local_shell"},
    {"type": "shell"},
    {"type": "tool_search", "execution": "client", "description": "Find tools."},
    {"type": "web_search", "external_web_access": False},
    {"type": "code_interpreter", "container": {"type": "auto"}},
]
# the hosted apply_patch (structured operations): a client offers it or the custom one, not both
HOSTED: list[Json] = [
    {"type": "local_shell"},
    {"type": "shell"},
    {"type": "apply_patch"},
    {"type": "tool_search", "execution": "client"},
]


def parse(body: Json) -> Any:
    return parse_responses_request({"model": "m", "input": "hi", **body})


def test_every_tool_type_is_accepted_and_offered_as_functions() -> None:
    req = parse({"tools": TOOLS})
    names = [spec.name for spec in req.tool_specs]
    assert names == ["exec_command", "apply_patch", "agents__spawn", "local_shell", "shell", "tool_search"]
    assert req.hosted_tools == ["web_search", "code_interpreter"]
    custom = req.tool_specs[1]
    assert custom.parameters["required"] == ["input"]
    assert "lark grammar" in custom.description and "start: /.+/" in custom.description
    assert [t["type"] for t in req.tools] == [t["type"] for t in TOOLS]  # echoed as sent
    assert req.tool_kinds["agents__spawn"].namespace == "agents"


@pytest.mark.parametrize(
    "choice",
    [
        {"type": "custom", "name": "apply_patch"},
        {"type": "function", "name": "spawn", "namespace": "agents"},
        {"type": "shell"},
        {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "exec_command"}]},
    ],
)
def test_tool_choices_naming_the_new_types_are_accepted(choice: Json) -> None:
    parse({"tools": TOOLS, "tool_choice": choice})


def test_a_tool_choice_naming_a_missing_custom_tool_is_a_400() -> None:
    with pytest.raises(SluicegateError) as caught:
        parse({"tools": [], "tool_choice": {"type": "custom", "name": "nope"}})
    assert caught.value.info.param == "tool_choice.name"


def test_unserved_hosted_tools_are_left_out_with_a_header_and_a_forced_one_is_a_400() -> None:
    req = parse({"tools": TOOLS})
    hosted = resolve_hosted(req, {"web_search": "mcp/search"}, ["mcp/search"])
    assert hosted.plugin_ids == ["mcp/search"]
    assert hosted.headers() == {IGNORED_HEADER: "code_interpreter"}
    forced = parse({"tools": TOOLS, "tool_choice": {"type": "code_interpreter"}})
    with pytest.raises(SluicegateError) as caught:
        resolve_hosted(forced, {}, [])
    assert caught.value.info.status == 400 and "code_interpreter" in caught.value.info.message
    served = parse({"tools": TOOLS, "tool_choice": {"type": "web_search"}})
    resolve_hosted(served, {"web_search": "mcp/search"}, ["mcp/search"])  # served: fine


def call_run(name: str, arguments: str, body: Json | None = None) -> Run:
    return Run({"tools": TOOLS, **(body or {})}).feed(
        item(0, ItemKind.TOOL_CALL, arguments, name=name), ending(FinishReason.TOOL_CALLS)
    )


def test_a_custom_call_streams_its_input_and_ends_as_a_custom_tool_call() -> None:
    run = call_run("apply_patch", json.dumps({"input": PATCH}))
    assert run.types[2:] == [
        "output_item.added",
        "custom_tool_call_input.delta",
        "custom_tool_call_input.done",
        "output_item.done",
        "completed",
    ]
    events = run.events
    assert events[2]["item"] == {
        "type": "custom_tool_call",
        "id": "fc_0",
        "call_id": "call_0",
        "name": "apply_patch",
        "input": "",
        "status": "in_progress",
    }
    assert events[4]["input"] == PATCH and events[3]["delta"] == PATCH
    assert events[5]["item"]["input"] == PATCH and events[5]["item"]["status"] == "completed"
    assert events[-1]["response"]["output"][0]["input"] == PATCH


def test_a_custom_call_written_raw_keeps_its_text_as_input() -> None:
    run = call_run("apply_patch", PATCH)
    assert run.events[-1]["response"]["output"][0]["input"] == PATCH


def test_a_namespace_call_carries_its_namespace() -> None:
    run = call_run("agents__spawn", '{"task": "x"}')
    final = run.events[-1]["response"]["output"][0]
    assert final["type"] == "function_call" and final["name"] == "spawn" and final["namespace"] == "agents"
    assert "function_call_arguments.done" in run.types


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        (
            "local_shell",
            {"command": ["ls", "-l"], "working_directory": "/w"},
            {
                "type": "local_shell_call",
                "action": {
                    "type": "exec",
                    "command": ["ls", "-l"],
                    "env": {},
                    "timeout_ms": None,
                    "user": None,
                    "working_directory": "/w",
                },
                "status": "completed",
            },
        ),
        (
            "shell",
            {"commands": ["echo hi"]},
            {
                "type": "shell_call",
                "action": {"commands": ["echo hi"], "timeout_ms": None, "max_output_length": None},
                "status": "completed",
                "environment": None,
            },
        ),
        (
            "tool_search",
            {"query": "calendar"},
            {
                "type": "tool_search_call",
                "arguments": {"query": "calendar"},
                "execution": "client",
                "status": "completed",
            },
        ),
    ],
)
def test_client_hosted_calls_become_their_own_items(name: str, arguments: Json, expected: Json) -> None:
    run = call_run(name, json.dumps(arguments), {"tools": HOSTED})
    assert run.types[2:] == ["output_item.added", "output_item.done", "completed"]
    done = run.events[3]["item"]
    assert done == {"id": "fc_0", "call_id": "call_0", **expected}
    assert run.events[2]["item"]["status"] == "in_progress"


def test_an_apply_patch_call_has_its_operation() -> None:
    op = {"type": "update_file", "path": "a.py", "diff": "@@\n-a\n+b\n"}
    run = call_run("apply_patch", json.dumps(op), {"tools": HOSTED})
    final = run.events[-1]["response"]["output"][0]
    assert final == {
        "type": "apply_patch_call",
        "id": "fc_0",
        "call_id": "call_0",
        "operation": op,
        "status": "completed",
    }


def test_tool_input_items_become_calls_and_results() -> None:
    req = parse(
        {
            "input": [
                {"role": "user", "content": "go"},
                {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": PATCH},
                {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done!"},
                {
                    "type": "function_call",
                    "call_id": "c2",
                    "name": "spawn",
                    "namespace": "agents",
                    "arguments": "{}",
                },
                {"type": "function_call_output", "call_id": "c2", "output": "spawned"},
                {
                    "type": "local_shell_call",
                    "id": "lsh_1",
                    "call_id": "c3",
                    "status": "completed",
                    "action": {"type": "exec", "command": ["ls"], "env": {}},
                },
                {"type": "local_shell_call_output", "id": "c3", "output": "a.txt"},
                {"type": "shell_call", "call_id": "c4", "action": {"commands": ["pwd"]}},
                {
                    "type": "shell_call_output",
                    "call_id": "c4",
                    "output": [{"stdout": "/w", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
                },
                {
                    "type": "apply_patch_call",
                    "call_id": "c5",
                    "status": "completed",
                    "operation": {"type": "delete_file", "path": "b.txt"},
                },
                {"type": "apply_patch_call_output", "call_id": "c5", "status": "completed"},
                {
                    "type": "tool_search_call",
                    "call_id": "c6",
                    "arguments": {"query": "x"},
                    "execution": "client",
                },
                {"type": "tool_search_output", "call_id": "c6", "execution": "client", "tools": []},
            ]
        }
    )
    assert all(i.get("id") for i in req.input_items)
    messages = items_to_messages(req.input_items, None)
    calls = [(c.name, json.loads(c.arguments)) for m in messages for c in m.tool_calls]
    assert calls == [
        ("apply_patch", {"input": PATCH}),
        ("agents__spawn", {}),
        ("local_shell", {"command": ["ls"]}),
        ("shell", {"commands": ["pwd"]}),
        ("apply_patch", {"type": "delete_file", "path": "b.txt"}),
        ("tool_search", {"query": "x"}),
    ]
    results = [(m.tool_call_id, m.text) for m in messages if m.role == "tool"]
    assert results == [
        ("c1", "Done!"),
        ("c2", "spawned"),
        ("c3", "a.txt"),
        ("c4", "/w\n(exit code 0)"),
        ("c5", "Done."),
        ("c6", "[]"),
    ]


def test_a_malformed_tool_item_is_a_400_naming_it() -> None:
    with pytest.raises(SluicegateError) as caught:
        parse({"input": [{"type": "shell_call", "call_id": "c", "action": {}}]})
    assert caught.value.info.param == "input[0].action.commands"


# --- reasoning summaries ---------------------------------------------------------------------


def test_with_summary_reasoning_streams_as_summary_events() -> None:
    run = Run({"reasoning": {"summary": "auto"}}).feed(
        item(0, ItemKind.REASONING, "Think", "ing"), item(1, ItemKind.MESSAGE, "ok"), ending()
    )
    assert run.types[2:8] == [
        "output_item.added",
        "reasoning_summary_part.added",
        "reasoning_summary_text.delta",
        "reasoning_summary_text.delta",
        "reasoning_summary_text.done",
        "reasoning_summary_part.done",
    ]
    events = run.events
    assert events[2]["item"] == {"type": "reasoning", "id": "rs_0", "summary": []}
    assert events[3]["part"] == {"type": "summary_text", "text": ""} and events[3]["summary_index"] == 0
    assert events[4]["delta"] == "Think" and events[6]["text"] == "Thinking"
    assert events[7]["part"] == {"type": "summary_text", "text": "Thinking"}
    summary = [{"type": "summary_text", "text": "Thinking"}]
    assert events[8]["item"] == {"type": "reasoning", "id": "rs_0", "summary": summary}
    assert events[-1]["response"]["output"][0]["summary"] == summary


def test_without_summary_reasoning_events_stay() -> None:
    run = Run().feed(item(0, ItemKind.REASONING, "hm"), ending())
    assert "reasoning_text.delta" in run.types and "reasoning_summary_text.delta" not in run.types


def test_tools_that_input_items_make_available_are_offered_too() -> None:
    req = parse(
        {
            "input": [
                {
                    "type": "additional_tools",
                    "role": "developer",
                    "tools": [
                        {
                            "type": "namespace",
                            "name": "functions",
                            "description": "",
                            "tools": [{"type": "custom", "name": "exec", "description": "Run JS."}],
                        }
                    ],
                },
                {"role": "user", "content": "hi"},
                {
                    "type": "tool_search_call",
                    "call_id": "c1",
                    "arguments": {"query": "x"},
                    "execution": "client",
                },
                {
                    "type": "tool_search_output",
                    "call_id": "c1",
                    "execution": "client",
                    "tools": [{"type": "function", "name": "calendar", "parameters": {"type": "object"}}],
                },
            ]
        }
    )
    assert [spec.name for spec in req.tool_specs] == ["functions__exec", "calendar"]
    assert req.tool_kinds["functions__exec"].kind == "custom" and req.tools == []  # offered, not echoed
    assert items_to_messages(req.input_items, None)[0].role == "user"  # the tools item is no message
