"""The conversation's functions fed Responses items, mapped as the Responses dialect maps them
(`dialects/responses/conversation.py`): the tests written against Responses items read as before."""

from __future__ import annotations

from typing import Any

from sluicegate.conversation import messages
from sluicegate.core.items import CallItem
from sluicegate.core.request import Message
from sluicegate.dialects.responses.conversation import to_item, to_items

Json = dict[str, Any]


def items_to_messages(
    items: list[Json], instructions: str | None, known: dict[str, Json] | None = None
) -> list[Message]:
    calls = {k: c for k, v in (known or {}).items() if isinstance(c := to_item(v), CallItem)}
    return messages.items_to_messages(to_items(items), instructions, calls)


def orphan_call_ids(items: list[Json]) -> list[str]:
    return messages.orphan_call_ids(to_items(items))
