"""Per-key isolation of stored state (issue 13), through a real server and the openai SDK.

With `api_keys = ["k", "k2"]`, everything k stores belongs to k: for k2, k's response ids and
item ids answer 404 exactly like ids that do not exist (GET, DELETE, cancel, input_items,
`previous_response_id`, `item_reference`), and a `function_call_output` naming k's call_id
never brings k's call into k2's prompt. The `echo` model answers with its whole prompt, so the
tests read what reached the model; each check has a control showing k itself does see it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from responses_support import Server, running_server

pytestmark = pytest.mark.e2e

K, K2 = "k", "k2"
SECRET_TEXT = "k-secret-text"
SECRET_ARGS = "k-secret-args"
MISSING = "resp_0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(
        tmp_path_factory.mktemp("scoping"),
        server={"api_keys": [K, K2]},
        models={"echo": "echo.yaml", "slow": "responses_slow.yaml"},
    ) as s:
        yield s


def sdk(server: Server, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=key, max_retries=0, timeout=30.0)


def text(response: Any) -> str:
    return "".join(c.text for item in response.output if item.type == "message" for c in item.content)


K_INPUT = [
    {"type": "message", "id": "msg_1", "role": "user", "content": SECRET_TEXT},
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "lookup",
        "arguments": '{"q": "' + SECRET_ARGS + '"}',
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "found"},
]


@pytest.fixture(scope="module")
def stored(server: Server) -> str:
    """A response of k's, with k's text, item ids and a call of its own."""
    with sdk(server, K) as k:
        response = k.responses.create(model="echo", input=K_INPUT)  # type: ignore[arg-type]
    assert SECRET_TEXT in text(response) and SECRET_ARGS in text(response)
    return response.id


def refusal(server: Server, key: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {key}"}
    r = httpx.request(method, f"{server.base_url}{path}", json=body, headers=headers, timeout=30)
    return r.status_code, r.json()


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/responses/{}"),
        ("GET", "/v1/responses/{}?stream=true"),
        ("GET", "/v1/responses/{}/input_items"),
        ("POST", "/v1/responses/{}/cancel"),
        ("DELETE", "/v1/responses/{}"),
    ],
)
def test_another_keys_response_answers_exactly_like_a_missing_one(
    server: Server, stored: str, method: str, path: str
) -> None:
    status, body = refusal(server, K2, method, path.format(stored))
    missing_status, missing_body = refusal(server, K2, method, path.format(MISSING))
    assert status == missing_status == 404
    assert body == _with_id(missing_body, MISSING, stored)
    # and k still has it (DELETE above did nothing): the 404 was the scope's, not the id's
    with sdk(server, K) as k:
        assert k.responses.retrieve(stored).id == stored


def _with_id(body: Any, old: str, new: str) -> Any:
    """`body` with every mention of id `old` replaced by `new`."""
    return json.loads(json.dumps(body).replace(old, new))


def test_sdk_calls_of_another_key_raise_not_found(server: Server, stored: str) -> None:
    with sdk(server, K2) as k2:
        for call in (
            lambda: k2.responses.retrieve(stored),
            lambda: k2.responses.input_items.list(stored),
            lambda: k2.responses.cancel(stored),
            lambda: k2.responses.delete(stored),
        ):
            with pytest.raises(openai.NotFoundError):
                call()


def test_previous_response_id_of_another_key_is_not_found(server: Server, stored: str) -> None:
    with sdk(server, K2) as k2:
        with pytest.raises(openai.NotFoundError) as refused:
            k2.responses.create(model="echo", input="go on", previous_response_id=stored)
        with pytest.raises(openai.NotFoundError) as missing:
            k2.responses.create(model="echo", input="go on", previous_response_id=MISSING)
    assert refused.value.body == _with_id(missing.value.body, MISSING, stored)
    with sdk(server, K) as k:  # control: k continues its own conversation, with its text
        again = k.responses.create(model="echo", input="go on", previous_response_id=stored)
    assert SECRET_TEXT in text(again)


def test_item_reference_to_another_keys_item_is_not_found(server: Server, stored: str) -> None:
    reference = [{"type": "item_reference", "id": "msg_1"}]
    with sdk(server, K2) as k2:
        with pytest.raises(openai.NotFoundError):
            k2.responses.create(model="echo", input=reference)  # type: ignore[arg-type]
        # k2's own msg_1 (ids are per key): a reference finds k2's, never k's
        own = [{"type": "message", "id": "msg_1", "role": "user", "content": "k2-own-text"}]
        k2.responses.create(model="echo", input=own)  # type: ignore[arg-type]
        mine = k2.responses.create(model="echo", input=reference)  # type: ignore[arg-type]
        assert "k2-own-text" in text(mine) and SECRET_TEXT not in text(mine)
        items = k2.responses.input_items.list(mine.id)
        assert SECRET_TEXT not in items.model_dump_json()
    with sdk(server, K) as k:  # control: k's reference brings k's text
        theirs = k.responses.create(model="echo", input=reference)  # type: ignore[arg-type]
    assert SECRET_TEXT in text(theirs)


def test_function_call_output_never_brings_another_keys_call_into_the_prompt(
    server: Server, stored: str
) -> None:
    result = [
        {"type": "function_call_output", "call_id": "call_1", "output": "the result"},
        {"type": "message", "role": "user", "content": "and so?"},
    ]
    with sdk(server, K2) as k2:
        answer = k2.responses.create(model="echo", input=result)  # type: ignore[arg-type]
    assert "the result" in text(answer)
    assert SECRET_ARGS not in text(answer) and "lookup" not in text(answer)
    with sdk(server, K) as k:  # control: for k, the stored call is put before its result
        own = k.responses.create(model="echo", input=result)  # type: ignore[arg-type]
    assert SECRET_ARGS in text(own) and "lookup(" in text(own)


def test_another_keys_background_run_cannot_be_followed_or_cancelled(server: Server) -> None:
    with sdk(server, K) as k, sdk(server, K2) as k2:
        run = k.responses.create(model="slow", input="stroll", background=True)
        for call in (
            lambda: k2.responses.cancel(run.id),
            lambda: k2.responses.retrieve(run.id),
            lambda: k2.responses.input_items.list(run.id),
        ):
            with pytest.raises(openai.NotFoundError):
                call()
        status, _ = refusal(server, K2, "GET", f"/v1/responses/{run.id}?stream=true&starting_after=0")
        assert status == 404
        with pytest.raises(openai.BadRequestError):  # in progress: k2 cannot continue it either way
            k.responses.create(model="echo", input="next", previous_response_id=run.id)
        with pytest.raises(openai.NotFoundError):
            k2.responses.create(model="echo", input="next", previous_response_id=run.id)
        assert k.responses.cancel(run.id).status == "cancelled"  # the run was k's all along


def test_no_keys_is_one_scope(tmp_path: Path) -> None:
    with (
        running_server(tmp_path, models={"echo": "echo.yaml"}) as s,
        sdk(s, "unused") as a,
        sdk(s, "sk-other") as b,
    ):
        first = a.responses.create(model="echo", input="shared")
        assert b.responses.retrieve(first.id).id == first.id
        again = b.responses.create(model="echo", input="x", previous_response_id=first.id)
        assert "shared" in text(again)
