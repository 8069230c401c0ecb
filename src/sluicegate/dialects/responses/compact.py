"""`POST /v1/responses/compact`: its request and the `CompactResource` it answers with.

The request takes a conversation as `/v1/responses` does (`input`, `previous_response_id`,
`instructions`); the model summarizes it, and the answer's `output` is the conversation's user
messages followed by one `compaction` item whose sealed `encrypted_content` holds the summary
(`responses_sealed`). Sent back as input, that output continues the conversation.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sluicegate.core.events import Usage
from sluicegate.core.ids import new_id
from sluicegate.core.validation import Fields
from sluicegate.dialects.responses.encoder import usage_object
from sluicegate.dialects.responses.request import MISSING, ResponsesRequest, parse_responses_request

Json = dict[str, Any]


@dataclass(slots=True)
class CompactRequest:
    request: ResponsesRequest  # the conversation, parsed as a create request's
    prompt_cache_key: str | None = None


def parse_compact_request(body: Any) -> CompactRequest:
    f = Fields(body)
    model = f.string("model", required=True) or ""
    has_input = f.obj.get("input") is not None
    if not has_input and f.string("previous_response_id") is None:
        f.fail("input", "Missing required parameter: 'input' (or 'previous_response_id').", MISSING)
    create: Json = {"model": model, "input": f.obj["input"] if has_input else "."}
    for key in ("previous_response_id", "instructions"):
        if f.obj.get(key) is not None:
            create[key] = f.obj[key]
    request = parse_responses_request(create)
    if not has_input:
        request.input_items = []
    return CompactRequest(request, f.string("prompt_cache_key"))


def kept_messages(items: list[Json]) -> list[Json]:
    """What a compacted window keeps as it was: the user's own messages."""
    return [i for i in items if i.get("type") == "message" and i.get("role") == "user"]


def compact_resource(output: list[Json], usage: Usage) -> Json:
    return {
        "id": new_id("resp_"),
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": output,
        "usage": usage_object(usage),
    }
