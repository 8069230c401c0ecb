"""Connection-local conversations: the recent turns of one WebSocket, stored or not.

The Open Responses WebSocket transport continues `store: false` responses from memory held by
the connection alone: nothing is written anywhere, and the state dies with the connection.
Only the most recent `limit` responses are kept (oldest out first), so a connection's memory
is bounded however long it lives; a failed continuation evicts the response it continued.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from sluicegate.store.base import StoredResponse

Json = dict[str, Any]


class ConnectionResponses:
    __slots__ = ("_records", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = max(limit, 1)
        self._records: OrderedDict[str, list[Json]] = OrderedDict()

    def remember(self, record: StoredResponse) -> None:
        """Keep a finished turn's whole conversation (history and output) under its id."""
        self._records[record.id] = record.conversation
        self._records.move_to_end(record.id)
        while len(self._records) > self.limit:
            self._records.popitem(last=False)

    def conversation(self, response_id: str) -> list[Json] | None:
        return self._records.get(response_id)

    def evict(self, response_id: str) -> None:
        self._records.pop(response_id, None)

    def __contains__(self, response_id: object) -> bool:
        return response_id in self._records

    def __len__(self) -> int:
        return len(self._records)
