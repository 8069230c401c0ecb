"""Where responses, conversation state and background runs live, behind one small interface.

A stored response keeps four things: the response object as last sent, the input items of
its request (for `input_items`), the whole conversation up to and including its output (so
`previous_response_id` continues it), and, for background responses, every streamed event
frame (so a client can resume with `starting_after`). Items are also indexed by id and by
`call_id`, so `item_reference` inputs and tool results without history can be resolved.

Scoping
-------
Every stored object belongs to a scope: `scope_of(api_key)` of the key that created it (a
hash, never the key), or `""` when no keys are configured (`request_scope(key, api_keys)`
gives the one to use for a request). Every method takes `scope=` and only ever sees that
scope: another scope's id behaves exactly like a missing one (`get`/`input_items` are None,
`delete` is False, `find_item`/`find_call` are None, `events_after` is None,
`run_in_flight`/`request_cancel` are False), so a route answers 404 for both. Ids are unique
per scope, not globally: two scopes may store the same client-chosen item id (`msg_1`,
`call_1`) without seeing each other's. `scope` defaults to `""` only so that callers written
before scoping keep working; every caller should pass it.

Durability
----------
`put`, `create_run`, `update_run`, `finish_run` and `delete` return only once the change is
durable (the SQLite commit is fsynced; Redis has acknowledged the write). A caller sends
`response.completed`, `chat.end` or a non-streaming body only after `put`/`finish_run`
returned, so a client that saw a completed id can always read it back. `append_events` is
cheaper (not fsynced on its own: the run's next durable write covers it).

Background runs
---------------
A background run is stored from the moment it is accepted, and its event frames as it goes:

    await store.create_run(accepted, scope=s)     # response = the queued snapshot, input
                                                  # items, conversation = history before it;
                                                  # input items findable at once; in flight
    log = RunLog(store, accepted.id, scope=s)     # store/runlog.py: bounded, store-backed
    await log.extend(frames)                      # SSE bytes of each event, seq 0, 1, 2...;
                                                  # shown to local followers at once, stored
                                                  # in batches of 64 or after 0.2 s
    await log.finish(terminal_frames, final)      # stores the terminal frames, then
                                                  # `finish_run(final)`, then shows them
    log.follow(after)                             # this replica: bytes, then DONE

    store.follow_events(id, after, scope=s)       # any replica, any time: stored frames,
                                                  # live ones while in flight, then DONE

Frames are numbered from 0 (the `sequence_number` of Responses events); `append_events`
takes consecutive batches (a gap or an overlap is a ValueError). `events_after` returns a
bounded prefix of the frames after `after` (call again from where it stopped; `[]`: none yet).
`get(..., events=False)` skips reading the log; `get` with events (the default) reads it all,
kept for the callers that replay `record.events`.

A run belongs to the replica that created it. `start()` (once, in the lifespan) runs
`recover_in_flight()`: runs left in flight by a crashed process are finished as `failed` with
error code `server_restarted` (SQLite: every run in flight, one process owns the file) or
`owner_lost` (Redis: runs whose owner's lease expired; every replica sweeps periodically),
never vanished. Set `lost_run_frames` before `start()`: it builds the terminal frames appended
to such a run's log from (failed snapshot, next sequence number), e.g. the Responses
`event: response.failed` frame, so followers see an ending the SDKs understand.
A run that ended without its ending stored (the write failed, or its task did) is given up
by its owner with `abandon_run(id, scope=, error=)`: failed the same way (with the error the
owner showed for it, else code `server_error`) at once, instead of staying in flight, its
followers waiting, until the process restarts; the owner retries until the store can say so.

Cancellation: `request_cancel(id, scope=)` on any replica; the owning replica's store calls
`on_cancel(scope, response_id)` (set by the wiring; called on the event loop), which cancels
the local run, whose normal ending then stores it with `finish_run`.

Errors: a backend that cannot be reached raises `StoreUnavailable` (a `SluicegateError` of
kind OVERLOADED, HTTP 503, code `store_unavailable`), never a bare exception that would become
a 500; the next call after the backend returns works again.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from sluicegate.core.errors import ErrorKind, SluicegateError
from sluicegate.core.scope import request_scope, scope_of

Json = dict[str, Any]
__all__ = ["request_scope", "scope_of"]  # re-exported: defined once, in core/scope.py

DONE: Final = b"data: [DONE]\n\n"  # the sentinel that ends every followed or replayed log

# Builds the frames that end the log of a run lost with its process: (failed snapshot, next seq).
LostRunFrames = Callable[[Json, int], list[bytes]]
# Called on the owning replica when a client asked (anywhere) to cancel one of its runs.
CancelHandler = Callable[[str, str], None]


class StoreUnavailable(SluicegateError):
    """The store's backend cannot be reached: 503, and the next call may work again."""

    def __init__(self, detail: str = "") -> None:
        message = "The response store is unavailable; retry shortly."
        super().__init__(ErrorKind.OVERLOADED, message, code="store_unavailable")
        self.detail = detail


@dataclass(slots=True)
class StoredResponse:
    id: str
    response: Json
    input_items: list[Json]
    conversation: list[Json]
    created_at: float
    expires_at: float
    events: list[bytes] = field(default_factory=list)


def failed_snapshot(response: Json, code: str, message: str | None) -> Json:
    """A run's last snapshot turned into the `failed` response object of a lost run."""
    failed = dict(response)
    failed["status"] = "failed"
    failed["error"] = {"code": code, "message": message or LOST_MESSAGES.get(code, code)}
    output = []
    for item in failed.get("output") or []:
        if isinstance(item, dict) and item.get("status") == "in_progress":
            item = {**item, "status": "incomplete"}
        output.append(item)
    failed["output"] = output
    return failed


LOST_MESSAGES: Final = {
    "server_restarted": "The server restarted while this response was in progress.",
    "owner_lost": "The server running this response stopped while it was in progress.",
    "server_error": "The server had an error while running this response.",
}


def lost_error(error: Json | None) -> tuple[str, str | None]:
    """(code, message or None for the code's own) of a run its owner gives up."""
    if error is None or not isinstance(error.get("code"), str):
        return "server_error", None
    message = error.get("message")
    return error["code"], message if isinstance(message, str) else None


def indexed_items(record: StoredResponse) -> list[Json]:
    """The items a record makes findable by id/call_id: its inputs, then its output."""
    return [
        item
        for item in [*record.input_items, *record.response.get("output", [])]
        if isinstance(item, dict) and isinstance(item.get("id"), str)
    ]


class Store(ABC):
    """The storage interface; every method is scoped (see the module docstring)."""

    lost_run_frames: LostRunFrames | None = None
    on_cancel: CancelHandler | None = None

    async def start(self) -> None:
        """Open what needs a running loop and recover runs left in flight by a crash."""
        await self.recover_in_flight()

    @abstractmethod
    async def put(self, record: StoredResponse, *, scope: str = "") -> None:
        """Insert or replace a finished response and index its items; durable on return.

        `record.events`, when not empty, replaces the stored event log (the pre-run callers'
        way of storing a background response); when empty, an existing log is kept. A run in
        flight with this id is finished by it (followers get DONE)."""

    @abstractmethod
    async def get(self, response_id: str, *, scope: str = "", events: bool = True) -> StoredResponse | None:
        """The live record, or None when unknown, expired or another scope's.

        `events=False` skips reading the event log (`record.events` is then empty); new callers
        should pass it and replay with `follow_events`."""

    @abstractmethod
    async def input_items(self, response_id: str, *, scope: str = "") -> list[Json] | None:
        """The input items of a stored response (for `GET …/input_items`), without the rest."""

    @abstractmethod
    async def delete(self, response_id: str, *, scope: str = "") -> bool:
        """True when something was deleted (with its items and event log)."""

    @abstractmethod
    async def find_item(self, item_id: str, *, scope: str = "") -> Json | None:
        """A stored input or output item by its id (for `item_reference`)."""

    @abstractmethod
    async def find_call(self, call_id: str, *, scope: str = "") -> Json | None:
        """The stored `function_call` item with this call_id, if any."""

    @abstractmethod
    async def purge_expired(self) -> int:
        """Delete expired records of every scope; returns how many."""

    # -- background runs -------------------------------------------------------------------

    @abstractmethod
    async def create_run(self, record: StoredResponse, *, scope: str = "") -> None:
        """Store a run at acceptance: `record.response` is the queued/in_progress snapshot,
        `record.conversation` the history before this turn. Durable on return; its input
        items are findable at once; it is in flight (owned by this replica) until finished."""

    @abstractmethod
    async def append_events(
        self, response_id: str, first_seq: int, frames: list[bytes], *, scope: str = ""
    ) -> None:
        """Append frames `first_seq .. first_seq+len(frames)-1` (consecutive with the last batch)."""

    @abstractmethod
    async def update_run(self, response_id: str, response: Json, *, scope: str = "") -> None:
        """Replace the snapshot of a run in flight (e.g. queued → in_progress)."""

    async def finish_run(self, record: StoredResponse, *, scope: str = "") -> None:
        """Store the terminal snapshot and conversation of a run: `put` with its log kept."""
        await self.put(record, scope=scope)

    @abstractmethod
    async def events_after(self, response_id: str, after: int, *, scope: str = "") -> list[bytes] | None:
        """The stored frames with sequence number > `after` (None: no such response)."""

    @abstractmethod
    async def run_in_flight(self, response_id: str, *, scope: str = "") -> bool:
        """True while a run with this id is neither finished nor marked lost."""

    async def follow_events(
        self, response_id: str, after: int = -1, *, scope: str = ""
    ) -> AsyncIterator[bytes]:
        """Frames after `after`, then new ones while the run is in flight, then `DONE`.

        Works on any replica; yields nothing but DONE for an unknown id (callers check first)."""
        position = max(after, -1)
        while True:
            # In flight is read before the frames: a run that ends in between is read again.
            in_flight = await self.run_in_flight(response_id, scope=scope)
            frames = await self.events_after(response_id, position, scope=scope)
            if frames:
                position += len(frames)
                yield b"".join(frames)
                continue
            if not in_flight or frames is None:
                yield DONE
                return
            await self.wait_for_events(response_id, position, scope=scope)

    @abstractmethod
    async def wait_for_events(self, response_id: str, after: int, *, scope: str = "") -> None:
        """Return when frames after `after` may exist or the run may have ended (may time out)."""

    @abstractmethod
    async def request_cancel(self, response_id: str, *, scope: str = "") -> bool:
        """Ask the owner of a run in flight to cancel it; False when no such run is in flight."""

    @abstractmethod
    async def abandon_run(self, response_id: str, *, scope: str = "", error: Json | None = None) -> None:
        """The owner gives up a run it cannot finish: failed with `error` (`{"code", "message"}`:
        the failure the owner already showed for it; `server_error` when None), the lost-run
        frames ending its log. A no-op when the run is not in flight."""

    @abstractmethod
    async def recover_in_flight(self) -> int:
        """Finish as failed the runs whose process is gone; returns how many."""

    async def aclose(self) -> None:
        return None
