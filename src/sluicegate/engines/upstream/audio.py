"""OpenAI's audio endpoints relayed to an upstream that has them (vLLM, LocalAI, speaches): the
client's request with the upstream's model name, the answer's bytes passed on as they arrive
(audio, a transcript, or Server-Sent Events), under the same replica failover and clocks as a
chat stream (first byte, idle, total). A refusal before the answer starts is a `SluicegateError`
in the client's dialect; a client that leaves closes the upstream connection at once.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

import orjson

from sluicegate.core.errors import invalid
from sluicegate.core.speech import Upload

if TYPE_CHECKING:
    from sluicegate.engines.upstream.base import UpstreamEngine


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
    async with contextlib.aclosing(engine.answer(path, payload, content_type=content_type)) as answer:
        async for _replica, chunk in answer:
            if chunk:  # not the first, empty one (the head is in): an empty chunk ends a chunked body
                yield chunk
