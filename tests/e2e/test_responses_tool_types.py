"""Every Responses tool type, reasoning summaries, safe failures and compaction, through the
official openai SDK against a real server with a scripted model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from e2e_support import run_server, scripted, write_config
from responses_support import Server, running_server

from mcp_fixtures import stdio_entry, write_mcp_json

pytestmark = pytest.mark.e2e

MODEL = "scripted"
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n"
TOOLS: list[Any] = [
    {"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
    {
        "type": "custom",
        "name": "apply_patch",
        "description": "Edit files.",
        "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
    },
    {
        "type": "namespace",
        "name": "agents",
        "description": "Sub-agents.",
        "tools": [{"type": "function", "name": "spawn", "parameters": {"type": "object"}}],
    },
    {"type": "shell"},
    {"type": "local_shell"},
    {"type": "web_search"},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(
        tmp_path_factory.mktemp("openresp"),
        server={"api_keys": ["key-a", "key-b"]},
        models={MODEL: "openresp.yaml"},
    ) as s:
        yield s


def sdk(server: Server, key: str = "key-a") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.api_url, api_key=key, max_retries=0, timeout=30.0)


def test_a_codex_like_tool_list_is_accepted_and_unserved_hosted_tools_are_named(server: Server) -> None:
    raw = sdk(server).responses.with_raw_response.create(model=MODEL, input="hello", tools=TOOLS)
    assert raw.headers["x-sluicegate-ignored-tools"] == "web_search"
    response = raw.parse()
    assert response.status == "completed"
    assert [t.type for t in response.tools] == [t["type"] for t in TOOLS]


def test_forcing_an_unserved_hosted_tool_is_a_400_naming_it(server: Server) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk(server).responses.create(
            model=MODEL, input="hello", tools=TOOLS, tool_choice={"type": "web_search"}
        )
    assert "web_search" in caught.value.message


def test_a_custom_tool_call_round_trip_streamed(server: Server) -> None:
    client = sdk(server)
    with client.responses.stream(model=MODEL, input="patch please", tools=TOOLS) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.custom_tool_call_input.done" in kinds
    (call,) = final.output
    assert call.type == "custom_tool_call" and call.name == "apply_patch" and call.input == PATCH
    follow = client.responses.create(
        model=MODEL,
        previous_response_id=final.id,
        tools=TOOLS,
        input=[{"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Done!"}],
    )
    assert follow.output_text == "Done with the tool."


def test_a_namespace_call_carries_its_namespace(server: Server) -> None:
    response = sdk(server).responses.create(model=MODEL, input="namespace please", tools=TOOLS)
    (call,) = response.output
    assert call.type == "function_call" and call.name == "spawn" and call.namespace == "agents"
    assert json.loads(call.arguments) == {"task": "count"}


def test_shell_and_local_shell_calls_are_their_own_items_and_their_outputs_go_back(server: Server) -> None:
    client = sdk(server)
    shell = client.responses.create(model=MODEL, input="shell please", tools=TOOLS, store=False)
    (call,) = shell.output
    assert call.type == "shell_call" and call.action.commands == ["echo hi"]
    local = client.responses.create(model=MODEL, input="local shell please", tools=TOOLS)
    (lcall,) = local.output
    assert lcall.type == "local_shell_call" and lcall.action.command == ["ls"]
    # store: false — the client sends the whole history back, its call items included.
    follow = client.responses.create(
        model=MODEL,
        tools=TOOLS,
        store=False,
        input=[
            {"role": "user", "content": "shell please"},
            call.model_dump(exclude_none=True),
            {
                "type": "shell_call_output",
                "call_id": call.call_id,
                "output": [{"stdout": "hi\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
            },
        ],
    )
    assert follow.output_text == "Done with the tool."


def test_reasoning_summaries_stream_through_the_sdk_helper(server: Server) -> None:
    with sdk(server).responses.stream(
        model=MODEL, input="think please", reasoning={"summary": "auto"}
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.reasoning_summary_text.delta" in kinds
    assert "response.reasoning_summary_part.done" in kinds
    reasoning = final.output[0]
    assert reasoning.type == "reasoning"
    assert [s.text for s in reasoning.summary] == ["Let me think about this step by step."]
    assert final.output_text == "The answer is 42."


def test_a_specific_failure_code_reaches_the_client_and_the_stored_response(server: Server) -> None:
    client = sdk(server)
    with client.responses.stream(model=MODEL, input="overflow") as stream:
        events = list(stream)
    failed = events[-1]
    assert failed.type == "response.failed"
    assert failed.response.error is not None and failed.response.error.code == "context_length_exceeded"
    assert "response.output_item.done" not in [e.type for e in events]
    stored = client.responses.retrieve(failed.response.id)
    assert stored.status == "failed" and stored.error is not None
    assert stored.error.code == "context_length_exceeded"


def test_a_tool_call_cut_off_by_a_failure_is_never_done(server: Server) -> None:
    with sdk(server).responses.stream(model=MODEL, input="cut off", tools=TOOLS) as stream:
        events = list(stream)
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds
    assert "response.output_item.done" not in kinds and "response.function_call_arguments.done" not in kinds
    assert kinds[-1] == "response.failed"
    assert events[-1].response.error.code == "model_error"


def compact(server: Server, body: dict[str, Any], key: str = "key-a") -> httpx.Response:
    return httpx.post(
        f"{server.api_url}/responses/compact",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )


CONVERSATION = [
    {"role": "user", "content": "We agreed to launch on Tuesday and notify support first."},
    {"role": "assistant", "content": "Understood."},
]


def test_compaction_round_trip_and_refused_blobs(server: Server) -> None:
    answer = compact(server, {"model": MODEL, "input": CONVERSATION})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["object"] == "response.compaction"
    compaction = body["output"][-1]
    assert compaction["type"] == "compaction" and compaction["id"].startswith("cmp_")
    assert "Tuesday" not in compaction["encrypted_content"]  # sealed, not merely encoded
    assert body["output"][0]["role"] == "user"
    client = sdk(server)
    follow = client.responses.create(
        model=MODEL, input=[*body["output"], {"role": "user", "content": "hello"}]
    )
    assert follow.status == "completed"
    blob = compaction["encrypted_content"]
    tampered = {**compaction, "encrypted_content": blob[:-6] + ("A" if blob[-6] != "A" else "B") + blob[-5:]}
    for item, key in (
        (tampered, "key-a"),
        (compaction, "key-b"),
        ({**compaction, "encrypted_content": "gAAAA"}, "key-a"),
    ):
        with pytest.raises(openai.BadRequestError) as caught:
            sdk(server, key).responses.create(model=MODEL, input=[item, {"role": "user", "content": "hello"}])
        assert caught.value.code == "invalid_encrypted_content"


def test_compact_without_a_model_is_a_400(server: Server) -> None:
    answer = compact(server, {"input": CONVERSATION})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "model"


def test_reasoning_encrypted_content_is_sealed_and_accepted_back(server: Server) -> None:
    client = sdk(server)
    first = client.responses.create(
        model=MODEL, input="think please", store=False, include=["reasoning.encrypted_content"]
    )
    reasoning = first.output[0]
    assert reasoning.type == "reasoning" and reasoning.encrypted_content
    assert "step by step" not in reasoning.encrypted_content
    history = [
        {"role": "user", "content": "think please"},
        *[i.model_dump(exclude_none=True) for i in first.output],
    ]
    again = client.responses.create(
        model=MODEL, store=False, input=[*history, {"role": "user", "content": "hello"}]
    )
    assert again.status == "completed"
    with pytest.raises(openai.BadRequestError):
        sdk(server, "key-b").responses.create(
            model=MODEL, store=False, input=[*history, {"role": "user", "content": "hello"}]
        )


HOSTED_CLIENT_TOOLS: list[Any] = [{"type": "apply_patch"}, {"type": "tool_search", "execution": "client"}]


def test_apply_patch_and_tool_search_calls_go_to_the_client_and_back(server: Server) -> None:
    client = sdk(server)
    edit = client.responses.create(model=MODEL, input="structured edit please", tools=HOSTED_CLIENT_TOOLS)
    (call,) = edit.output
    assert call.type == "apply_patch_call"
    assert (call.operation.type, call.operation.path, call.operation.diff) == (
        "update_file",
        "a.py",
        "@@\n-a\n+b\n",
    )
    done = client.responses.create(
        model=MODEL,
        previous_response_id=edit.id,
        tools=HOSTED_CLIENT_TOOLS,
        input=[{"type": "apply_patch_call_output", "call_id": call.call_id, "status": "completed"}],
    )
    assert done.output_text == "Done with the tool."
    search = client.responses.create(model=MODEL, input="search tools please", tools=HOSTED_CLIENT_TOOLS)
    (found,) = search.output
    assert found.type == "tool_search_call" and found.execution == "client"
    assert found.arguments == {"query": "calendar"}
    back = client.responses.create(
        model=MODEL,
        previous_response_id=search.id,
        tools=HOSTED_CLIENT_TOOLS,
        input=[{"type": "tool_search_output", "call_id": found.call_id, "execution": "client", "tools": []}],
    )
    assert back.output_text == "Done with the tool."


def test_a_hosted_tool_mapped_to_a_provider_is_served_by_it(tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path_factory.mktemp("hosted")
    mcp_json = write_mcp_json(folder, {"calc": stdio_entry()})
    tables = {"tools": {"mcp_config": str(mcp_json)}, "responses.hosted_tools": {"web_search": "mcp/calc"}}
    config = write_config(
        folder, {"data_dir": str(folder / "data")}, [scripted(MODEL, "openresp.yaml")], tables
    )
    with run_server(folder, config) as hosted:
        client = openai.OpenAI(
            base_url=hosted.base_url + "/v1", api_key="unused", max_retries=0, timeout=30.0
        )
        raw = client.responses.with_raw_response.create(
            model=MODEL,
            input="hosted search please",
            tools=[{"type": "web_search"}],
            tool_choice={"type": "web_search"},
        )
    assert "x-sluicegate-ignored-tools" not in raw.headers
    response = raw.parse()
    calls = [item for item in response.output if item.type == "mcp_call"]
    assert [(c.name, c.output) for c in calls] == [("add", "5")]
    assert response.output_text == "Done with the tool."


@pytest.mark.parametrize("kind", ["🙂", "a\r\nX-Injected: 1", "nul\x00byte", "é"])
def test_an_unserved_tool_type_is_named_percent_encoded_and_never_breaks_the_answer(
    server: Server, kind: str
) -> None:
    body = {"model": MODEL, "input": "hello", "tools": [{"type": kind}]}
    with httpx.Client(timeout=30.0) as client:
        r = client.post(f"{server.api_url}/responses", json=body, headers={"Authorization": "Bearer key-a"})
    assert r.status_code == 200, r.text
    assert "x-injected" not in r.headers
    header = r.headers["x-sluicegate-ignored-tools"]
    assert header.isascii() and header.isprintable()
    from urllib.parse import unquote

    assert unquote(header) == kind
