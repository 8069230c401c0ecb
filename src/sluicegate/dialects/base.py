"""The Dialect interface: what a wire dialect gives the one turn runner, and nothing more.

A dialect translates. Its parser turns a wire request into a `Turn` (a `ChatRequest` plus the
few facts the runner needs to orchestrate: stream or not, stored or not, which server-side
tools, which conversation it continues); its encoder turns canonical events into `Frame`s and
the accumulated result into the non-streaming body; its error renderer gives the error shape.
The runner (`sluicegate.turn`) does everything else — admission, conversation, tools, the
model, the pipeline, streaming or collecting, persisting, releasing — once, for every dialect.

A dialect declares itself once: its package holds one `Registration` — its specs (paths, error
shape, framing, heartbeat), how to build its `Dialect`s from the server's settings, its non-turn
routes, its chat routes' hooks and the modules to compile — as `REGISTRATION` in
`<package>/registration.py` (where the build and a checkout not reinstalled look for a built-in
one), named by an entry point in the `sluicegate.dialects` group (pyproject.toml), the group a
third-party package uses too. `dialects/registry.py` discovers the registrations; the app
(`app/dialects.py`) builds routing, auth answers, error shapes and metrics labels from them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from sluicegate.config import Settings
from sluicegate.core.accumulate import Accumulator, ChatResult
from sluicegate.core.errors import ErrorInfo
from sluicegate.core.events import Event, ToolsListed, Usage
from sluicegate.core.frames import Frame
from sluicegate.core.items import ConversationInput
from sluicegate.core.request import ChatRequest, RawPrompt, ServerTool
from sluicegate.core.sealing import Sealer
from sluicegate.core.tool_selection import ToolSelection

__all__ = ["ConversationInput"]  # defined in core (the conversation reads it too); re-exported

Json = dict[str, Any]
TransportName = Literal["sse", "ndjson"]


def _own_status(info: ErrorInfo) -> int:
    return info.status


@dataclass(frozen=True, slots=True)
class DialectSpec:
    """What everything outside a dialect needs to know about it, without importing its code:
    the paths it owns, how its errors look, how its streams are framed and kept alive."""

    name: str  # metrics and logs label, e.g. "chat_completions"
    prefixes: tuple[str, ...]  # the path prefixes it owns (the longest match wins)
    error: Callable[[ErrorInfo], Json]  # the error body in this dialect's shape
    status: Callable[[ErrorInfo], int] = _own_status  # its HTTP status (Anthropic: 529)
    transport: TransportName = "sse"  # how its streams are framed
    heartbeat: Frame | None = None  # sent while a stream is quiet; None: the transport's own
    # The body of an error answered with a status of its own (a router's 405), for a shape that
    # carries the status in its body (llama-server's); None: `error` serves.
    error_at: Callable[[ErrorInfo, int], Json] | None = None

    def body(self, info: ErrorInfo, status: int) -> Json:
        """The error body for `info` answered with `status`."""
        return self.error(info) if self.error_at is None else self.error_at(info, status)


@dataclass(slots=True)
class ServerTools:
    """The server-side tools a turn gets and how the tool loop treats them."""

    selection: ToolSelection
    param: str  # the request parameter a refused selection is blamed on
    needs_approval: Callable[[ServerTool], bool] | None = None  # Responses' MCP `require_approval`
    # Responses shows `mcp_list_tools` only for the servers the request names: their labels.
    listed_labels: frozenset[str] | None = None

    def shows(self, listing: ToolsListed) -> bool:
        return self.listed_labels is None or listing.provider.server_label in self.listed_labels


@dataclass(slots=True)
class Turn:
    """A parsed request, dialect-neutral where the runner looks, opaque (`request`) elsewhere."""

    request: Any  # the dialect's own parsed request, for its encoder
    chat: ChatRequest  # messages are filled in by the runner when `conversation` is set
    stream: bool
    conversation: ConversationInput | None = None
    tools: ServerTools | None = None
    store: bool = False  # persist the turn (and answer with an id that retrieves it)
    background: bool = False  # run detached from the connection (Responses `background`)
    id_prefix: str = "resp_"  # the id the turn gets (`chatcmpl-…`, `msg_…`, `resp_…`)
    id_length: int = 48
    headers: dict[str, str] = field(default_factory=dict)  # the dialect's own response headers


@dataclass(slots=True)
class EncoderContext:
    """What the runner knows once the model is open, for the dialect's encoder."""

    turn_id: str
    created: int
    instance_id: str
    accumulator: Accumulator
    provider_info: Callable[[str], Json | None]  # LM Studio `provider_info` of a server tool
    stored: bool  # the turn will be persisted under `turn_id`
    scope: str = ""  # whose turn it is (a hash of the API key): what sealed content is bound to
    # The prompt the model's chat template rendered for the turn, asked for at the end (None:
    # the engine renders none); llama-server's `__verbose` shows it.
    prompt_text: Callable[[], str | None] = lambda: None


class Encoder(Protocol):
    """Canonical events → frames, for one response. `encode` of the terminal event (Finished,
    Failed) yields the dialect's ending; `closing` what follows it on the wire (`[DONE]`)."""

    def opening(self) -> list[Frame]: ...

    def encode(self, event: Event) -> list[Frame]: ...

    def cancelled(self, reason: str) -> list[Frame]: ...

    def closing(self) -> list[Frame]: ...

    def body(self, result: ChatResult) -> Json:
        """The non-streaming body, from the same accumulator a stream feeds."""
        ...

    def response_object(self) -> Json | None:
        """The stored response object (Responses shape), or None to let the conversation
        package build it from the accumulator."""
        ...


class Choices(Protocol):
    """A request's `n` > 1 choices (OpenAI's `n`): the runner runs one generation per choice,
    each through its own encoder (`encoder(i)`: its frames say choice `i`; it leaves the usage
    out), and the request's usage is summed once (`ending`, `body`)."""

    def encoder(self, index: int, context: EncoderContext) -> Encoder: ...

    def ending(self, usage: Usage) -> list[Frame]:
        """A stream's frames after every choice ended, before `closing` (the summed usage)."""
        ...

    def body(self, results: Sequence[ChatResult], usage: Usage) -> Json | list[Json]:
        """The non-streaming body of every choice, in order, with the summed usage (an array:
        llama-server's answer to several prompts)."""
        ...

    def prompt(self, index: int) -> RawPrompt | None:
        """Choice `index`'s own prompt (llama-server's several prompts in one request: each
        is a generation, with the request's seed); None: the request's prompt, `seed + i`."""
        ...


class Dialect(ABC):
    """One wire dialect: parse, encode, render errors; the runner serves its chat route."""

    spec: DialectSpec  # its registry entry: name, paths, error shape, transport, heartbeat
    path: str  # the chat route, e.g. "/v1/chat/completions"
    also: tuple[str, ...] = ()  # other paths the same route answers (OpenAI's without `/v1`)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def heartbeat(self) -> Frame | None:
        return self.spec.heartbeat

    @abstractmethod
    def parse(self, body: Any, query: Mapping[str, str], headers: Mapping[str, str]) -> Turn:
        """Wire request → Turn; invalid input raises `SluicegateError` naming the parameter."""

    def resolve_model(self, requested: str, models: Mapping[str, Any]) -> str:
        """The served model id a request's model name means (Ollama's `name:tag`); the name
        itself by default (the registry answers an unknown one with its 404)."""
        return requested

    def check(self, turn: Turn, capabilities: Any) -> None:  # noqa: B027 - optional hook
        """Refuse what the chosen model cannot do (its `EngineInfo`); nothing by default."""

    @abstractmethod
    def encoder(self, turn: Turn, context: EncoderContext) -> Encoder: ...

    def choices(self, turn: Turn) -> Choices | None:
        """How this dialect answers `n` > 1 choices; None (the default): it has no `n`."""
        return None

    def error(self, info: ErrorInfo) -> Json:
        """The error body in this dialect's shape (the status is `status(info)`)."""
        return self.spec.error(info)

    def status(self, info: ErrorInfo) -> int:
        """The HTTP status of an error; a dialect may map kinds differently (Anthropic: 529)."""
        return self.spec.status(info)

    def failure(self, result_error: ErrorInfo, body: Json | None) -> ErrorInfo:
        """The error a failed non-streaming turn answers with (its body may refine it)."""
        return result_error


@dataclass(frozen=True, slots=True)
class DialectContext:
    """What building a dialect may read: the server's settings and the few live objects some
    dialects are constructed with."""

    settings: Settings
    sealer: Sealer  # seals compactions and reasoning for clients (Responses)
    plugin_ids: Callable[[], list[str]]  # the configured tool providers (Responses' hosted tools)
    # The served models by id (`Model` objects, read by duck typing: a dialect imports no engine).
    models: Callable[[], Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class Registration:
    """Everything the server needs to serve one dialect package, declared once, in that package.

    The routes, hooks and WebSocket apps are named as `"module:attribute"` (the entry-point
    syntax) and loaded by the app: a built-in dialect's live in `sluicegate.routes` or
    `sluicegate.turn`, layers above the dialects that a dialect package must not import.
    """

    # Every API the package owns: paths, error shape and status, transport, heartbeat. The
    # registry's table (routing's 404/405 bodies, auth's 401s, metrics labels) is these.
    specs: tuple[DialectSpec, ...]
    # Its chat routes: one `Dialect` per route (`Dialect.path`), each served by the turn runner.
    build: Callable[[DialectContext], Sequence[Dialect]]
    # Lists of its non-turn routes (Starlette routes), e.g. "sluicegate.routes.ollama_routes:ROUTES".
    routes: tuple[str, ...] = ()
    # A `TurnHooks` its chat routes run with (`turn/runner.py`): what they answer besides turns.
    hooks: str | None = None
    # A WebSocket app its chat routes also answer on: `(TurnEndpoint) -> ASGI app`.
    websocket: str | None = None
    # Its modules mypyc compiles, relative to the package ("encoder"). The build reads the
    # package's `COMPILED` constant from `registration.py` without importing it (`_compiled.py`);
    # pass that same constant here.
    compiled: tuple[str, ...] = ()
