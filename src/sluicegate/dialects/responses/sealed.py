"""What Responses clients carry sealed for the server: `compaction` items (the summary
`/v1/responses/compact` made of an earlier conversation) and reasoning items' `encrypted_content`
(`include: ["reasoning.encrypted_content"]`, for `store: false` clients that send reasoning
back). Sealing itself is `core/sealing.py`; this module makes the items. Opening them for the
model is the conversation's (`conversation/sealed.py`), whichever dialect continues it.
"""

from __future__ import annotations

from typing import Any

from sluicegate.core.ids import new_id
from sluicegate.core.sealing import COMPACTION, REASONING, Sealer

Json = dict[str, Any]
COMPACT_PROMPT = (
    "Summarize the conversation so far for your own later continuation of it: the user's goals, "
    "decisions made, facts and names to remember, work done and what remains. Be complete but "
    "brief; write only the summary."
)


def compaction_item(summary: str, sealer: Sealer, scope: str) -> Json:
    blob = sealer.seal({"summary": summary}, purpose=COMPACTION, scope=scope)
    return {"type": "compaction", "id": new_id("cmp_"), "encrypted_content": blob}


def reasoning_sealer(sealer: Sealer, scope: str) -> Any:
    def seal(text: str) -> str:
        return sealer.seal({"text": text}, purpose=REASONING, scope=scope)

    return seal
