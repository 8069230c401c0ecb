"""Input items of the tool types beyond `function`: parsed, normalised (every item gets an id),
and turned into the assistant call / tool result pair a function call would be, so that a
conversation with custom, namespace, shell, apply_patch or tool_search calls carries over to
any engine and dialect.

The call's model-facing name and arguments are those `responses_tool_types` offers the model
(`custom` → `{"input": …}`; `shell` → the `action`; `apply_patch` → the `operation`), so the
model sees its own calls again exactly as it would have written them.
"""

from __future__ import annotations

from typing import Any

import orjson

from sluicegate.core.ids import new_id
from sluicegate.core.request import ToolCall
from sluicegate.core.validation import Fields
from sluicegate.dialects.responses.tool_types import model_name

Json = dict[str, Any]

CALL_ITEM_TYPES = (
    "custom_tool_call",
    "local_shell_call",
    "shell_call",
    "apply_patch_call",
    "tool_search_call",
)
OUTPUT_ITEM_TYPES = (
    "custom_tool_call_output",
    "local_shell_call_output",
    "shell_call_output",
    "apply_patch_call_output",
    "tool_search_output",
)
TOOL_ITEM_TYPES = CALL_ITEM_TYPES + OUTPUT_ITEM_TYPES
_ID_PREFIX = {
    "custom_tool_call": "ctc_",
    "local_shell_call": "lsh_",
    "shell_call": "sh_",
    "apply_patch_call": "apc_",
    "tool_search_call": "tsc_",
}
MISSING = "missing_required_parameter"


def _required(i: Fields, key: str) -> Any:
    value = i.obj.get(key)
    if value is None:
        i.fail(key, f"Missing required parameter: '{i.where(key)}'.", MISSING)
    return value


def parse_tool_item(i: Fields, kind: str, item_id: str | None) -> Json:
    """One input item of a type in `TOOL_ITEM_TYPES`, as stored and listed."""
    item = dict(i.obj)
    item["type"] = kind
    if kind in CALL_ITEM_TYPES:
        item["id"] = item_id or new_id(_ID_PREFIX[kind])
        if kind != "tool_search_call":
            i.string("call_id", required=True)
        item.setdefault("status", "completed")
        if kind == "custom_tool_call":
            i.string("name", required=True)
            i.string("input", required=True)
        elif kind in ("local_shell_call", "shell_call"):
            action = i.object("action", required=True)
            assert action is not None
            if kind == "local_shell_call":
                action.array("command", required=True)
            else:
                action.array("commands", required=True)
        elif kind == "apply_patch_call":
            op = i.object("operation", required=True)
            assert op is not None
            op.string("type", required=True, choices=("create_file", "update_file", "delete_file"))
            op.string("path", required=True)
        return item
    # outputs: local_shell_call_output names its call by `id` (the SDK's shape) or `call_id`
    if kind == "local_shell_call_output":
        item["call_id"] = i.string("call_id") or i.string("id", required=True)
        item["id"] = new_id("lsho_") if item_id == item["call_id"] else (item_id or new_id("lsho_"))
    else:
        if kind != "tool_search_output":
            i.string("call_id", required=True)
        item["id"] = item_id or new_id("out_")
    if kind in ("custom_tool_call_output", "local_shell_call_output", "shell_call_output"):
        _required(i, "output")
    elif kind == "apply_patch_call_output":
        i.string("status", required=True, choices=("completed", "failed"))
    item.setdefault("status", "completed")
    return item


def item_call(item: Json) -> ToolCall:
    """A call item as the model's own call (model-facing name, arguments as offered)."""
    kind = item["type"]
    call_id = item.get("call_id") or item["id"]
    if kind == "custom_tool_call":
        name = model_name(item["name"], item.get("namespace"))
        return ToolCall(call_id, name, _json({"input": item.get("input", "")}))
    if kind == "local_shell_call":
        action = item.get("action") or {}
        args = {k: action[k] for k in ("command", "working_directory", "timeout_ms", "env") if action.get(k)}
        return ToolCall(call_id, "local_shell", _json(args))
    if kind == "shell_call":
        action = item.get("action") or {}
        args = {k: action[k] for k in ("commands", "timeout_ms", "max_output_length") if action.get(k)}
        return ToolCall(call_id, "shell", _json(args))
    if kind == "apply_patch_call":
        return ToolCall(call_id, "apply_patch", _json(item.get("operation") or {}))
    arguments = item.get("arguments")
    return ToolCall(
        call_id, "tool_search", arguments if isinstance(arguments, str) else _json(arguments or {})
    )


def item_output(item: Json) -> str:
    """A result item's text, as the model reads it."""
    kind = item["type"]
    output = item.get("output")
    if kind == "shell_call_output" and isinstance(output, list):
        return "\n".join(_shell_chunk(chunk) for chunk in output if isinstance(chunk, dict))
    if kind == "apply_patch_call_output":
        return output or ("Done." if item.get("status") == "completed" else "The patch failed.")
    if kind == "tool_search_output":
        return _json(item.get("tools") or [])
    if isinstance(output, list):
        return "".join(p.get("text", "") for p in output if isinstance(p, dict))
    return output if isinstance(output, str) else _json(output)


def _shell_chunk(chunk: Json) -> str:
    outcome = chunk.get("outcome") or {}
    ending = "timed out" if outcome.get("type") == "timeout" else f"exit code {outcome.get('exit_code')}"
    parts = [chunk.get("stdout") or "", chunk.get("stderr") or "", f"({ending})"]
    return "\n".join(p for p in parts if p)


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()
