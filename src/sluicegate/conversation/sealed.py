"""Sealed items opened for the model: a compaction (the summary `/v1/responses/compact` made of
an earlier conversation) becomes the message it stands for, and a reasoning item's sealed text
is restored; a blob that does not open for this API key is a 400. Sealing itself is
`core/sealing.py`; the dialect that hands the items out seals them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from sluicegate.core.items import CompactionItem, ConversationItem, MessageItem, ReasoningItem
from sluicegate.core.request import ContentPart
from sluicegate.core.sealing import COMPACTION, REASONING, Sealer

SUMMARY_PREFIX: Final = "A summary of the earlier conversation, which was compacted:\n\n"
_PARAM = "input.encrypted_content"


def expand_sealed(items: list[ConversationItem], sealer: Sealer, scope: str) -> list[ConversationItem]:
    """The conversation as the model reads it: compactions expanded, sealed reasoning restored."""
    out: list[ConversationItem] = []
    for item in items:
        if isinstance(item, CompactionItem):
            payload = sealer.unseal(item.sealed, purpose=COMPACTION, scope=scope, param=_PARAM)
            text = SUMMARY_PREFIX + str(payload.get("summary", ""))
            out.append(MessageItem("user", [ContentPart("text", text=text)], item.id))
        elif isinstance(item, ReasoningItem) and item.sealed:
            payload = sealer.unseal(item.sealed, purpose=REASONING, scope=scope, param=_PARAM)
            out.append(replace(item, text=str(payload.get("text", "")), sealed=None))
        else:
            out.append(item)
    return out
