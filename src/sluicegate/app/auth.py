"""API keys, checked before routing: with keys configured, nothing but `/health` and the
playground's static files answers a request without one — not even with a 404 or a 405, so
routes cannot be enumerated. A pure ASGI middleware: nothing is read from the request but its
path and two headers.

Keys are compared in constant time against every configured key (no early exit), as SHA-256
digests (equal lengths), so neither the key, its length, nor which key matched leaks through
timing. The 401 body takes the error shape of the
API the path belongs to.

Runtime keys (`store/keys.py`, issued through the admin API or `sluicegate keys`) are found by
their digest in the replica's `KeyRing`; a matched one is put in the scope (`KEY_SCOPE`) for the
routes that enforce its models. `/admin/` paths take only `[server] admin_key`, which also reads `/metrics`. With an admin
key set, every API path needs a key, even when no key is in the config file.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable
from typing import Any

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from sluicegate.app.keyring import KeyRing
from sluicegate.app.limits import KeyAccounting
from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.core.scope import KEY_SCOPE
from sluicegate.dialects.registry import dialect_for
from sluicegate.observe.metrics import METRICS

OPEN_PATHS = frozenset({"/health", "/v1/health", "/", "/overview", "/models"})  # the pages hold no data
OPEN_PREFIXES = ("/playground/",)  # the playground page's assets (the page itself is `/`)
MISSING = "Missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'."
INCORRECT = "Incorrect API key provided."
NOT_ADMIN = "This path needs the admin key ([server] admin_key)."
ADMIN_PREFIX = "/admin/"


def is_open(path: str) -> bool:
    return path in OPEN_PATHS or path == "/playground" or path.startswith(OPEN_PREFIXES)


def is_open_request(scope: Scope) -> bool:
    """`/models` is the page for a browser but the JSON listing for an API client: only the
    page is open."""
    if scope["path"] == "/models":
        return any(name == b"accept" and b"text/html" in value for name, value in scope["headers"])
    return is_open(scope["path"])


def presented_key(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The key a request carries: `Authorization: Bearer KEY`, else `x-api-key: KEY`."""
    api_key: bytes | None = None
    for name, value in headers:
        if name == b"authorization" and value[:7].lower() == b"bearer ":
            return value[7:].strip()
        if name == b"x-api-key":
            api_key = value.strip()
    return api_key


def digest(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()


def key_matches(presented: bytes, digests: list[bytes]) -> bool:
    """Compare with every key's digest, always all of them: the time taken says nothing about
    which matched, or how long the keys are."""
    wanted = digest(presented)
    matched = False
    for key in digests:
        matched |= hmac.compare_digest(wanted, key)
    return matched


def error_body(path: str, info: ErrorInfo) -> dict[str, Any]:
    """The error body in the shape of the API the path belongs to (the dialect registry's)."""
    return dialect_for(path).error(info)


class APIKeyMiddleware:
    """Refuse every request without a configured or issued key (401) before the router sees it."""

    def __init__(
        self,
        app: ASGIApp,
        api_keys: list[str],
        admin_key: str | None = None,
        keyring: KeyRing | None = None,
        accounting: KeyAccounting | None = None,
    ) -> None:
        self.app = app
        self.keys = [digest(key.encode()) for key in api_keys]
        self.admin = [digest(admin_key.encode())] if admin_key else []
        self.keyring = keyring
        self.accounting = accounting
        self.required = bool(self.keys or self.admin)

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        # A plain function handing on the inner app's awaitable: a request that passes holds
        # no frame of this middleware for as long as it streams.
        if not self.required or scope["type"] not in ("http", "websocket") or is_open_request(scope):
            return self.app(scope, receive, send)
        presented = presented_key(scope["headers"])
        if scope["path"].startswith(ADMIN_PREFIX):
            if presented and key_matches(presented, self.admin):
                return self.app(scope, receive, send)
            return self._refuse(scope, send, presented, NOT_ADMIN if presented else MISSING)
        if presented:
            if key_matches(presented, self.keys):
                return self.app(scope, receive, send)
            if scope["path"] == "/metrics" and key_matches(presented, self.admin):  # operators scrape
                return self.app(scope, receive, send)
            if self.keyring is not None:
                record = self.keyring.find(presented)
                if record is not None:
                    scope[KEY_SCOPE] = record
                    if self.accounting is not None:
                        return self.accounting.serve(self.app, scope, receive, send, record)
                    return self.app(scope, receive, send)
        return self._refuse(scope, send, presented, INCORRECT if presented else MISSING)

    async def _refuse(self, scope: Scope, send: Send, presented: bytes | None, message: str) -> None:
        METRICS.inc("sluicegate_auth_failures_total")
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": "invalid API key"})
            return
        info = ErrorInfo(ErrorKind.AUTHENTICATION, message, code="invalid_api_key")
        body = orjson.dumps(error_body(scope["path"], info))
        await send(
            {
                "type": "http.response.start",
                "status": info.status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="sluicegate"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
