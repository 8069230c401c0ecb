"""A stream's fast lane: an upstream read carried to the client in the callback that received it.

In the usual path an upstream read wakes the task that streams the response, and its events go
up through every layer's generator (the engine's relay, the instance, the segmenter, the turn
pipeline, the transport's producer) before their bytes are queued for the client. For the
middle of a stream — text and tool-call deltas, usage — those layers do nothing but pass the
events on, and the generators and the task wake-up cost several times what the work itself
does (bench/README.md, "Round eight"). So a turn that qualifies (a plain stream: no tool loop,
no tracing) gives its engine a `Lane`; the turn runner fills in `deliver`, which does that
same work — segmenter, encoder, framing — synchronously and hands the bytes to the transport.

`deliver(batch, task)` takes a read's raw events and returns True when it carried them, or
False, having changed nothing, when they must take the usual path: an event it does not carry
(the end, a failure, progress), a transport that is behind (its outbox holds bytes), or a
waiting task that is not the stream's own (`task`: the one waiting for the read). The engine
then hands the same events to its waiting task, in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:  # core/events imports core/request, which holds a Lane
    from sluicegate.core.events import RawEvent

Deliver: TypeAlias = "Callable[[list[RawEvent], asyncio.Task[object] | None], bool]"


class Lane:
    """What a turn gives its engine: `deliver` once the stream's transport has started (None
    until then, and for good when the turn does not qualify)."""

    __slots__ = ("deliver",)

    def __init__(self) -> None:
        self.deliver: Deliver | None = None
