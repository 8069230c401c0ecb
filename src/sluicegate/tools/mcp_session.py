"""One live MCP session, owned by one task.

The SDK's transports and `Client` are anyio context managers whose cancel scopes must be entered
and left by the same task, and whose transport task group can blow up from underneath (a server
killed mid-call raises out of the transport, not out of the call). So one owner task enters them,
runs every request as a child of its own task group, and hands results back through futures:
whatever happens to the connection, each caller gets an answer, never a hang or a stray
exception, and the connection just ends up dead for the provider to replace.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import anyio
from anyio.abc import TaskGroup
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, INVALID_REQUEST

log = logging.getLogger(__name__)

T = TypeVar("T")
TransportFactory = Callable[[], AbstractAsyncContextManager[Any]]


class McpConnectionError(Exception):
    """The connection failed or was lost. `delivered` is False when the request certainly never
    reached a server (refused connection, expired session), so sending it again is safe."""

    def __init__(self, message: str, *, delivered: bool = True) -> None:
        super().__init__(message)
        self.delivered = delivered


class McpTimeout(Exception):
    pass


class McpConnection:
    def __init__(self, label: str, transport: TransportFactory) -> None:
        self.label = label
        self._transport = transport
        self._client: Client | None = None
        self._group: TaskGroup | None = None
        self._ready: asyncio.Future[None] | None = None
        self._closing = asyncio.Event()
        self._owner: asyncio.Task[None] | None = None
        self._jobs: set[asyncio.Future[Any]] = set()
        self._failure = "the connection is closed"

    @property
    def alive(self) -> bool:
        return self._client is not None and not self._closing.is_set() and not _reader_closed(self._client)

    async def open(self, timeout: float) -> None:
        """Connect and complete the MCP handshake, or raise McpConnectionError / McpTimeout."""
        self._ready = asyncio.get_running_loop().create_future()
        self._owner = asyncio.create_task(self._own(), name=f"mcp:{self.label}")
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except TimeoutError:
            await self.aclose()
            raise McpTimeout(
                f"connecting to MCP server '{self.label}' took longer than {timeout:g}s"
            ) from None
        except BaseException:
            await self.aclose()
            raise

    async def run(self, job: Callable[[Client], Awaitable[T]], timeout: float) -> T:
        """Run `job` inside the session; on timeout or caller cancellation the job is cancelled."""
        if not self.alive or self._group is None:
            raise McpConnectionError(self._failure, delivered=False)
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        scope = anyio.CancelScope()
        self._jobs.add(future)
        self._group.start_soon(self._run_job, job, future, scope)
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            raise McpTimeout(f"no answer within {timeout:g}s") from None
        finally:
            scope.cancel()
            self._jobs.discard(future)

    async def aclose(self) -> None:
        self._closing.set()
        owner, self._owner = self._owner, None
        if owner is None or owner.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(owner), 10)
        except TimeoutError:
            owner.cancel()
            with contextlib.suppress(BaseException):
                await owner

    async def _own(self) -> None:
        assert self._ready is not None
        failure: BaseException | None = None
        try:
            async with Client(self._transport()) as client, anyio.create_task_group() as group:
                self._client, self._group = client, group
                self._ready.set_result(None)
                await self._closing.wait()
                group.cancel_scope.cancel()
        except BaseException as exc:  # the transport's task group raises whatever killed it
            failure = exc
            if not isinstance(exc, Exception | asyncio.CancelledError):
                raise
        finally:
            self._closing.set()
            self._client = self._group = None
            if failure is not None:
                what = "lost" if self._ready.done() else "could not be established"
                self._failure = f"connection to MCP server '{self.label}' {what}: {describe(failure)}"
            error = McpConnectionError(self._failure, delivered=not _undelivered(failure))
            if not self._ready.done():
                self._ready.set_exception(error)
            for future in self._jobs:
                if not future.done():
                    future.set_exception(error)
            if failure is not None:
                log.warning("%s", self._failure)

    async def _run_job(
        self, job: Callable[[Client], Awaitable[T]], future: asyncio.Future[T], scope: anyio.CancelScope
    ) -> None:
        assert self._client is not None
        with scope:
            try:
                result = await job(self._client)
            except MCPError as exc:
                if exc.code == CONNECTION_CLOSED or (
                    exc.code == INVALID_REQUEST and "Session" in exc.message
                ):
                    # The server went away (or forgot our session): this connection is done.
                    self._failure = f"connection to MCP server '{self.label}' lost: {exc.message}"
                    self._closing.set()
                    delivered = exc.code == CONNECTION_CLOSED
                    _settle(future, exc=McpConnectionError(self._failure, delivered=delivered))
                else:
                    _settle(future, exc=exc)
            except Exception as exc:
                _settle(future, exc=exc)
            else:
                _settle(future, result=result)


def _settle(future: asyncio.Future[T], *, result: T | None = None, exc: BaseException | None = None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)  # type: ignore[arg-type]


def _reader_closed(client: Client) -> bool:
    """Whether the session has already seen its transport end (a stdio server that exited while
    idle). The SDK keeps this on its private dispatcher; without it, a dead session is only found
    by the next request failing, which then cannot be resent safely."""
    dispatcher = getattr(client.session, "_dispatcher", None)
    return getattr(dispatcher, "_closed", False) is True


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def describe(exc: BaseException) -> str:
    """One line for an exception that may be a (nested) exception group from the transport."""
    parts = []
    for leaf in _leaves(exc):
        text = str(leaf) or type(leaf).__name__
        if isinstance(leaf, MCPError):
            text = leaf.message
        if text not in parts:
            parts.append(text)
    return "; ".join(parts) or type(exc).__name__


def _undelivered(exc: BaseException | None) -> bool:
    """Whether the failure happened before anything reached a server (nothing to resend safely
    otherwise): a refused or unresolvable connection, or a process that could not start."""
    if exc is None:
        return True
    leaves = _leaves(exc)
    return all(
        type(leaf).__name__ in ("ConnectError", "ConnectTimeout") or isinstance(leaf, OSError)
        for leaf in leaves
    )
