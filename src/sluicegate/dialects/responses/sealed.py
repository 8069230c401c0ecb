"""What Responses clients carry sealed for the server: `compaction` items (the summary
`/v1/responses/compact` made of an earlier conversation) and reasoning items' `encrypted_content`
(`include: ["reasoning.encrypted_content"]`, for `store: false` clients that send reasoning
back). Sealing itself is `core/sealing.py`; this module knows the items.

Before the model sees a conversation, a compaction item is unsealed and expanded into the
message it stands for, and a reasoning item's sealed text is restored; a blob that does not
open for this API key is a 400.
"""

from __future__ import annotations

from typing import Any

from sluicegate.core.ids import new_id
from sluicegate.core.sealing import Sealer

Json = dict[str, Any]
COMPACTION = "compaction"
REASONING = "reasoning"
SUMMARY_PREFIX = "A summary of the earlier conversation, which was compacted:\n\n"
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


def expand_sealed(items: list[Json], sealer: Sealer, scope: str) -> list[Json]:
    """The conversation as the model reads it: compactions expanded, sealed reasoning restored."""
    out: list[Json] = []
    for item in items:
        kind = item.get("type")
        if kind == "compaction":
            payload = sealer.unseal(
                item["encrypted_content"], purpose=COMPACTION, scope=scope, param="input.encrypted_content"
            )
            text = SUMMARY_PREFIX + str(payload.get("summary", ""))
            out.append(
                {
                    "type": "message",
                    "id": item["id"],
                    "role": "user",
                    "content": [{"type": "input_text", "text": text}],
                    "status": "completed",
                }
            )
        elif kind == "reasoning" and item.get("encrypted_content"):
            payload = sealer.unseal(
                item["encrypted_content"], purpose=REASONING, scope=scope, param="input.encrypted_content"
            )
            restored = {k: v for k, v in item.items() if k != "encrypted_content"}
            restored["content"] = [{"type": "reasoning_text", "text": str(payload.get("text", ""))}]
            out.append(restored)
        else:
            out.append(item)
    return out
