"""What the runner and the routes share for the life of the app."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sluicegate.config import Settings
from sluicegate.core.errors import ErrorKind, SluicegateError
from sluicegate.core.pipeline import StreamLimits
from sluicegate.core.sealing import Sealer
from sluicegate.engines.downloads import Downloads
from sluicegate.engines.registry import Registry
from sluicegate.observe.metrics import METRICS
from sluicegate.store.base import Store
from sluicegate.store.keys import KeyStore
from sluicegate.store.usage import UsageStore
from sluicegate.tools.catalog import ToolCatalog
from sluicegate.turn.images import ImageSettings

if TYPE_CHECKING:
    from sluicegate.turn.live import LiveTurn


IN_FLIGHT = METRICS.key("sluicegate_requests_in_flight")


class Admission:
    """A server-wide cap on requests in flight; above it, 429 instead of a pile-up."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0

    def take(self) -> Callable[[], None]:
        """Take a place; the returned callable gives it back (once, however often called)."""
        if self.limit and self.in_flight >= self.limit:
            raise SluicegateError(
                ErrorKind.RATE_LIMITED,
                f"Too many requests in flight ({self.in_flight}, max_concurrent_requests); retry shortly.",
                code="rate_limit_exceeded",
            )
        self.in_flight += 1
        METRICS.gauges[IN_FLIGHT] += 1  # the key made once: `add_gauge` builds it per call
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.in_flight -= 1
                METRICS.gauges[IN_FLIGHT] -= 1

        return release


@dataclass(slots=True)
class AppState:
    settings: Settings
    registry: Registry
    limits: StreamLimits
    admission: Admission
    store: Store
    downloads: Downloads
    live: dict[str, LiveTurn] = field(default_factory=dict)  # stored turns being generated, by id
    tools: ToolCatalog = field(default_factory=ToolCatalog)  # server-side tools: MCP servers, plugins
    sealer: Sealer | None = None  # seals what clients carry for us (compactions, reasoning)
    images: ImageSettings = field(default_factory=ImageSettings)  # limits on image input
    keys: KeyStore | None = None  # runtime API keys (`[server] admin_key` turns them on)
    keys_changed: Callable[[], Awaitable[None]] | None = None  # re-read them on this replica now
    usage: UsageStore | None = None  # what runtime keys used, per model and day

    def live_turn(self, turn_id: str, scope: str) -> LiveTurn | None:
        """The turn being generated with this id, if it is `scope`'s: `live` is keyed by id
        only, and another key's turn must look exactly like a missing one."""
        live = self.live.get(turn_id)
        return live if live is not None and live.scope == scope else None
