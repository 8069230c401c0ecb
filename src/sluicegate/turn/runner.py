"""The one turn runner: every dialect's chat route, from request bytes to the last frame.

parse → model → conversation → admit → tool set → open the model → (wait for an upstream's
answer) → pipeline → stream or collect → persist → release.

Everything a turn takes — its admission place, its tool set (request-scoped MCP sessions), its
engine generation (a queue place or a slot) — is pushed onto one owner (`core.owned.Owned`) the
moment it is taken, and released by that owner however the request ends: a parse error, a
refusal, an exception before the first byte, a client gone mid-stream. A background run takes
everything over (`pop_all`) and releases it when the run ends. Nothing depends on garbage
collection.

The runner is an ASGI app (one per dialect), so the whole request — including streaming — runs
in one coroutine inside that `async with`. Other transports (the Responses WebSocket,
`turn/websocket.py`) bring a `TurnSource` of their own to the same `prepare` and stream the same
pipeline; only how the frames reach the client differs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from starlette.datastructures import Headers, QueryParams
from starlette.types import Receive, Scope, Send

from sluicegate.conversation.record import stored_turn
from sluicegate.conversation.resolve import Resolved, resolve
from sluicegate.core.accumulate import Accumulator
from sluicegate.core.deadlines import Deadline
from sluicegate.core.errors import ErrorInfo, ErrorKind, SluicegateError
from sluicegate.core.frames import DONE, Frame
from sluicegate.core.ids import new_id
from sluicegate.core.items import items_to_json
from sluicegate.core.owned import Owned
from sluicegate.core.pipeline import unless_disconnected
from sluicegate.core.request import ChatRequest
from sluicegate.core.scope import KEY_SCOPE, IssuedKey, scope_of
from sluicegate.dialects.base import Dialect, Encoder, EncoderContext, Turn
from sluicegate.engines.base import Engine
from sluicegate.engines.lane import Lane
from sluicegate.engines.models import Model
from sluicegate.observe.metrics import METRICS, Key
from sluicegate.observe.requests import EventTap
from sluicegate.store.base import StoredResponse
from sluicegate.tools.catalog import ToolSet
from sluicegate.transport.answer_first import Opened, await_answer
from sluicegate.transport.answer_send import AnswerSend
from sluicegate.transport.ndjson import NDJSON
from sluicegate.transport.sse import frame_bytes, sse_framing
from sluicegate.transport.stream import (
    Chunk,
    Framing,
    Sink,
    StreamOutcome,
    body_writer,
    server_send,
    stream_chunks,
)
from sluicegate.turn.choices import ChoicesRun, open_choices
from sluicegate.turn.http import (
    INSTANCE_HEADER,
    JSONResponse,
    allow_model,
    key_in,
    read_json_body,
    safe_headers,
    until_disconnect,
)
from sluicegate.turn.images import load_audio, load_images
from sluicegate.turn.live import BackgroundRun, LiveTurn
from sluicegate.turn.pipeline import LANE_ENABLED, Persist, TurnPipeline
from sluicegate.turn.record import built_response
from sluicegate.turn.state import AppState
from sluicegate.turn.tools import open_model, request_toolset

log = logging.getLogger(__name__)
Json = dict[str, Any]

# A dialect's declared transport (its registry entry) → the framing its streams get.
TRANSPORTS: dict[str, Callable[[Frame | None], Framing]] = {"sse": sse_framing, "ndjson": lambda _: NDJSON}
ANSWER_WAIT_SECONDS = 15.0  # when heartbeats are off: how long a stream waits for an upstream
NO_QUERY = QueryParams()  # immutable: shared by every request without a query string


@dataclass(slots=True)
class TurnSource:
    """One turn's request as its transport received it (an HTTP POST, a WebSocket message)."""

    body: Any  # the parsed JSON body
    query: Mapping[str, str]
    headers: Mapping[str, str]
    scope: str  # whose turn it is (`request_scope`)
    disconnected: Callable[[], Awaitable[object]]  # returns when the client has gone
    # A transport's own hooks: adjust the parsed turn (before anything is taken), and keep the
    # record of every turn it ran, stored or not (a WebSocket's connection-local state).
    adapt: Callable[[Turn], None] | None = None
    remember: Callable[[StoredResponse], None] | None = None
    key: IssuedKey | None = None  # the runtime key it came with (its models are enforced)
    sink: Sink | None = None  # the server's own line to the client (tells when it leaves)


@dataclass(slots=True)
class Prepared:
    """A turn ready to run: everything it holds is on the runner's `Owned`."""

    turn: Turn
    turn_id: str
    encoder: Encoder
    pipeline: TurnPipeline
    headers: dict[str, str]
    input_items: list[Json]
    scope: str  # whose turn it is (`core/scope.py`): what it is stored and sealed under
    resolved: Resolved | None
    lane: TurnPipeline | None = None  # a plain stream given a fast lane: the pipeline drives it
    choices: ChoicesRun | None = None  # `n` > 1: every choice's pipeline (`pipeline` is the first)


class TurnHooks:
    """A chat route's own steps around its turns, for a dialect whose chat route also answers
    what is no turn (Ollama's load and unload). A dialect's registration names them; both do
    nothing by default."""

    async def answer_without_turn(self, dialect: Dialect, state: AppState, source: TurnSource) -> Json | None:
        """The answer to a request on the chat route that is no turn, or None to run the turn."""
        return None

    def after_turn(
        self, dialect: Dialect, state: AppState, source: TurnSource
    ) -> Callable[[], Awaitable[None]] | None:
        """What to do once this request's turn has answered with 200 and released all it held,
        decided before the turn runs (the request's body is not kept for a stream's life)."""
        return None


NO_HOOKS = TurnHooks()


class TurnEndpoint:
    """The ASGI endpoint of one dialect's chat route."""

    def __init__(self, dialect: Dialect, hooks: TurnHooks = NO_HOOKS) -> None:
        self.dialect = dialect
        self.hooks = hooks
        self.framing: Framing = TRANSPORTS[dialect.spec.transport](dialect.heartbeat)
        self._counted: dict[int, Key] = {}  # status → its `sluicegate_requests_total` key
        self._served: tuple[object, AppState] | None = None  # the app last served, and its state
        # What does not change per request, read once (each is a lookup or a call a start).
        self._checks = type(dialect).check is not Dialect.check  # the default checks nothing
        self._own_names = dialect.resolve_model  # the dialect's naming, for `Registry.resolve`
        self._own_models: dict[str, Model] | None = None  # the registry's table it was bound to
        self._resolve_own: Callable[[str], str] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The whole request in one coroutine, its count too: each step of the request's task
        # resumes through every coroutine of the chain, so a frame less here is one less on each
        # of a start's steps. An exception out of it counts as a 500, as it always has.
        # What the turn needs is read from the ASGI scope itself: no Starlette `Request` (its
        # properties are calls), one `Headers` for the dialect's parse and the API key.
        app, served = scope["app"], self._served
        if served is not None and served[0] is app:
            state = served[1]
        else:  # the app's state is set once, when it is built (`app/factory.py`)
            state = app.state.sluicegate
            self._served = (app, state)
        settings = state.settings
        answer = AnswerSend(send)
        status = 500
        owned = Owned()
        try:
            try:
                try:
                    headers = Headers(scope=scope)
                    key = scope.get(KEY_SCOPE)
                    source = TurnSource(  # (built here, not in a coroutine of its own: once a request)
                        await read_json_body(
                            scope, receive, settings.max_body_bytes, settings.max_json_depth
                        ),
                        QueryParams(scope["query_string"]) if scope["query_string"] else NO_QUERY,
                        headers,
                        # `scope_for`, inline: keyed when keys are configured or a runtime key came
                        scope_of(key_in(headers)) if settings.api_keys or key is not None else "",
                        # (a partial, not a lambda: no cell for `receive` in this frame)
                        partial(until_disconnect, receive),
                        None,
                        None,
                        key,
                        body_writer(scope),
                    )
                    hooks = self.hooks
                    if (
                        hooks is not NO_HOOKS
                    ):  # a route with steps of its own (Ollama's); else two calls saved
                        body = await hooks.answer_without_turn(self.dialect, state, source)
                        if body is not None:
                            status = await self._send_json(body, answer, {})
                            return
                        after = hooks.after_turn(self.dialect, state, source)
                        if after is not None:  # released last: after everything the turn takes
                            owned.push_async_callback(_if_answered, answer, after)
                    prepared = await self.prepare(state, source, owned)
                    source.body = None  # parsed: not kept for the stream's life by this frame
                except SluicegateError as exc:
                    status = await self._send_error(exc.info, answer)
                    return
                except Exception:
                    log.exception("unhandled error in %s %s", scope["method"], scope["path"])
                    info = ErrorInfo(
                        ErrorKind.INTERNAL, "The server had an error while processing your request."
                    )
                    status = await self._send_error(info, answer)
                    return
                try:
                    turn = prepared.turn
                    if turn.stream and not (turn.store or turn.background) and prepared.choices is None:
                        # A plain stream, the most common turn, run here: not in a `_run`
                        # coroutine that each of its steps would resume through. Nothing after
                        # the head reads the parsed turn (no record, no live turn; a transport's
                        # `remember` holds its own): this frame keeps neither it nor `Prepared`
                        # (the dialect's options, its tool selection) for the stream's life.
                        pipeline = prepared.pipeline
                        stream = self._stream(
                            state, scope, receive, answer, pipeline.frames(), prepared.headers, prepared.lane
                        )
                        del turn, prepared
                        await stream
                        await pipeline.abandon("client_disconnected")  # a no-op when it ended
                        status = 200
                        return
                    del turn
                    run = self._run(state, scope, receive, answer, prepared, owned)
                    # `_run` holds it as long as it needs it: not this frame, for a stream's life.
                    del prepared
                    status = await run
                except SluicegateError as exc:  # e.g. the store is unavailable to accept a background run
                    status = 200 if answer.started else await self._send_error(exc.info, answer)
                except Exception:
                    log.exception("unhandled error in %s %s", scope["method"], scope["path"])
                    if answer.started:  # a stream that started has ended itself (`stream_sse`)
                        status = 200
                    else:
                        info = ErrorInfo(
                            ErrorKind.INTERNAL, "The server had an error while processing your request."
                        )
                        status = await self._send_error(info, answer)
            finally:  # what `async with Owned()` did, without its two coroutines
                await owned.aclose()
        except BaseException:
            status = 500
            raise
        finally:
            key = self._counted.get(status)
            if key is None:  # statuses are few: each key is built once
                key = self._counted[status] = METRICS.key(
                    "sluicegate_requests_total", dialect=self.dialect.name, status=str(status)
                )
            METRICS.counters[key] += 1

    async def _run(
        self, state: AppState, scope: Scope, receive: Receive, send: Send, prepared: Prepared, owned: Owned
    ) -> int:
        turn, pipeline = prepared.turn, prepared.pipeline
        if prepared.choices is not None:
            return await self._run_choices(state, scope, receive, send, prepared, prepared.choices)
        if turn.background:
            retention = state.settings.responses_retention_days * 86400
            resolved = prepared.resolved or Resolved(input_items=[], history=[])
            run = BackgroundRun(
                prepared.turn_id,
                pipeline,
                prepared.encoder,
                state.live,
                owned.pop_all(),
                prepared.input_items,
                store=state.store,
                scope=prepared.scope,
                accepted=lambda snapshot: stored_turn(snapshot, resolved, retention, state.store),
            )
            await run.start()  # stored as queued; from here on the run owns the turn's resources
            if turn.stream:
                await self._stream(state, scope, receive, send, run.log.follow(-1), prepared.headers)
                return 200
            return await self._send_json(run.snapshot(), send, prepared.headers)
        # (a plain stream, not stored: `__call__` runs it itself)
        if turn.stream:
            with self.live(state, prepared):
                await self._stream(
                    state, scope, receive, send, pipeline.frames(), prepared.headers, prepared.lane
                )
                await pipeline.abandon("client_disconnected")  # a no-op when it ended
            return 200
        with self.live(state, prepared):
            try:
                result = await unless_disconnected(pipeline.collect(), lambda: until_disconnect(receive))
            except SluicegateError:  # the client left: keep what was generated
                await pipeline.abandon("client_disconnected")
                return 499
        if result.error is not None:
            body = prepared.encoder.body(result)
            info = self.dialect.failure(result.error, body)
            return await self._send_error(info, send, prepared.headers)
        return await self._send_json(prepared.encoder.body(result), send, prepared.headers)

    async def _run_choices(
        self, state: AppState, scope: Scope, receive: Receive, send: Send, prepared: Prepared, run: ChoicesRun
    ) -> int:
        if prepared.turn.stream:
            await self._stream(state, scope, receive, send, run.frames(), prepared.headers)
            await run.abandon("client_disconnected")  # a no-op for the choices that ended
            return 200
        try:
            results = await unless_disconnected(run.collect(), lambda: until_disconnect(receive))
        except SluicegateError:  # the client left
            await run.abandon("client_disconnected")
            return 499
        body = run.body(results)
        failed = next((r.error for r in results if r.error is not None), None)
        if failed is not None:
            info = self.dialect.failure(failed, body if isinstance(body, dict) else None)
            return await self._send_error(info, send, prepared.headers)
        return await self._send_json(body, send, prepared.headers)

    def _stream(
        self,
        state: AppState,
        scope: Scope,
        receive: Receive,
        send: Send,
        chunks: AsyncIterator[Chunk],
        headers: dict[str, str],
        lane: TurnPipeline | None = None,
    ) -> Awaitable[StreamOutcome]:
        # The transport's own coroutine, not a frame of ours around it for the stream's life;
        # which transport is the dialect's registry entry.
        return stream_chunks(
            chunks,
            send,
            receive,
            framing=self.framing,
            heartbeat_seconds=state.limits.heartbeat_seconds,
            buffer_bytes=state.settings.stream_buffer_bytes,
            headers=headers,
            body_send=server_send(scope, send),
            writer=body_writer(scope),
            lane=lane,
        )

    def live(self, state: AppState, prepared: Prepared) -> AbstractContextManager[object]:
        """`with` it while the turn streams: a stored turn is live (retrievable, cancellable)."""
        if not (prepared.turn.store and prepared.encoder.response_object() is not None):
            return _NOT_LIVE  # nothing to register: no per-request object either
        return LiveTurn(
            prepared.turn_id,
            prepared.pipeline,
            prepared.encoder,
            state.live,
            prepared.input_items,
            scope=prepared.scope,
        )

    async def prepare(self, state: AppState, source: TurnSource, owned: Owned) -> Prepared:
        """parse → model → conversation → admit → tools → open the model → pipeline, for any
        transport; everything taken is on `owned`."""
        # (No closure in this frame: its variables stay plain locals, not cells.)
        dialect = self.dialect
        turn = dialect.parse(source.body, source.query, source.headers)
        if source.adapt is not None:
            source.adapt(turn)
        registry = state.registry
        models = registry.models
        own = self._resolve_own
        if own is None or self._own_models is not models:  # bound once per registry's table
            own = self._resolve_own = partial(_own_name, self._own_names, models)
            self._own_models = models
        model = registry.resolve(turn.chat.model, own)
        if source.key is not None:  # a runtime key (else there is nothing to allow)
            allow_model(source.key, model.id, asked=turn.chat.model)
        turn.chat.model = model.id
        engine = model.instances[0].engine  # (`model.engine`, without the property's call)
        if self._checks:  # the default checks nothing: no ModelInfo made for it
            dialect.check(turn, engine.info())
        scope = source.scope
        chat = turn.chat
        resolved: Resolved | None = None
        if turn.conversation is not None:
            resolved = await resolve(
                state.store,
                turn.conversation,
                partial(_is_live, state, scope),
                sealer=state.sealer,
                scope=scope,
            )
            chat = replace(chat, messages=resolved.messages)
        if engine.reads_pixels:
            if engine.info().capabilities.vision:
                await load_images(chat, state.images)
            if engine.info().capabilities.audio:
                await load_audio(chat, state.images.audio)
        owned.callback(state.admission.take())
        toolset: ToolSet | None = None
        if turn.tools is not None and _wants_tools(turn, state):
            toolset = await request_toolset(state.tools, turn.tools)
            owned.push_async_callback(toolset.aclose)
        if chat.sampling.n > 1:
            run = await open_choices(
                self.dialect,
                turn,
                chat,
                model,
                toolset,
                owned,
                state.limits,
                scope,
                partial(_engine_answer, source, engine, state=state, stream=turn.stream),
            )
            first = run.pipelines[0]
            return Prepared(
                turn, run.turn_id, first.encoder, first, run.headers, [], scope, None, choices=run
            )
        if (
            toolset is None and not engine.heavy_checks
        ):  # `open_model`'s first case, without its two coroutines
            generation = model.open(chat)
        else:
            generation = await open_model(
                chat,
                model,
                toolset,
                turn.tools,
                max_rounds=state.tools.max_rounds,
                history=resolved.history if resolved is not None else [],
                approved=resolved.approved if resolved is not None else [],
            )
        aclose = getattr(generation.events, "aclose", None)  # (`_aclose`, without its coroutine)
        if aclose is not None:
            owned.push_async_callback(aclose)
        # A plain stream (no tool loop between the engine and the pipeline) offers its engine a
        # fast lane; an engine that relays an upstream's reads takes it.
        lane: Lane | None = None
        if LANE_ENABLED and turn.stream and not turn.background and toolset is None:
            lane = Lane()
            if not generation.read_through(lane):
                lane = None
        opened = Opened(generation.events)
        if not turn.background:  # a background response answers at once, whatever the upstream does
            opened = await _engine_answer(source, engine, opened, state=state, stream=turn.stream)
        turn_id = new_id(turn.id_prefix, turn.id_length) if turn.id_prefix else ""
        accumulator = Accumulator()
        context = EncoderContext(
            turn_id=turn_id,
            created=int(time.time()),
            instance_id=generation.instance_id,
            accumulator=accumulator,
            provider_info=_provider_info(toolset) if toolset is not None else _no_provider_info,
            stored=turn.store,
            scope=scope,
            prompt_text=partial(rendered_prompt, model, chat),
        )
        encoder = dialect.encoder(turn, context)
        remember = source.remember
        persist = (
            _persister(state, turn, turn_id, encoder, accumulator, resolved, scope, remember)
            if turn.store or remember is not None
            else None
        )
        # Metrics and the access line see every turn's canonical stream (the tap, per event).
        limits = state.limits  # (`stream_deadline`, without its call)
        pipeline = TurnPipeline(
            opened.events,
            encoder,
            accumulator,
            persist,
            EventTap.current(),
            deadline=Deadline.of(limits.request_timeout_seconds, limits.idle_timeout_seconds),
            deltas=METRICS.cell(model.deltas_key) if lane is not None else None,
            lane=lane,
        )
        pipeline.open()  # encoded now: a response object that cannot be written is still an HTTP error
        # The engine may add headers while it checks the request (a context policy's trimming).
        # Checked here, before the turn runs: a header that cannot be sent must not surface as an
        # error after the store has recorded the response as completed.
        headers = safe_headers(
            {
                INSTANCE_HEADER: generation.instance_id,
                **opened.headers,
                **chat.response_headers,
                **turn.headers,
            }
        )
        if turn_id:
            headers["X-Request-ID"] = turn_id
        items = items_to_json(resolved.input_items) if resolved is not None else []  # the stored form
        return Prepared(
            turn,
            turn_id,
            encoder,
            pipeline,
            headers,
            items,
            scope,
            resolved,
            pipeline if lane is not None else None,
        )

    async def _send_error(self, info: ErrorInfo, send: Send, headers: dict[str, str] | None = None) -> int:
        status = self.dialect.status(info)
        response = JSONResponse(self.dialect.error(info), status_code=status, headers=headers)
        await response({"type": "http"}, _no_receive, send)
        return status

    async def _send_json(self, body: Json | list[Json], send: Send, headers: dict[str, str]) -> int:
        await JSONResponse(body, headers=headers)({"type": "http"}, _no_receive, send)
        return 200


async def _if_answered(send: AnswerSend, after: Callable[[], Awaitable[None]]) -> None:
    if send.status == 200:
        await after()


_NOT_LIVE = nullcontext()  # reusable: it holds no state


async def _no_receive() -> Any:  # a JSON response never reads the request
    raise RuntimeError("not used")


def _wants_tools(turn: Turn, state: AppState) -> bool:
    """Configured tools only when some are configured; anything the request names, always."""
    selection = turn.tools.selection if turn.tools is not None else None
    if selection is None:
        return False
    named = bool(selection.plugins or selection.servers)
    return named or (selection.all_configured and bool(state.tools.providers))


def rendered_prompt(model: Model, chat: ChatRequest) -> str | None:
    """The prompt the model's chat template renders for `chat` (llama-server's `__verbose`),
    by a loaded instance's engine (its template is at hand); None when it renders none."""
    loaded = model.loaded_instances()
    engine = loaded[0].engine if loaded else model.engine
    try:
        return engine.apply_template(chat)
    except Exception:  # a debugging aid: never the reason an answer fails
        log.debug("rendering the prompt for __verbose failed", exc_info=True)
        return None


def _own_name(
    resolve_model: Callable[[str, dict[str, Model]], str], models: dict[str, Model], name: str
) -> str:
    """The dialect's own naming of a model (`Dialect.resolve_model`), over the registry's table."""
    return resolve_model(name, models)


def _is_live(state: AppState, scope: str, response_id: str) -> bool:
    return state.live_turn(response_id, scope) is not None


def _provider_info(toolset: ToolSet) -> Any:
    def provider_info(name: str) -> Json | None:
        info = toolset.provider(name)
        return info.lmstudio() if info is not None else None

    return provider_info


def _no_provider_info(name: str) -> Json | None:
    """A turn without server-side tools: no provider to tell of (shared, not made per request)."""
    return None


def _engine_answer(
    source: TurnSource,
    engine: Engine,
    opened: Opened,
    *,
    state: AppState,
    stream: bool,
) -> Awaitable[Opened]:
    """For engines that reach an upstream, wait for it to accept the request before answering
    (see `transport/answer_first.py`): a stream waits at most one heartbeat interval, a non-streaming
    request as long as it takes (nothing is sent before the end anyway). The wait itself is
    returned, not a coroutine around it: the start's task resumes through one frame less."""
    if not type(engine).answers_first:
        return _as_is(opened)
    bound = (state.limits.heartbeat_seconds or ANSWER_WAIT_SECONDS) if stream else None
    return await_answer(opened.events, bound=bound, disconnected=source.disconnected, sink=source.sink)


async def _as_is(opened: Opened) -> Opened:
    return opened


def _persister(
    state: AppState,
    turn: Turn,
    turn_id: str,
    encoder: Encoder,
    accumulator: Accumulator,
    resolved: Resolved | None,
    scope: str,
    remember: Callable[[StoredResponse], None] | None = None,
) -> Persist:
    """Store the turn (its conversation in our own items), so any stateful dialect can continue it; durable
    before the pipeline sends the frames that say it is done. A background run's terminal
    frames go to its log first, then its record (`RunLog.finish`), and only then to followers.
    A transport that keeps turns of its own (`remember`) gets every record, stored or not."""
    retention = state.settings.responses_retention_days * 86400
    empty = Resolved(input_items=[], history=[])

    async def persist(cancel_reason: str | None, final: list[Frame]) -> None:
        response = encoder.response_object()
        if response is None:
            conv = turn.conversation
            response = built_response(
                turn_id,
                turn.chat.model,
                resolved or empty,
                conv.previous_response_id if conv is not None else None,
                accumulator,
                cancel_reason=cancel_reason,
            )
        record = stored_turn(response, resolved or empty, retention, state.store)
        if remember is not None:
            remember(record)
        if not turn.store:
            return
        live = state.live_turn(turn_id, scope)
        if isinstance(live, BackgroundRun):
            await live.log.finish([frame_bytes(f) for f in final if f is not DONE], record)
        else:
            await state.store.put(record, scope=scope)
        if live is not None:
            live.stored()  # durable: a GET may say how it ended now

    return persist
