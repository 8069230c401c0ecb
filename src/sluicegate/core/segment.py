"""Segmentation: raw engine deltas become items that open, take deltas and close.

This is the only place block boundaries are decided, so no dialect re-derives them. It also
gives every stream the same ending: open items are closed (unless the stream failed: then they
stay open, never reported done), the last usage is reported, then exactly one terminal event
(`Finished` or `Failed`) — whatever the engine did or failed to do. The per-event state machine
is `core/segmenter.py`; this module drives it over the engine's stream.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from sluicegate.core.deadlines import Deadline
from sluicegate.core.errors import EngineFailure, ErrorInfo, ErrorKind
from sluicegate.core.events import Event, EventBatch, Failed, RawBatch, RawEvent, TextDelta
from sluicegate.core.segmenter import Segmenter

log = logging.getLogger(__name__)


def failure_from_exception(exc: Exception) -> Failed:
    if isinstance(exc, EngineFailure):
        return Failed(ErrorInfo(ErrorKind.ENGINE, str(exc), code=exc.code))
    log.exception("engine raised unexpectedly", exc_info=exc)
    return Failed(ErrorInfo(ErrorKind.ENGINE, f"the engine failed unexpectedly ({type(exc).__name__})"))


async def segment(
    raw: AsyncIterator[RawEvent], deadline: Deadline | None = None, state: Segmenter | None = None
) -> AsyncIterator[Event]:
    """Turn an engine's raw events into the canonical item-structured stream; with a `deadline`,
    guard it too (one loop for both: a generator layer less per token). `state`: a segmenter
    the turn's fast lane (turn/lane.py) feeds too, between this loop's steps."""
    state = state or Segmenter()
    out: list[Event] = []
    failure: Failed | None = None
    if deadline is not None:
        deadline.arm()
    try:
        async for event in raw:
            if deadline is not None:
                deadline.last = deadline.clock()
            if type(event) is TextDelta:  # per token: before any other check
                state.text(event, out)
            elif type(event) is RawBatch:  # one upstream read: one step here, one batch out
                for inner in event.events:
                    if type(inner) is TextDelta:
                        state.text(inner, out)
                    elif (failure := state.step(inner, out)) is not None:
                        break
                if failure is not None:
                    break  # what came before it in the batch goes out with the ending
                if len(out) > 1:
                    yield EventBatch(out)
                    out = []
                    continue
            elif (failure := state.step(event, out)) is not None:
                break
            for canonical in out:
                yield canonical
            out.clear()
    except asyncio.CancelledError:
        if deadline is None or not deadline.owns_cancel():
            raise  # a real cancellation (client gone), not the deadline's timer
        failure = deadline.failure()
    except Exception as exc:  # an engine bug must still end the stream properly
        failure = failure_from_exception(exc)
    finally:
        if deadline is not None:
            deadline.disarm()
        aclose = getattr(raw, "aclose", None)
        if aclose is not None:
            await aclose()
    state.end(out, failure)
    for canonical in out:
        yield canonical
