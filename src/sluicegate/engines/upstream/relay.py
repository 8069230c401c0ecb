"""Endpoints an `openai` upstream answers as they are (/embeddings, /rerank): the client's JSON
body goes to a replica with the upstream's model name, and the answer comes back whole, with
our model id."""

from __future__ import annotations

from typing import Any

import orjson

from sluicegate.core.errors import ErrorInfo, ErrorKind, SluicegateError
from sluicegate.engines.upstream.config import UpstreamConfig
from sluicegate.engines.upstream.errors import http_error
from sluicegate.engines.upstream.http import ConnectFailed
from sluicegate.engines.upstream.replicas import ReplicaSet

MAX_UPSTREAM_BODY = 256 << 20  # an upstream's answer is read whole: bounded


async def relay_json(
    config: UpstreamConfig, replicas: ReplicaSet, model_id: str, path: str, body: dict[str, Any]
) -> Any:
    payload = orjson.dumps({**body, "model": config.upstream_model})
    replica = replicas.pick(set())
    if replica is None:
        raise SluicegateError(
            ErrorKind.UPSTREAM, "No upstream replica could be tried.", code="upstream_unavailable"
        )
    replica.outstanding += 1
    try:
        response = await replica.pool.post_stream(path, payload)
        try:
            data = b""
            async for chunk in response.chunks():
                data += chunk
                if len(data) > MAX_UPSTREAM_BODY:
                    raise SluicegateError(ErrorKind.UPSTREAM, "The upstream's answer is too large.")
        finally:
            await response.aclose()
    except ConnectFailed as exc:
        replicas.connect_failed(replica, str(exc))
        raise SluicegateError(
            ErrorKind.UPSTREAM,
            f"Could not reach the upstream {replica.name}: {exc}",
            code="upstream_unavailable",
        ) from exc
    finally:
        replica.outstanding -= 1
    if not 200 <= response.status < 300:
        info: ErrorInfo = http_error(response.status, data, replica.name, model_id)
        raise SluicegateError(info.kind, info.message, param=info.param, code=info.code)
    answer = orjson.loads(data)
    if isinstance(answer, dict) and "model" in answer:
        answer["model"] = model_id  # the client asked for our id
    return answer
