"""HTTP pieces every endpoint needs: bounded JSON bodies, auth, JSON responses, disconnects."""

from __future__ import annotations

from collections.abc import Coroutine, Mapping
from typing import Any

import orjson
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope

from sluicegate.core import scope
from sluicegate.core.body import declared_over, whole_body
from sluicegate.core.errors import ErrorKind, SluicegateError

# (`safe_headers` and `parse_json` are compiled, in core: imported from here as before)
from sluicegate.core.headers import safe_headers as safe_headers
from sluicegate.core.json_limits import HTTP_HINT as HTTP_HINT
from sluicegate.core.json_limits import parse_json as parse_json
from sluicegate.turn.state import AppState

INSTANCE_HEADER = "X-Sluicegate-Instance"


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def app_state(request: HTTPConnection) -> AppState:
    state: AppState = request.app.state.sluicegate
    return state


def _too_large(max_bytes: int) -> SluicegateError:
    return SluicegateError(
        ErrorKind.PAYLOAD_TOO_LARGE,
        f"Request body is larger than the limit of {max_bytes} bytes (max_body_bytes).",
        code="request_too_large",
    )


async def read_json(request: Request, max_bytes: int, max_depth: int | None = None) -> Any:
    """The body as JSON, refusing oversize bodies before reading them whole. `max_depth`:
    `max_json_depth`, when the caller has the settings at hand (else read from the app)."""
    depth = app_state(request).settings.max_json_depth if max_depth is None else max_depth
    return await read_json_body(request.scope, request.receive, max_bytes, depth)


async def read_json_body(scope: Scope, receive: Receive, max_bytes: int, max_depth: int) -> Any:
    """`read_json` from the ASGI scope and `receive` themselves: a chat route's start makes no
    `Request` or `Headers` to read one header. The ASGI messages are read here, not through
    `request.stream()`: what it does, without an async generator per request (each one is
    registered with the loop on its first step); the checks a start makes are compiled
    (`core/body.py`)."""
    if declared_over(scope["headers"], max_bytes):
        raise _too_large(max_bytes)
    message = await receive()
    body = whole_body(message)  # the usual case: the whole body in the first message
    if body is None:
        body = await _read_rest(message, receive, max_bytes)
    elif len(body) > max_bytes:
        raise _too_large(max_bytes)
    return parse_json(body, max_depth)


async def _read_rest(message: Message, receive: Receive, max_bytes: int) -> bytes:
    """The body from `message` on, when it did not come whole in one message."""
    chunks: list[bytes] = []
    size = 0
    while True:
        if message["type"] == "http.disconnect":  # gone mid-body: nothing to answer, nothing wrong here
            raise SluicegateError(ErrorKind.CANCELLED, "the client disconnected", code="cancelled")
        if message["type"] == "http.request":
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > max_bytes:
                    raise _too_large(max_bytes)
                chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        message = await receive()


def presented_key(request: HTTPConnection) -> str:
    """The API key a request presents: `Authorization: Bearer` or `x-api-key`."""
    return key_in(request.headers)


def key_in(headers: Mapping[str, str]) -> str:
    """`presented_key`, from the request's headers."""
    header = headers.get("authorization", "")
    return header[7:].strip() if header[:7].lower() == "bearer " else headers.get("x-api-key", "")


def request_scope(request: HTTPConnection, api_keys: list[str]) -> str:
    """Whose data a request may see and seal: a hash of its API key; one scope without keys
    (`core/scope.py`: the same scope for sealed blobs and stored data)."""
    return scope_for(request.scope, request.headers, api_keys)


def scope_for(asgi_scope: Scope, headers: Mapping[str, str], api_keys: list[str]) -> str:
    """`request_scope`, from the ASGI scope and the request's headers."""
    keyed = bool(api_keys) or scope.KEY_SCOPE in asgi_scope  # a runtime key: auth is on
    return scope.scope_of(key_in(headers)) if keyed else ""


def allow_model(key: scope.IssuedKey | None, model_id: str | None, asked: str | None = None) -> None:
    """A runtime key limited to some models meets any other as a model that does not exist
    (404, as OpenAI answers a key without access), never a list of what it may not use.
    `asked`: the name the request used (an alias or a default may serve it); either may match."""
    if key is None or model_id is None or key.allows(model_id) or (asked is not None and key.allows(asked)):
        return
    raise SluicegateError(
        ErrorKind.NOT_FOUND,
        f"The model `{asked or model_id}` does not exist or this API key may not use it.",
        param="model",
        code="model_not_found",
    )


def wait_for_disconnect(request: Request) -> Coroutine[Any, Any, None]:
    return until_disconnect(request.receive)


async def until_disconnect(receive: Receive) -> None:
    """Returns when the client has gone (the request's body read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass
