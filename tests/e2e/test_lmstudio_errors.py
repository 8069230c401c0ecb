"""Bad input, auth, unknown routes and deadlines on `/api/v1`, all in LM Studio's error shape:
`{"error": {"type", "message", "code"?, "param"?}}` with a documented type, never a 500.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from e2e_support import Server
from lmstudio_support import (
    DEADLINE_SECONDS,
    HELLO,
    assert_lmstudio_error,
    chat_body,
    client_for,
    lms,
    lms_server,
    lms_v0,
    lms_v0_server,
    post_chat,
    stream_chat,
)

pytestmark = pytest.mark.e2e
__all__ = ["lms", "lms_server", "lms_v0", "lms_v0_server"]  # fixtures

PNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "lms-chat", "input": "Hi.", **fields}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("request_body", "param", "names"),
    [
        (body(tools=[]), "tools", ["'tools'"]),
        (body(max_tokens=5, stop=["x"]), "max_tokens", ["'max_tokens'", "'stop'"]),
        (
            body(integrations=[{"type": "plugin", "id": "mcp/x", "timeout": 5}]),
            "integrations.0",
            ["'timeout'"],
        ),
        (
            body(
                integrations=[
                    "mcp/a",
                    {
                        "type": "ephemeral_mcp",
                        "server_label": "x",
                        "server_url": "https://x.example",
                        "auth": "t",
                    },
                ]
            ),
            "integrations.1",
            ["'auth'"],
        ),
        (body(input=[{"type": "text", "content": "Hi.", "role": "user"}]), "input[0]", ["'role'"]),
    ],
    ids=["top-level", "two-keys", "plugin", "ephemeral-mcp", "input-item"],
)
def test_unknown_keys_are_unrecognized_keys(
    lms: httpx.Client, request_body: dict[str, Any], param: str, names: list[str], stream: bool
) -> None:
    response = post_chat(lms, {**request_body, "stream": stream})
    error = assert_lmstudio_error(response, 400, code="unrecognized_keys", param=param, mentions=tuple(names))
    assert error["message"].startswith("Unrecognized key(s) in object:")


@pytest.mark.parametrize(
    ("request_body", "param", "code", "mentions"),
    [
        # The docs say "message"; LM Studio itself wants "text" (docs#253).
        (
            body(input=[{"type": "message", "content": "Hi."}]),
            "input[0]",
            "invalid_union",
            ("'text' | 'image'",),
        ),
        (body(input=[{"content": "Hi."}]), "input[0]", "invalid_union", ()),
        (
            body(input=[{"type": "image", "data_url": "https://example.com/cat.png"}]),
            "input[0].data_url",
            None,
            ("data:",),
        ),
        (body(input=[{"type": "image"}]), "input[0].data_url", "missing_required_parameter", ()),
        (
            body(input=[{"type": "image", "image_url": PNG}]),
            "input[0]",
            "unrecognized_keys",
            ("'image_url'",),
        ),
        (body(input=[{"type": "text"}]), "input[0].content", "missing_required_parameter", ()),
        (body(input=[]), "input", None, ()),
        (body(input=["Hi."]), "input[0]", None, ()),
        (body(input=42), "input", None, ()),
        ({"model": "lms-chat"}, "input", "missing_required_parameter", ("input",)),
        ({"input": "Hi."}, "model", "missing_required_parameter", ("model",)),
        (body(model=7), "model", None, ()),
        (body(stream="yes"), "stream", None, ()),
        (body(store="no"), "store", None, ()),
        (body(system_prompt=["a"]), "system_prompt", None, ()),
        (body(temperature=1.5), "temperature", None, ()),
        (body(top_p="high"), "top_p", None, ()),
        (body(top_k=1.5), "top_k", None, ()),
        (body(min_p=-0.1), "min_p", None, ()),
        (body(repeat_penalty=True), "repeat_penalty", None, ()),
        (body(max_output_tokens=0), "max_output_tokens", None, ()),
        (body(context_length="long"), "context_length", None, ()),
        (body(context_length=10**9), "context_length", "invalid_value", ("maximum",)),
        (body(reasoning="extreme"), "reasoning", None, ("'off'", "'on'")),
        (body(reasoning=True), "reasoning", None, ()),
        (body(integrations="mcp/x"), "integrations", None, ()),
        (body(integrations=[{"type": "plugin"}]), "integrations.0.id", "missing_required_parameter", ()),
        (body(integrations=[{"type": "remote_mcp", "server_label": "x"}]), "integrations.0.type", None, ()),
        (
            body(integrations=[{"type": "ephemeral_mcp", "server_label": "x"}]),
            "integrations.0.server_url",
            "missing_required_parameter",
            (),
        ),
        (
            body(integrations=[{"type": "plugin", "id": "mcp/x", "allowed_tools": [1]}]),
            "integrations.0.allowed_tools",
            None,
            (),
        ),
    ],
)
def test_bad_input_is_a_400_naming_the_parameter(
    lms: httpx.Client, request_body: dict[str, Any], param: str, code: str | None, mentions: tuple[str, ...]
) -> None:
    assert_lmstudio_error(post_chat(lms, request_body), 400, code=code, param=param, mentions=mentions)


def test_text_and_image_input_items_are_accepted(lms: httpx.Client) -> None:
    items = [{"type": "text", "content": "Hi."}, {"type": "image", "data_url": PNG}]
    assert chat_body(lms, body(input=items))["output"] == [{"type": "message", "content": HELLO}]


def test_a_reasoning_setting_the_model_does_not_support_names_the_allowed_ones(lms: httpx.Client) -> None:
    for stream in (False, True):
        response = post_chat(lms, body(reasoning="high", stream=stream))
        assert_lmstudio_error(
            response,
            400,
            code="invalid_value",
            param="reasoning",
            mentions=("'high'", "'off', 'on'", "lms-chat"),
        )
    assert chat_body(lms, body(reasoning="on"))["output"]


@pytest.mark.parametrize(
    ("integrations", "code"),
    [
        (["mcp/playwright"], "plugin_not_found"),
        (
            [{"type": "plugin", "id": "mcp/playwright", "allowed_tools": ["browser_navigate"]}],
            "plugin_not_found",
        ),
        (
            [
                {
                    "type": "ephemeral_mcp",
                    "server_label": "huggingface",
                    "server_url": "https://huggingface.co/mcp",
                    "allowed_tools": ["model_search"],
                    "headers": {"Authorization": "Bearer hf_x"},
                }
            ],
            "request_servers_disabled",
        ),
    ],
    ids=["plugin-id", "plugin", "ephemeral-mcp"],
)
def test_integrations_this_server_does_not_have_are_refused(
    lms: httpx.Client, integrations: list[Any], code: str
) -> None:
    # No mcp.json, no plugins, per-request servers off (the default): refused before the stream.
    for stream in (False, True):
        response = post_chat(lms, body(integrations=integrations, stream=stream))
        assert_lmstudio_error(response, 400, code=code, param="integrations")


def test_an_unknown_model_is_model_not_found(lms: httpx.Client) -> None:
    for stream in (False, True):
        response = post_chat(lms, body(model="no-such-model", stream=stream))
        assert_lmstudio_error(
            response,
            404,
            type="model_not_found",
            code="model_not_found",
            param="model",
            mentions=("no-such-model",),
        )


@pytest.mark.parametrize(
    "content", [b"{not json", b"", b"[1, 2]", b'"Hi."'], ids=["malformed", "empty", "array", "string"]
)
def test_a_body_that_is_not_a_json_object_is_a_400(lms: httpx.Client, content: bytes) -> None:
    response = lms.post("/api/v1/chat", content=content, headers={"Content-Type": "application/json"})
    assert_lmstudio_error(response, 400)


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/api/v1/nothing-here", 404, "unknown_route"),
        ("POST", "/api/v1/chat/completions", 404, "unknown_route"),
        ("GET", "/api/v1/chat", 405, "method_not_allowed"),
        ("DELETE", "/api/v1/models", 405, "method_not_allowed"),
    ],
)
def test_unknown_routes_answer_in_lmstudio_shape(
    lms: httpx.Client, method: str, path: str, status: int, code: str
) -> None:
    assert_lmstudio_error(lms.request(method, path), status, code=code, mentions=(path,))


@pytest.mark.parametrize(
    ("method", "path", "json"),
    [
        ("POST", "/api/v1/chat", body()),
        ("POST", "/api/v1/chat", body(stream=True)),
        ("GET", "/api/v1/models", None),
        ("POST", "/api/v1/models/load", {"model": "lms-chat"}),
        ("POST", "/api/v1/models/unload", {"instance_id": "lms-chat"}),
        ("POST", "/api/v1/models/download", {"model": "x"}),
        ("GET", "/api/v1/models/download/status/job_1", None),
    ],
)
@pytest.mark.parametrize(
    "auth", [None, "Bearer wrong-key", "Basic c2stbG06c2VjcmV0"], ids=["none", "wrong", "basic"]
)
def test_a_key_is_required_when_the_server_has_one(
    lms_v0_server: Server, method: str, path: str, json: Any, auth: str | None
) -> None:
    with client_for(lms_v0_server, {"Authorization": auth} if auth else None) as client:
        response = client.request(method, path, json=json)
    assert_lmstudio_error(response, 401, code="invalid_api_key")


def test_the_right_key_is_let_in(lms_v0: httpx.Client) -> None:
    assert lms_v0.get("/api/v1/models").status_code == 200
    assert chat_body(lms_v0, body())["output"] == [{"type": "message", "content": HELLO}]


def test_the_request_deadline_ends_the_stream_with_error_then_chat_end(lms_v0: httpx.Client) -> None:
    started = time.monotonic()
    stream = stream_chat(lms_v0, {"model": "lms-crawl", "input": "Go slowly."}, vocabulary="v0")
    elapsed = time.monotonic() - started

    assert stream.names[-3:] == ["message.delta", "error", "chat.end"]  # the cut-off message is not ended
    error = stream.error
    assert error is not None and error["code"] == "timeout"
    assert error["type"] == "internal_error"
    assert f"{DEADLINE_SECONDS:g}s" in error["message"]
    generated = stream.text("message")
    assert generated.startswith("w0 w1")  # 100 words would take 10 s
    assert stream.result["output"] == [{"type": "message", "content": generated}]
    assert DEADLINE_SECONDS <= elapsed < 9.0


def test_the_stats_after_a_deadline_count_what_was_generated(lms_v0: httpx.Client) -> None:
    stream = stream_chat(lms_v0, {"model": "lms-crawl", "input": "Go slowly."}, vocabulary="v0")

    assert stream.error is not None and stream.error["code"] == "timeout"
    stats = stream.result["stats"]
    assert stats["input_tokens"] > 0
    assert stats["total_output_tokens"] == len(stream.text("message").split())


def test_the_request_deadline_without_streaming_is_a_504(lms_v0: httpx.Client) -> None:
    response = post_chat(lms_v0, {"model": "lms-crawl", "input": "Go slowly."})
    assert_lmstudio_error(response, 504, type="internal_error", code="timeout")
