"""The one place the HTTP client lives (httpx), so a faster one can replace it here alone.

One `HttpPool` per replica: a connection pool kept warm between requests. The engine needs
three things from it: send a streaming POST and get the status once the upstream answers,
iterate the body's bytes as they arrive, and close at once (which closes the connection when
the body was not read to its end, so a cancelled request stops the upstream's generation).
Proxies from the environment are not used: upstreams are addressed directly.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import httpx

from sluicegate.engines.upstream.errors import MAX_ERROR_BODY

# httpx logs every request at INFO: for a gateway that is one line per token stream.
logging.getLogger("httpx").setLevel(logging.WARNING)


class ConnectFailed(Exception):
    """The upstream could not be reached or dropped the connection before answering: nothing
    was generated, so another replica may be tried."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class StreamingResponse:
    __slots__ = ("_response", "status")

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code

    def chunks(self) -> AsyncIterator[bytes]:
        return self._response.aiter_raw()

    async def error_body(self) -> bytes:
        """The start of a non-2xx body; the rest is not waited for."""
        body = b""
        async for chunk in self._response.aiter_raw():
            body += chunk
            if len(body) >= 4 * MAX_ERROR_BODY:
                break
        return body

    async def aclose(self) -> None:
        await self._response.aclose()


def _describe(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


class HttpPool:
    def __init__(self, base_url: str, headers: dict[str, str], *, connect_timeout: float | None) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = httpx.AsyncClient(
            base_url=self.base_url + "/",
            headers=headers,
            timeout=httpx.Timeout(None, connect=connect_timeout),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
            trust_env=False,
        )

    async def post_stream(self, path: str, body: bytes) -> StreamingResponse:
        """POST `body` (JSON); returns when the status line and headers arrived."""
        request = self._client.build_request(
            "POST", path.lstrip("/"), content=body, headers={"Content-Type": "application/json"}
        )
        try:
            response = await self._client.send(request, stream=True)
        except httpx.ConnectTimeout as exc:
            raise ConnectFailed(f"connecting timed out ({_describe(exc)})", timed_out=True) from exc
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise ConnectFailed(_describe(exc)) from exc
        return StreamingResponse(response)

    async def get(self, path: str, *, timeout: float) -> tuple[int, bytes]:
        """A small GET (health checks, model lists); transport failures raise `ConnectFailed`."""
        try:
            response = await self._client.get(path.lstrip("/"), timeout=timeout)
        except httpx.TransportError as exc:
            raise ConnectFailed(_describe(exc), timed_out=isinstance(exc, httpx.TimeoutException)) from exc
        return response.status_code, response.content

    async def aclose(self) -> None:
        await self._client.aclose()
