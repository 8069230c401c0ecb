"""OpenAI's audio endpoints relayed to an upstream that has them (vLLM, LocalAI, speaches): the
client's request with the upstream's model name, the answer's bytes passed on as they arrive
(audio, a transcript, or Server-Sent Events), under the same replica failover and clocks as a
chat stream (first byte, idle, total). A refusal before the answer starts is a `SluicegateError`
in the client's dialect; a client that leaves closes the upstream connection at once.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

import orjson

from sluicegate.core.errors import ErrorKind, SluicegateError, invalid
from sluicegate.core.speech import Upload
from sluicegate.engines.upstream.timeouts import Clocks

if TYPE_CHECKING:
    from sluicegate.engines.upstream.base import UpstreamEngine
    from sluicegate.engines.upstream.http import StreamingResponse
    from sluicegate.engines.upstream.replicas import Replica


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', "%22").replace("\r", "%0D").replace("\n", "%0A")


def multipart(upload: Upload, model: str) -> tuple[bytes, bytes]:
    """The form re-encoded with `model` for the upstream: (body, its content type)."""
    boundary = "sluicegate-" + secrets.token_hex(16)
    parts: list[bytes] = []
    for name, values in {**upload.fields, "model": [model]}.items():
        for value in values:
            parts.append(
                f'--{boundary}\r\nContent-Disposition: form-data; name="{_quoted(name)}"\r\n\r\n'.encode()
                + value.encode()
                + b"\r\n"
            )
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{_quoted(upload.filename)}"\r\n'
        f"Content-Type: {_quoted(upload.content_type)}\r\n\r\n".encode()
        + upload.data
        + b"\r\n"
    )
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}".encode()


async def relay_bytes(
    engine: UpstreamEngine, path: str, body: Upload | dict[str, Any]
) -> AsyncGenerator[bytes, None]:
    model = engine.config.upstream_model
    if isinstance(body, Upload):
        payload, content_type = multipart(body, model)
    else:
        try:
            payload, content_type = orjson.dumps({**body, "model": model}), b"application/json"
        except orjson.JSONEncodeError as exc:
            raise invalid(f"The request cannot be sent upstream: {exc}.") from exc
    clocks = Clocks(
        first_byte=engine.config.first_byte_timeout,
        idle=engine.config.idle_timeout,
        total=engine.config.total_timeout,
    )
    replica: Replica | None = None
    response: StreamingResponse | None = None
    try:
        try:
            replica, response, refusal = await engine._send(path, payload, clocks, content_type=content_type)
        except asyncio.CancelledError:
            if not clocks.owns(asyncio.current_task()):
                raise
            refusal = clocks.expired
        if refusal is not None:
            raise SluicegateError(refusal.kind, refusal.message, param=refusal.param, code=refusal.code)
        assert replica is not None and response is not None
        chunks = response.chunks()
        while True:
            if clocks.expired is not None:
                info = clocks.expired
                raise SluicegateError(info.kind, info.message, code=info.code)
            clocks.waiting()
            try:
                chunk = await anext(chunks)
            except StopAsyncIteration:
                break
            except asyncio.CancelledError:
                if not clocks.owns(asyncio.current_task()):
                    raise
                continue  # `expired` is set: the loop's top reports it
            except Exception as exc:  # the connection broke mid-body
                raise SluicegateError(
                    ErrorKind.UPSTREAM,
                    f"The upstream {replica.name} failed: the connection broke ({type(exc).__name__}).",
                    code="upstream_error",
                ) from exc
            clocks.chunk()
            yield chunk
        clocks.idle()
    finally:
        clocks.stop()
        if response is not None:
            await response.aclose()
        if replica is not None:
            replica.outstanding -= 1
