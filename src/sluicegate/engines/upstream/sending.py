"""Sending a request to an upstream's replicas in turn until one answers: the step between a
relay's start and the upstream's answer, once a request (and once an embedding or a rerank).

Its own module, compiled (`_compiled.py`): the relay (compiled) awaits it and it awaits the
connection pool (compiled), so the chain from the relay to the socket's write is native. As a
method of `UpstreamEngine` (base.py, interpreted: its async generators are not compiled by
mypyc) it was one interpreted coroutine between two compiled ones on every start.
"""

from __future__ import annotations

from collections.abc import Sequence

from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.engines.upstream.errors import http_error
from sluicegate.engines.upstream.http import ConnectFailed, StreamingResponse
from sluicegate.engines.upstream.replicas import Replica, ReplicaSet
from sluicegate.engines.upstream.routing import with_slot
from sluicegate.engines.upstream.timeouts import Clocks


async def send(
    replicas: ReplicaSet,
    model_id: str,
    path: str,
    body: bytes,
    clocks: Clocks,
    trace_headers: bytes = b"",
    content_type: bytes = b"application/json",
    keys: Sequence[bytes] = (),
    pinned: list[int] | None = None,
) -> tuple[Replica | None, StreamingResponse | None, ErrorInfo | None]:
    """Send to replicas in turn until one answers; (replica, 2xx response, None) or the error
    to fail with. The returned replica's `outstanding` count is held. `keys`: the request's
    prefix hashes, for prefix-affinity routing; `pinned` (if given) receives the llama-server
    slot the request was sent to, held for the caller to unpin."""
    tried: set[Replica] = set()
    error: ErrorInfo | None = None  # made when a replica fails, not on every request
    while (replica := replicas.pick(tried, keys)) is not None:
        tried.add(replica)
        replica.outstanding += 1
        response: StreamingResponse | None = None
        slot = replicas.pin(replica, keys) if pinned is not None and keys else None
        if slot is not None and b'"id_slot"' in body:  # the client named its own slot
            replicas.unpin(replica, slot)
            slot = None
        try:
            clocks.waiting()
            sent = body if slot is None else with_slot(body, slot)
            response = await replica.pool.post_stream(path, sent, trace_headers, content_type)
            clocks.idle()
            if 200 <= response.status < 300:
                if not replica.healthy:
                    replicas.answered(replica)
                if keys:
                    replicas.served(replica, keys)
                if slot is not None and pinned is not None:
                    pinned.append(slot)
                return replica, response, None
            clocks.waiting()
            detail = await response.error_body()
            clocks.idle()
            error = http_error(response.status, detail, replica.name, model_id)
            if response.status < 500:
                return None, None, error
        except ConnectFailed as exc:
            replicas.connect_failed(replica, str(exc))
            kind = ErrorKind.TIMEOUT if exc.timed_out else ErrorKind.UPSTREAM
            code = "upstream_connect_timeout" if exc.timed_out else "upstream_unavailable"
            error = ErrorInfo(kind, f"Could not reach the upstream {replica.name}: {exc}", code=code)
        except BaseException:
            replica.outstanding -= 1
            replicas.unpin(replica, slot)
            if response is not None:
                await response.aclose()
            raise
        replica.outstanding -= 1
        replicas.unpin(replica, slot)
        if response is not None:
            await response.aclose()
    if error is None:
        error = ErrorInfo(
            ErrorKind.UPSTREAM, "No upstream replica could be tried.", code="upstream_unavailable"
        )
    return None, None, error
