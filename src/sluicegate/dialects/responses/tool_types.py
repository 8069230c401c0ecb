"""Every tool type of the Responses schema, as the model sees it and as the client gets it back.

The model only knows functions, so each tool the *client* runs is offered as one:

- `function`: as is.
- `custom` (free-form text input, optional `format` grammar): a function with one string
  parameter `input`; the grammar is described in the tool's description. A `regex` grammar is
  also the `input` string's JSON-schema `pattern`, which an engine that constrains decoding
  enforces (llama.cpp, on forced calls); a `lark` grammar is described only. Its calls are
  `custom_tool_call` items whose `input` is that string (or the model's raw arguments when
  they are not that JSON object).
- `namespace`: each function (or custom tool) inside is offered as `<namespace>__<name>`; its
  calls carry `name` and `namespace` apart, as OpenAI sends them.
- Client-executed hosted tools — `local_shell`, `shell`, `apply_patch`, `tool_search` with
  `execution: "client"` — a function under the tool's type name whose parameters are the call
  item's fields; calls become `local_shell_call`, `shell_call`, `apply_patch_call`,
  `tool_search_call` items for the client to run.

Every other hosted tool (`web_search`, `file_search`, `code_interpreter`, …) is kept apart in
`ToolOffer.hosted`: the route serves it through a server-side provider when the operator maps
it (`[responses.hosted_tools]`) and otherwise leaves it out, saying so (`hosted_tools.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from sluicegate.core.request import ToolSpec
from sluicegate.core.validation import Fields

Json = dict[str, Any]
CallKind = Literal["function", "custom", "local_shell", "shell", "apply_patch", "tool_search"]

CLIENT_HOSTED = ("local_shell", "shell", "apply_patch", "tool_search")
NAMESPACE_SEPARATOR = "__"

# What the model is told each client-executed hosted tool takes: the call item's own fields.
_HOSTED_SPECS: dict[str, tuple[str, Json]] = {
    "local_shell": (
        'Run a command on the user\'s machine. `command` is the argv list (e.g. ["bash", "-lc", "ls"]).',
        {
            "type": "object",
            "properties": {
                "command": {"type": "array", "items": {"type": "string"}},
                "working_directory": {"type": "string"},
                "timeout_ms": {"type": "integer"},
                "env": {"type": "object", "additionalProperties": {"type": "string"}},
            },
            "required": ["command"],
        },
    ),
    "shell": (
        "Run shell commands on the user's machine, one after another.",
        {
            "type": "object",
            "properties": {
                "commands": {"type": "array", "items": {"type": "string"}},
                "timeout_ms": {"type": "integer"},
                "max_output_length": {"type": "integer"},
            },
            "required": ["commands"],
        },
    ),
    "apply_patch": (
        "Create, update or delete one file with a V4A diff.",
        {
            "type": "object",
            "properties": {
                "type": {"type": "string", "enum": ["create_file", "update_file", "delete_file"]},
                "path": {"type": "string"},
                "diff": {"type": "string"},
            },
            "required": ["type", "path"],
        },
    ),
    "tool_search": (
        "Search for more tools to use.",
        {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    ),
}


@dataclass(frozen=True, slots=True)
class ClientTool:
    """What a model-facing function name stands for on the wire."""

    kind: CallKind
    name: str  # the tool's own name (the inner name for a namespace member)
    namespace: str | None = None


@dataclass(slots=True)
class ToolOffer:
    """The request's tools: echoed back, offered to the model, and how calls render."""

    echo: list[Json] = field(default_factory=list)
    specs: list[ToolSpec] = field(default_factory=list)
    kinds: dict[str, ClientTool] = field(default_factory=dict)  # model-facing name → tool
    hosted: list[str] = field(default_factory=list)  # hosted tool types the server may serve


def model_name(name: str, namespace: str | None) -> str:
    return f"{namespace}{NAMESPACE_SEPARATOR}{name}" if namespace else name


def parse_tool(t: Fields, offer: ToolOffer) -> None:
    """One `tools[i]` entry (not `mcp`) into `offer`; a well-formed tool is never refused."""
    kind = t.string("type", required=True) or ""
    if kind == "function":
        echo = _function(t)
        offer.echo.append(echo)
        _offer_function(offer, echo, None)
    elif kind == "custom":
        echo = _custom(t)
        offer.echo.append(echo)
        _offer_custom(offer, echo, None)
    elif kind == "namespace":
        offer.echo.append(_namespace(t, offer))
    elif kind in CLIENT_HOSTED and (kind != "tool_search" or t.obj.get("execution") == "client"):
        offer.echo.append(dict(t.obj))
        description, parameters = _HOSTED_SPECS[kind]
        if kind == "tool_search":
            description = t.string("description") or description
            if isinstance(t.obj.get("parameters"), dict):
                parameters = t.obj["parameters"]
        offer.specs.append(ToolSpec(kind, description, parameters))
        offer.kinds[kind] = ClientTool(kind, kind)  # type: ignore[arg-type]
    else:
        offer.echo.append(dict(t.obj))
        offer.hosted.append(kind)


def _function(t: Fields) -> Json:
    parameters = t.object("parameters")
    return {
        "type": "function",
        "name": t.string("name", required=True),
        "description": t.string("description"),
        "parameters": parameters.obj if parameters is not None else None,
        "strict": t.boolean("strict"),
    }


def _custom(t: Fields) -> Json:
    echo: Json = {"type": "custom", "name": t.string("name", required=True)}
    if (description := t.string("description")) is not None:
        echo["description"] = description
    fmt = t.object("format")
    if fmt is not None:
        kind = fmt.string("type", required=True, choices=("text", "grammar"))
        if kind == "grammar":
            fmt.string("syntax", required=True, choices=("lark", "regex"))
            fmt.string("definition", required=True)
        echo["format"] = fmt.obj
    return echo


def _namespace(t: Fields, offer: ToolOffer) -> Json:
    name = t.string("name", required=True) or ""
    members = t.array("tools", required=True) or []
    echo_members: list[Json] = []
    for member in t.items("tools", members):
        kind = member.string("type", required=True, choices=("function", "custom"))
        echo = _function(member) if kind == "function" else _custom(member)
        echo_members.append(echo)
        if kind == "function":
            _offer_function(offer, echo, name)
        else:
            _offer_custom(offer, echo, name)
    return {
        "type": "namespace",
        "name": name,
        "description": t.string("description") or "",
        "tools": echo_members,
    }


def _offer_function(offer: ToolOffer, echo: Json, namespace: str | None) -> None:
    name = model_name(echo["name"], namespace)
    offer.specs.append(
        ToolSpec(name, echo["description"] or "", echo["parameters"] or {}, bool(echo["strict"]))
    )
    offer.kinds[name] = ClientTool("function", echo["name"], namespace)


def _offer_custom(offer: ToolOffer, echo: Json, namespace: str | None) -> None:
    name = model_name(echo["name"], namespace)
    description = echo.get("description") or ""
    fmt = echo.get("format") or {}
    if fmt.get("type") == "grammar":
        description += (
            f"\n\nThe input is free-form text (not JSON) matching this {fmt['syntax']} grammar:\n"
            f"{fmt['definition']}"
        )
    text: Json = {"type": "string", "description": "The tool's free-form input."}
    if fmt.get("type") == "grammar" and fmt.get("syntax") == "regex":
        text["pattern"] = anchored(str(fmt["definition"]))
    parameters = {"type": "object", "properties": {"input": text}, "required": ["input"]}
    offer.specs.append(ToolSpec(name, description.strip(), parameters))
    offer.kinds[name] = ClientTool("custom", echo["name"], namespace)


# --- calls: the model's arguments → the call item's fields, and back -------------------------


def _arguments(text: str) -> Json:
    try:
        value = orjson.loads(text) if text.strip() else {}
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def anchored(regex: str) -> str:
    """A custom tool's regex as a JSON-schema `pattern` for the whole input (patterns match
    anywhere unless anchored; a grammar describes the whole text)."""
    body = (
        regex.removeprefix("^").removesuffix("$") if regex.startswith("^") and regex.endswith("$") else regex
    )
    return f"^({body})$"


def custom_input(arguments: str) -> str:
    """The free-form input of a custom call: the `input` of `{"input": …}`, else the raw text
    (a model, or a script, may write the input itself rather than wrap it)."""
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(value, dict) and isinstance(value.get("input"), str):
        return str(value["input"])
    return arguments


def call_item(tool: ClientTool, item_id: str, call_id: str, arguments: str, status: str) -> Json:
    """A client call as its Responses output item."""
    if tool.kind == "function":
        out: Json = {
            "type": "function_call",
            "id": item_id,
            "call_id": call_id,
            "name": tool.name,
            "arguments": arguments,
            "status": status,
        }
    elif tool.kind == "custom":
        out = {"type": "custom_tool_call", "id": item_id, "call_id": call_id, "name": tool.name}
        out["input"] = custom_input(arguments)
        out["status"] = status
    else:
        out = hosted_call_item(tool.kind, item_id, call_id, _arguments(arguments), status)
    if tool.namespace:
        out["namespace"] = tool.namespace
    return out


def hosted_call_item(kind: str, item_id: str, call_id: str, args: Json, status: str) -> Json:
    if kind == "local_shell":
        command = args.get("command")
        if isinstance(command, str):
            command = ["bash", "-lc", command]
        action: Json = {
            "type": "exec",
            "command": [str(c) for c in command] if isinstance(command, list) else [],
            "env": args.get("env") if isinstance(args.get("env"), dict) else {},
            "timeout_ms": args.get("timeout_ms"),
            "user": args.get("user"),
            "working_directory": args.get("working_directory") or args.get("workdir"),
        }
        return {
            "type": "local_shell_call",
            "id": item_id,
            "call_id": call_id,
            "action": action,
            "status": status,
        }
    if kind == "shell":
        commands = args.get("commands")
        if isinstance(commands, str):
            commands = [commands]
        action = {
            "commands": [str(c) for c in commands] if isinstance(commands, list) else [],
            "timeout_ms": args.get("timeout_ms"),
            "max_output_length": args.get("max_output_length"),
        }
        return {
            "type": "shell_call",
            "id": item_id,
            "call_id": call_id,
            "action": action,
            "status": status,
            "environment": None,
        }
    if kind == "apply_patch":
        nested = args.get("operation")
        op: Json = nested if isinstance(nested, dict) else args
        operation: Json = {"type": op.get("type") or "update_file", "path": op.get("path") or ""}
        if operation["type"] != "delete_file":
            operation["diff"] = op.get("diff") or ""
        # apply_patch_call's status is only ever in_progress or completed
        return {
            "type": "apply_patch_call",
            "id": item_id,
            "call_id": call_id,
            "operation": operation,
            "status": "completed" if status == "completed" else "in_progress",
        }
    return {
        "type": "tool_search_call",
        "id": item_id,
        "call_id": call_id,
        "arguments": args,
        "execution": "client",
        "status": status,
    }
