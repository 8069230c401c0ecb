"""Conversation items of our own: what a stored turn is made of, whichever dialect wrote it.

A stateful dialect (Responses, LM Studio chats) maps its input and output to these items and
back, in its own package; the conversation (`sluicegate/conversation/`) reads only these. They
carry what the model needs in a neutral form: a call's name and arguments are the model-facing
ones (a Responses `custom_tool_call` is the call the model made), a result is its text, an MCP
error is its message.

`native` is the item as the dialect that wrote it showed it (`origin`), kept so that dialect can
echo it exactly (the Responses `input_items` listing, `item_reference`) where its fields would
not rebuild it; nothing else reads it.

The stored form (`item_to_json` / `item_from_json`) is tagged by `"kind"`; a stored item
without one is of the earlier, Responses-shaped records (`ITEMS_VERSION` 1), which a reader
given by the wiring maps (`LegacyReader`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from sluicegate.core.errors import SluicegateError
from sluicegate.core.request import ContentPart, Role

Json = dict[str, Any]
ITEMS_VERSION: Final = 2  # 1: Responses items; 2: these items, tagged by "kind"


@dataclass(slots=True)
class MessageItem:
    role: Role
    parts: list[ContentPart]
    id: str | None = None
    origin: str = ""
    native: Json | None = None

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts if p.type == "text")


@dataclass(slots=True)
class ReasoningItem:
    text: str
    sealed: str | None = None  # the text sealed for the client (`core/sealing.py`), when it was
    id: str | None = None
    origin: str = ""
    native: Json | None = None


@dataclass(slots=True)
class CallItem:
    """A client-side tool call, as the model made it."""

    call_id: str
    name: str
    arguments: str
    id: str | None = None
    origin: str = ""
    native: Json | None = None


@dataclass(slots=True)
class ResultItem:
    """A client-side tool call's result, as the model reads it."""

    call_id: str
    output: str
    id: str | None = None
    origin: str = ""
    native: Json | None = None


@dataclass(slots=True)
class ServerCallItem:
    """A server-side (MCP) call and its outcome; neither output nor error: it never finished."""

    id: str
    name: str
    arguments: str
    server_label: str = ""
    output: str | None = None
    error: str | None = None
    approval_request_id: str | None = None
    origin: str = ""
    native: Json | None = None


@dataclass(slots=True)
class ApprovalRequestItem:
    id: str
    name: str
    arguments: str
    server_label: str = ""
    origin: str = ""
    native: Json | None = None


@dataclass(slots=True)
class ApprovalResponseItem:
    request_id: str
    approve: bool
    reason: str | None = None
    id: str | None = None
    origin: str = ""
    native: Json | None = None


@dataclass(slots=True)
class ToolListItem:
    """The tools a server offered (shown to clients, never to the model)."""

    id: str
    server_label: str
    tools: list[Json] = field(default_factory=list)
    error: str | None = None  # the listing failed
    origin: str = ""
    native: Json | None = None


@dataclass(slots=True)
class CompactionItem:
    """A sealed summary of an earlier conversation (`core/sealing.py`, purpose `compaction`)."""

    sealed: str
    id: str | None = None
    origin: str = ""
    native: Json | None = None


@dataclass(slots=True)
class ReferenceItem:
    """A reference to a stored item by id (resolved against the store before anything else)."""

    id: str
    origin: str = ""
    native: Json | None = None


@dataclass(slots=True)
class OpaqueItem:
    """An item of one dialect that means nothing to the model (kept for that dialect's echo)."""

    id: str | None = None
    origin: str = ""
    native: Json | None = None


ConversationItem = (
    MessageItem
    | ReasoningItem
    | CallItem
    | ResultItem
    | ServerCallItem
    | ApprovalRequestItem
    | ApprovalResponseItem
    | ToolListItem
    | CompactionItem
    | ReferenceItem
    | OpaqueItem
)
# Maps one stored item of the earlier (version 1) shape; None: not a conversation item.
LegacyReader = Callable[[Json], ConversationItem | None]

_KINDS: Final[dict[str, type[Any]]] = {
    "message": MessageItem,
    "reasoning": ReasoningItem,
    "call": CallItem,
    "result": ResultItem,
    "server_call": ServerCallItem,
    "approval_request": ApprovalRequestItem,
    "approval_response": ApprovalResponseItem,
    "tool_list": ToolListItem,
    "compaction": CompactionItem,
    "reference": ReferenceItem,
    "opaque": OpaqueItem,
}
_KIND_OF: Final = {cls: kind for kind, cls in _KINDS.items()}


def kind_of(item: ConversationItem) -> str:
    return _KIND_OF[type(item)]


def item_to_json(item: ConversationItem) -> Json:
    """The stored form: `kind`, then the fields that are set."""
    out: Json = {"kind": kind_of(item)}
    for name in type(item).__slots__:
        value = getattr(item, name)
        if value is None or (value == "" and name == "origin"):
            continue
        if name == "parts":
            value = [_part_json(p) for p in value]
        out[name] = value
    return out


def _part_json(part: ContentPart) -> Json:
    return (
        {"type": "image", "image_url": part.image_url}
        if part.type == "image"
        else {"type": "text", "text": part.text}
    )


def item_from_json(data: Json, legacy: LegacyReader | None = None) -> ConversationItem | None:
    """A stored item; one of the earlier shape goes through `legacy` (None without one)."""
    kind = data.get("kind")
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        return legacy(data) if legacy is not None and "kind" not in data else None
    fields = {k: v for k, v in data.items() if k != "kind" and k in cls.__slots__}
    if cls is MessageItem:
        fields["parts"] = [
            ContentPart("image", image_url=p.get("image_url", ""))
            if p.get("type") == "image"
            else ContentPart("text", text=p.get("text", ""))
            for p in fields.get("parts") or []
            if isinstance(p, dict)
        ]
    item: ConversationItem = cls(**fields)
    return item


def items_to_json(items: list[ConversationItem]) -> list[Json]:
    return [item_to_json(i) for i in items]


def items_from_json(data: list[Json], legacy: LegacyReader | None = None) -> list[ConversationItem]:
    out: list[ConversationItem] = []
    for entry in data:
        if isinstance(entry, dict) and (item := item_from_json(entry, legacy)) is not None:
            out.append(item)
    return out


def is_call(data: Json) -> bool:
    """A stored item that is a client call (the store indexes those by call_id)."""
    return data.get("kind") == "call" or data.get("type") == "function_call"


def is_system(item: ConversationItem) -> bool:
    return isinstance(item, MessageItem) and item.role in ("system", "developer")


@dataclass(slots=True)
class ConversationInput:
    """A turn that continues stored state (Responses, LM Studio chats): the runner resolves it
    into messages through `sluicegate.conversation` before the model is opened."""

    input_items: list[ConversationItem]  # this turn's own items, mapped by its dialect
    previous_response_id: str | None = None
    instructions: str | None = None
    replace_system: bool = False  # a system item in the input replaces the stored one (LM Studio)
    # The dialect's own 404 for an unknown previous_response_id.
    previous_not_found: Callable[[str], SluicegateError] | None = None
    # Conversations held by the transport (a WebSocket's recent responses), by response id, in
    # the stored form: looked up before the store, so a `store: false` turn can be continued on
    # its connection.
    local: Callable[[str], list[Json] | None] | None = None
    # A tool result must answer a call in the conversation or the store (no call synthesised).
    strict_calls: bool = False
