"""The shapes of llama-server's slot actions, `POST /slots/{id_slot}?action=save|restore|erase`
(README, "POST /slots/{id_slot}"); the route is `sluicegate.routes.llamaserver`.

A file name is a plain name inside the slot save folder: no folder part, no `..`, nothing a file
system reads specially (llama-server's `fs_validate_filename` refuses the same), else a 400.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast

from sluicegate.core.errors import invalid
from sluicegate.core.validation import Fields

Kind = Literal["save", "restore", "erase"]
KINDS = ("save", "restore", "erase")
MAX_NAME_BYTES = 255  # a file name's limit on common file systems
_FORBIDDEN = set('/\\:*?"<>|')


@dataclass(frozen=True, slots=True)
class SlotAction:
    slot: int
    kind: Kind
    filename: str | None  # save and restore


def parse_slot_action(id_slot: str, action: str | None, body: Any) -> SlotAction:
    try:
        slot = int(id_slot)
    except ValueError:
        raise invalid("Invalid slot ID", param="id_slot") from None
    if action not in KINDS:
        raise invalid("Invalid action: it must be save, restore or erase", param="action")
    kind = cast(Kind, action)
    if kind == "erase":
        return SlotAction(slot, kind, None)
    f = Fields(body)
    filename = f.string("filename")
    if filename is None:
        f.fail("filename", '"filename" must be provided', "missing_required_parameter")
    if not valid_filename(filename):
        f.fail("filename", "Invalid filename")
    return SlotAction(slot, kind, filename)


def valid_filename(name: str) -> bool:
    """A plain file name: never a path, never `.` or `..`, no control characters."""
    if not name or name in (".", "..") or name != name.strip():
        return False
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return False
    return not any(c in _FORBIDDEN or ord(c) < 32 or ord(c) == 127 for c in name)


def slot_action_body(action: SlotAction, tokens: int, size: int, ms: float) -> dict[str, Any]:
    if action.kind == "erase":
        return {"id_slot": action.slot, "n_erased": tokens}
    if action.kind == "save":
        return {
            "id_slot": action.slot,
            "filename": action.filename,
            "n_saved": tokens,
            "n_written": size,
            "timings": {"save_ms": ms},
        }
    return {
        "id_slot": action.slot,
        "filename": action.filename,
        "n_restored": tokens,
        "n_read": size,
        "timings": {"restore_ms": ms},
    }
