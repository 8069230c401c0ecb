"""Google Cloud Vertex AI's prediction protocol, as llama-server serves it.

A custom container on Vertex AI is started with `AIP_MODE=PREDICTION` and gets its requests on
`AIP_PREDICT_ROUTE` (`/predict` by default) as `{"instances": [...]}`; each instance names the
API it is for in `@requestFormat`, as a path (`/v1/chat/completions`) or its camelCase alias
(`chatCompletions`, `/apply-template` -> `applyTemplate`), and the answer is
`{"predictions": [...]}`, one body per instance in order (an error body for one that failed).
Health checks come on `AIP_HEALTH_ROUTE`.

Each instance is served by this app itself, as a request of its own on that path with the
predict request's headers (its API key too), so every route answers exactly as it does on its
own path; not streamed (a `stream` field is set to false, as llama-server does).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Scope

from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.dialects.llama_server_errors import llama_server_error
from sluicegate.routes.common import JSONResponse

FORMAT = "@requestFormat"
MAX_INSTANCES = 128  # llama-server's bound: instances run side by side
MAX_BODY = 64 * 1024 * 1024  # an instance's answer kept in memory until all are done
DROPPED_HEADERS = frozenset({b"content-length", b"content-type", b"transfer-encoding", b"expect"})


def alias(path: str) -> str:
    """A path's camelCase `@requestFormat` alias: `/v1/chat/completions` -> `chatCompletions`."""
    text = path.removeprefix("/v1").lstrip("/")
    out: list[str] = []
    upper = False
    for char in text:
        if char in ":{":  # path parameters
            break
        if char in "/-_":
            upper = True
        else:
            out.append(char.upper() if upper else char)
            upper = False
    return "".join(out)


def vertex_routes(environ: Mapping[str, str], routes: list[BaseRoute]) -> list[Route]:
    """The predict and health routes when Vertex AI started the server (`AIP_MODE`), else none."""
    if environ.get("AIP_MODE") != "PREDICTION":
        return []
    paths: dict[str, str] = {}
    for route in routes:  # POST routes without parameters; the first of an alias wins
        if isinstance(route, Route) and "POST" in (route.methods or ()) and "{" not in route.path:
            paths.setdefault(alias(route.path), route.path)
            paths.setdefault(route.path, route.path)
    predict_path = environ.get("AIP_PREDICT_ROUTE") or "/predict"
    health_path = environ.get("AIP_HEALTH_ROUTE")

    async def predict(request: Request) -> Response:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError as exc:
            return _refused(f"The body is not JSON: {exc}")
        if not isinstance(body, dict) or not isinstance(body.get("instances"), list):
            return _refused("request body must include an array field named instances")
        instances = body["instances"]
        if len(instances) > MAX_INSTANCES:
            return _refused(f"instances array exceeds maximum size of {MAX_INSTANCES}")
        app: ASGIApp = request.scope["app"]
        answers = await asyncio.gather(*(_one(app, request.scope, paths, item) for item in instances))
        return JSONResponse({"predictions": answers})

    routes_out = [Route(predict_path, predict, methods=["POST"])]
    if health_path:
        health = next((r for r in routes if isinstance(r, Route) and r.path == "/health"), None)
        if health is not None:
            routes_out.append(Route(health_path, health.endpoint, methods=["GET"]))
    return routes_out


def _error(message: str) -> dict[str, Any]:
    return llama_server_error(ErrorInfo(ErrorKind.INVALID_REQUEST, message))


def _refused(message: str) -> Response:
    return JSONResponse(_error(message), status_code=400)


async def _one(app: ASGIApp, outer: Scope, paths: Mapping[str, str], instance: Any) -> Any:
    """One instance's answer: the body its route gave (JSON, else its text)."""
    if not isinstance(instance, dict):
        return _error("each instance must be a JSON object")
    requested = instance.get(FORMAT)
    if not isinstance(requested, str):
        return _error(f"each instance must include a string {FORMAT}")
    path = paths.get(requested)
    if path is None:
        return _error(f"no handler registered for {FORMAT}: {requested}")
    payload = {k: v for k, v in instance.items() if k != FORMAT}
    if "stream" in payload:
        payload["stream"] = False
    data = orjson.dumps(payload)
    headers = [(k, v) for k, v in outer["headers"] if k.lower() not in DROPPED_HEADERS]
    headers += [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    # A fresh scope: nothing of the outer request's connection (its body writer) comes along.
    scope: Scope = {
        "type": "http",
        "asgi": outer.get("asgi", {"version": "3.0"}),
        "http_version": outer.get("http_version", "1.1"),
        "method": "POST",
        "scheme": outer.get("scheme", "http"),
        "path": path,
        "raw_path": path.encode(),
        "root_path": outer.get("root_path", ""),
        "query_string": b"",
        "headers": headers,
        "client": outer.get("client"),
        "server": outer.get("server"),
    }
    if "state" in outer:
        scope["state"] = outer["state"]
    sent = False
    done = asyncio.Event()
    chunks: list[bytes] = []
    size = 0

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": data, "more_body": False}
        await done.wait()  # the answer is complete: as a client that then hangs up
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal size
        if message["type"] == "http.response.body":
            body = message.get("body", b"")
            size += len(body)
            if size > MAX_BODY:
                raise ValueError("an instance's answer is too large")
            chunks.append(body)
            if not message.get("more_body", False):
                done.set()

    try:
        await app(scope, receive, send)
    except ValueError as exc:
        return _error(str(exc))
    finally:
        done.set()
    text = b"".join(chunks)
    if not text:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text.decode("utf-8", "replace")
