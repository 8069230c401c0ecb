"""Where responses and conversation state live, behind one small interface.

A stored response keeps four things: the response object as last sent, the input items of
its request (for `input_items`), the whole conversation up to and including its output (so
`previous_response_id` continues it), and, for background responses, every streamed event
frame (so a client can resume with `starting_after`). Items are also indexed by id and by
`call_id`, so `item_reference` inputs and tool results without history can be resolved.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]


@dataclass(slots=True)
class StoredResponse:
    id: str
    response: Json
    input_items: list[Json]
    conversation: list[Json]
    created_at: float
    expires_at: float
    events: list[bytes] = field(default_factory=list)


class Store(ABC):
    @abstractmethod
    async def put(self, record: StoredResponse) -> None:
        """Insert or replace a response and index its items."""

    @abstractmethod
    async def get(self, response_id: str) -> StoredResponse | None:
        """The live record, or None when unknown or expired."""

    @abstractmethod
    async def delete(self, response_id: str) -> bool:
        """True when something was deleted."""

    @abstractmethod
    async def find_item(self, item_id: str) -> Json | None:
        """A stored input or output item by its id (for `item_reference`)."""

    @abstractmethod
    async def find_call(self, call_id: str) -> Json | None:
        """The stored `function_call` item with this call_id, if any."""

    @abstractmethod
    async def purge_expired(self) -> int:
        """Delete expired records; returns how many."""

    async def aclose(self) -> None:
        return None
