"""CORS for browser apps on another origin (`[server] cors_origins`): preflights answered here,
before the API-key check (a browser sends no credentials on a preflight), and the
`Access-Control-Allow-Origin` header added to the head of every response — a route's, an
error's, a 401's, a stream's — for an allowed origin. A pure ASGI middleware: a request without
an allowed `Origin` passes through untouched, and a stream's body frames never pass through it
(only its head does), so an open stream holds no frame of it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The methods a preflight is told, llama-server's list; a preflight asking for one of ours not in
# it (PATCH: the admin API's key update) has it added, so the answer stays llama-server's for
# the requests its clients make.
ALLOWED_METHODS = b"GET, POST, DELETE, OPTIONS"
MORE_METHODS = frozenset({b"PUT", b"PATCH"})
PREFLIGHT_MAX_AGE = b"600"  # seconds a browser may reuse a preflight's answer
# Headers a page's script may read besides the CORS-safelisted ones: all of ours are harmless.
EXPOSED = b"*"
# llama-server's keyword: any origin on this machine (a loopback host, any scheme and port).
LOCALHOST = "localhost"
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


def normal_origin(origin: str) -> str:
    """An origin as browsers send it: scheme://host[:port], lower case, no trailing slash."""
    return origin.strip().rstrip("/").lower()


class CORSMiddleware:
    """Allow the configured origins (`*`: any) to call every route from a browser."""

    def __init__(self, app: ASGIApp, origins: Iterable[str]) -> None:
        self.app = app
        listed = [normal_origin(o) for o in origins]
        self.any = "*" in listed
        self.local = LOCALHOST in listed
        self.origins = frozenset(o.encode("latin-1") for o in listed if o not in ("*", LOCALHOST))

    def allowed(self, origin: bytes) -> bool:
        return self.any or origin.rstrip(b"/").lower() in self.origins or (self.local and _is_local(origin))

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        if scope["type"] != "http" or not (self.any or self.local or self.origins):
            return self.app(scope, receive, send)
        origin = request_header(scope, b"origin")
        preflight = (
            request_header(scope, b"access-control-request-method") if scope["method"] == "OPTIONS" else None
        )
        if origin is None or not self.allowed(origin):
            if preflight and origin is not None:  # answered alike on every path, as llama-server does
                return _refused_preflight(send)
            return self.app(scope, receive, send)  # no CORS headers: the browser refuses it
        if preflight:
            return self._preflight(scope, send, origin, preflight)
        return self.app(scope, receive, _adding(send, origin))

    async def _preflight(self, scope: Scope, send: Send, origin: bytes, method: bytes) -> None:
        method = method.strip().upper()
        methods = ALLOWED_METHODS + b", " + method if method in MORE_METHODS else ALLOWED_METHODS
        headers = [
            *_allow(origin),
            (b"access-control-allow-methods", methods),
            (b"access-control-max-age", PREFLIGHT_MAX_AGE),
            (b"vary", b"Origin, Access-Control-Request-Method, Access-Control-Request-Headers"),
            (b"content-length", b"0"),
        ]
        if asked := request_header(scope, b"access-control-request-headers"):
            headers.append(
                (b"access-control-allow-headers", asked)
            )  # whatever it asks: the key check still runs
        if request_header(scope, b"access-control-request-private-network") == b"true":
            headers.append(
                (b"access-control-allow-private-network", b"true")
            )  # a public page calling localhost
        # 200, as llama-server answers (a browser takes any 2xx; some old clients want 200)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b""})


async def _refused_preflight(send: Send) -> None:
    """A preflight from an origin not allowed: an empty 200 without CORS headers, so the browser
    refuses the call it asks about."""
    headers = [(b"content-length", b"0"), (b"vary", b"Origin")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


def _is_local(origin: bytes) -> bool:
    """An origin whose host is this machine's loopback name or address (`localhost.evil.com`
    and `notlocalhost` are not)."""
    try:
        return urlsplit(origin.decode("latin-1")).hostname in LOOPBACK_HOSTS
    except ValueError:  # a malformed origin (a bad IPv6 literal): not local
        return False


def request_header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


def _allow(origin: bytes) -> list[tuple[bytes, bytes]]:
    # The origin itself (with `Vary: Origin`), so a cache never hands one origin's answer to
    # another. No credentials: keys travel in a header the page sets, never in cookies.
    return [(b"access-control-allow-origin", origin)]


def _adding(send: Send, origin: bytes) -> Send:
    """`send`, with the CORS headers added to the response's head."""
    extra = [*_allow(origin), (b"access-control-expose-headers", EXPOSED), (b"vary", b"Origin")]

    async def send_with_cors(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *extra]}
        await send(message)

    return send_with_cors
