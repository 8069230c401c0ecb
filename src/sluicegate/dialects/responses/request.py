"""Responses request parsing: the `POST /v1/responses` body → a validated `ResponsesRequest`.

Input items are normalised to the item shapes the API returns (every item gets an id), so the
same list can be listed by `input_items` exactly as sent; the dialect maps it to our own
conversation items (`conversation.py`), which the conversation turns into chat messages.
`item_reference` items are left for the conversation to resolve against the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sluicegate.core.errors import ErrorKind, SluicegateError, invalid
from sluicegate.core.ids import new_id
from sluicegate.core.request import SamplingParams, ToolSpec
from sluicegate.core.validation import INT32_MAX, Fields, stream_fields
from sluicegate.dialects.responses.mcp_request import (
    MCP_ITEM_TYPES,
    McpServerParam,
    parse_mcp_item,
    parse_mcp_tool,
)
from sluicegate.dialects.responses.tool_items import TOOL_ITEM_TYPES, parse_tool_item
from sluicegate.dialects.responses.tool_types import (
    CLIENT_HOSTED,
    ClientTool,
    ToolOffer,
    model_name,
    parse_tool,
)

Json = dict[str, Any]

MESSAGE_ROLES = ("user", "assistant", "system", "developer")
INPUT_PART_TYPES = (
    "input_text",
    "output_text",
    "refusal",
    "input_image",
    "text",
    "summary_text",
    "reasoning_text",
)
ITEM_TYPES = (
    "message",
    "function_call",
    "function_call_output",
    "reasoning",
    "item_reference",
    "compaction",
    "additional_tools",
    *MCP_ITEM_TYPES,
    *TOOL_ITEM_TYPES,
)
MISSING = "missing_required_parameter"  # the code OpenAI gives every missing parameter


@dataclass(slots=True)
class ResponsesRequest:
    model: str
    input_items: list[Json]
    instructions: str | None = None
    previous_response_id: str | None = None
    store: bool = True
    background: bool = False
    stream: bool = False
    metadata: dict[str, str] = field(default_factory=dict)
    tools: list[Json] = field(default_factory=list)  # echoed back in the response object
    tool_specs: list[ToolSpec] = field(default_factory=list)
    tool_kinds: dict[str, ClientTool] = field(default_factory=dict)  # model-facing name → tool
    hosted_tools: list[str] = field(default_factory=list)  # hosted types not run by the client
    mcp_servers: list[McpServerParam] = field(default_factory=list)  # the `{type: "mcp"}` tools
    tool_choice: Any = "auto"  # as the client sent it, echoed back
    canonical_tool_choice: str = "auto"
    parallel_tool_calls: bool = True
    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_tool_calls: int | None = None
    truncation: str = "disabled"
    text: Json = field(default_factory=lambda: {"format": {"type": "text"}})
    reasoning: Json | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    service_tier: str = "default"
    include: list[str] = field(default_factory=list)
    ttl: float | None = None  # LM Studio's: idle seconds before the instance used is unloaded
    context_overflow: str | None = None  # error, rolling_window or truncate_middle (llamacpp)


def parse_responses_request(body: Any) -> ResponsesRequest:
    f = Fields(body)
    model = f.string("model") or ""  # none: `[server] default_model`, else a 400 (Registry.resolve)
    req = ResponsesRequest(model=model, input_items=_input(f))
    req.instructions = f.string("instructions")
    req.previous_response_id = f.string("previous_response_id")
    req.stream, _ = stream_fields(f)  # Responses streams no usage chunk: the events carry it
    req.background = bool(f.boolean("background"))
    store = f.boolean("store")
    req.store = True if store is None else store
    if req.background and not req.store:
        f.fail("background", "Background mode requires 'store' to be true.")
    req.metadata = _metadata(f)
    raw_tools = f.array("tools") or []
    offer = ToolOffer(echo=req.tools)
    for tool in f.items("tools", raw_tools):
        if tool.obj.get("type") == "mcp":
            server, echo = parse_mcp_tool(tool)
            if any(s.server_label == server.server_label for s in req.mcp_servers):
                tool.fail(
                    "server_label",
                    f"Invalid '{tool.where('server_label')}': '{server.server_label}' is used by another MCP tool.",
                )
            req.mcp_servers.append(server)
            req.tools.append(echo)
        else:
            parse_tool(tool, offer)
    _input_tools(f, req, offer)
    req.tool_specs, req.tool_kinds, req.hosted_tools = offer.specs, offer.kinds, offer.hosted
    req.tool_choice, req.canonical_tool_choice = _tool_choice(f, req)
    if isinstance(req.tool_choice, dict) and req.tool_choice["type"] == "mcp":
        label = req.tool_choice["server_label"]
        if label not in {s.server_label for s in req.mcp_servers}:
            f.fail(
                "tool_choice",
                f"Invalid value for 'tool_choice.server_label': no MCP tool with server_label '{label}' is in 'tools'.",
            )
    req.parallel_tool_calls = f.boolean("parallel_tool_calls") is not False
    s = req.sampling
    s.temperature = f.number("temperature", low=0, high=2)
    s.top_p = f.number("top_p", low=0, high=1)
    s.presence_penalty = f.number("presence_penalty", low=-2, high=2)
    s.frequency_penalty = f.number("frequency_penalty", low=-2, high=2)
    s.max_tokens = f.integer("max_output_tokens", low=1, high=INT32_MAX)
    s.top_logprobs = f.integer("top_logprobs", low=0, high=20)
    s.seed = f.integer("seed")
    include = f.array("include") or []
    if not all(isinstance(x, str) for x in include):
        f.fail("include", "Invalid 'include': expected an array of strings.")
    req.include = include
    s.logprobs = "message.output_text.logprobs" in include or bool(s.top_logprobs)
    req.max_tool_calls = f.integer("max_tool_calls", low=1, high=INT32_MAX)
    req.truncation = f.string("truncation", choices=("auto", "disabled")) or "disabled"
    text = f.object("text")
    if text is not None:
        fmt = text.object("format")
        if fmt is not None:
            fmt.string("type", required=True, choices=("text", "json_object", "json_schema"))
        req.text = {"format": fmt.obj if fmt is not None else {"type": "text"}}
        if (verbosity := text.string("verbosity", choices=("low", "medium", "high"))) is not None:
            req.text["verbosity"] = verbosity
    reasoning = f.object("reasoning")
    if reasoning is not None:
        effort = reasoning.string("effort", choices=("none", "minimal", "low", "medium", "high", "xhigh"))
        summary = reasoning.string("summary", choices=("auto", "concise", "detailed"))
        req.reasoning = {"effort": effort, "summary": summary}
    req.user = f.string("user")
    req.safety_identifier = f.string("safety_identifier")
    req.prompt_cache_key = f.string("prompt_cache_key")
    req.service_tier = f.string("service_tier") or "default"
    for key in ("conversation", "prompt"):
        if f.obj.get(key) is not None:
            f.fail(
                key,
                f"'{key}' is not supported by Sluicegate; continue conversations with 'previous_response_id'.",
            )
    req.ttl = f.number("ttl", low=1, high=INT32_MAX)
    # What a model that cannot fit the prompt does (engines with a policy: llamacpp).
    req.context_overflow = f.string(
        "context_overflow", choices=("error", "rolling_window", "truncate_middle")
    )
    return req


def _metadata(f: Fields) -> dict[str, str]:
    meta = f.object("metadata")
    if meta is None:
        return {}
    if len(meta.obj) > 16:
        f.fail("metadata", "Invalid 'metadata': at most 16 key-value pairs are allowed.")
    for key, value in meta.obj.items():
        if not isinstance(value, str) or len(key) > 64 or len(value) > 512:
            meta.fail(
                key,
                f"Invalid '{meta.where(key)}': metadata values must be strings of at most 512 characters.",
            )
    return dict(meta.obj)


def _input_tools(f: Fields, req: ResponsesRequest, offer: ToolOffer) -> None:
    """Tools that input items make available from where they stand (`additional_tools`, and
    the tools a client-run `tool_search` found): offered to the model like `tools`, not echoed."""
    found = ToolOffer(specs=offer.specs, kinds=offer.kinds, hosted=offer.hosted)
    for index, item in enumerate(req.input_items):
        if item["type"] in ("additional_tools", "tool_search_output") and isinstance(item.get("tools"), list):
            where = Fields(item, f.where("input") + f"[{index}]")
            for tool in where.items("tools", item.get("tools") or []):
                if tool.obj.get("type") != "mcp":
                    parse_tool(tool, found)


def _tool_choice(f: Fields, req: ResponsesRequest) -> tuple[Any, str]:
    """The choice as sent (echoed back) and as the engine takes it. A hosted tool's choice
    (`{"type": "web_search"}`) names that type; the route refuses it when the tool is not
    served (`hosted_tools.check_choice`)."""
    choice = f.obj.get("tool_choice")
    if choice is None:
        return "auto", "auto"
    if isinstance(choice, str):
        f.string("tool_choice", choices=("none", "auto", "required"))
        return choice, choice
    c = f.object("tool_choice")
    assert c is not None
    kind = c.string("type", required=True) or ""
    if kind == "mcp":
        # An MCP server's tools are only known once listed: the name is checked by the engine.
        label = c.string("server_label", required=True)
        mcp_name = c.string("name")
        return {"type": "mcp", "server_label": label, "name": mcp_name}, mcp_name or "required"
    if kind == "allowed_tools":
        c.array("tools", required=True, non_empty=True)
        mode = c.string("mode", choices=("auto", "required")) or "auto"
        return c.obj, mode
    if kind in ("function", "custom"):
        name = c.string("name", required=True) or ""
        wanted = model_name(name, c.string("namespace"))
        if req.tool_kinds.get(wanted) is None or req.tool_kinds[wanted].kind != kind:
            c.fail(
                "name", f"Invalid value for '{c.where('name')}': no {kind} tool named '{name}' is in 'tools'."
            )
        echo: Json = {"type": kind, "name": name}
        if wanted != name:
            echo["namespace"] = c.obj["namespace"]
        return echo, wanted
    if kind in CLIENT_HOSTED and kind in req.tool_kinds:
        return c.obj, kind
    if kind in req.hosted_tools:
        return c.obj, "required"  # a hosted tool: served or refused by the route
    c.fail("type", f"Invalid value for '{c.where('type')}': '{kind}' names no tool in 'tools'.")


def _input(f: Fields) -> list[Json]:
    raw = f.obj.get("input")
    if raw is None:
        f.fail("input", "Missing required parameter: 'input'.", MISSING)
    if isinstance(raw, str):
        return [_message_item("user", [{"type": "input_text", "text": raw}])]
    if not isinstance(raw, list):
        f.fail("input", "Invalid type for 'input': expected a string or an array of input items.")
    if not raw:
        f.fail("input", "Invalid 'input': empty array. Expected at least one input item.")
    return [_item(item) for item in f.items("input", raw)]


def _message_item(
    role: str, content: list[Json], item_id: str | None = None, status: str = "completed"
) -> Json:
    return {
        "type": "message",
        "id": item_id or new_id("msg_"),
        "role": role,
        "content": content,
        "status": status,
    }


def _item(i: Fields) -> Json:
    kind = i.string("type")
    if kind is None:
        if "role" not in i.obj:
            i.fail("type", f"Missing required parameter: '{i.where('type')}'.", MISSING)
        kind = "message"
    if kind not in ITEM_TYPES:
        allowed = ", ".join(f"'{t}'" for t in ITEM_TYPES)
        i.fail(
            "type",
            f"Invalid value for '{i.where('type')}': '{kind}'. Supported input item types are: {allowed}.",
        )
    item_id = i.string("id")
    if kind == "message":
        role = i.string("role", required=True, choices=MESSAGE_ROLES) or "user"
        return _message_item(role, _parts(i, role), item_id, i.string("status") or "completed")
    if kind == "function_call":
        call: Json = {
            "type": "function_call",
            "id": item_id or new_id("fc_"),
            "call_id": i.string("call_id", required=True),
            "name": i.string("name", required=True),
            "arguments": i.string("arguments") or "",
            "status": "completed",
        }
        if (namespace := i.string("namespace")) is not None:
            call["namespace"] = namespace
        return call
    if kind == "function_call_output":
        output = i.obj.get("output")
        if output is None:
            i.fail("output", f"Missing required parameter: '{i.where('output')}'.", MISSING)
        if isinstance(output, list):
            output = "".join(p.get("text", "") for p in output if isinstance(p, dict))
        elif not isinstance(output, str):
            output = _json_text(output)
        return {
            "type": "function_call_output",
            "id": item_id or new_id("fco_"),
            "call_id": i.string("call_id", required=True),
            "output": output,
            "status": "completed",
        }
    if kind == "reasoning":
        summary = i.array("summary") or []
        content = i.array("content") or []
        for where, parts in (("summary", summary), ("content", content)):
            for part in i.items(where, parts):
                part.string("text", required=True)
        item: Json = {"type": "reasoning", "id": item_id or new_id("rs_"), "summary": summary}
        if content:
            item["content"] = content
        if (sealed := i.string("encrypted_content")) is not None:
            item["encrypted_content"] = sealed  # unsealed before the model sees it
        return item
    if kind == "additional_tools":
        i.string("role", required=True, choices=("developer",))
        i.array("tools", required=True)
        return {
            "type": "additional_tools",
            "id": item_id or new_id("at_"),
            "role": "developer",
            "tools": i.obj["tools"],
        }
    if kind == "compaction":
        blob = i.string("encrypted_content", required=True)
        return {"type": "compaction", "id": item_id or new_id("cmp_"), "encrypted_content": blob}
    if kind in MCP_ITEM_TYPES:
        return parse_mcp_item(i, kind, item_id)
    if kind in TOOL_ITEM_TYPES:
        return parse_tool_item(i, kind, item_id)
    # item_reference: resolved against the store by the route
    return {"type": "item_reference", "id": i.string("id", required=True)}


def _parts(i: Fields, role: str) -> list[Json]:
    content = i.obj.get("content")
    if content is None:
        i.fail("content", f"Missing required parameter: '{i.where('content')}'.", MISSING)
    text_type = "output_text" if role == "assistant" else "input_text"
    if isinstance(content, str):
        part: Json = {"type": text_type, "text": content}
        if role == "assistant":
            part["annotations"] = []
        return [part]
    if not isinstance(content, list):
        i.fail(
            "content",
            f"Invalid type for '{i.where('content')}': expected a string or an array of content parts.",
        )
    parts: list[Json] = []
    for p in i.items("content", content):
        kind = p.string("type", required=True, choices=INPUT_PART_TYPES) or ""
        if kind == "refusal":
            parts.append({"type": "refusal", "refusal": p.string("refusal", required=True)})
        elif kind == "input_image":
            url = p.string("image_url")
            if url is None:
                if p.obj.get("file_id") is not None:
                    p.fail(
                        "file_id",
                        "Images by 'file_id' are not supported; send 'image_url' (an http(s) or data: URL).",
                    )
                p.fail("image_url", f"Missing required parameter: '{p.where('image_url')}'.", MISSING)
            parts.append({"type": "input_image", "image_url": url, "detail": p.string("detail") or "auto"})
        else:
            text = p.string("text", required=True) or ""
            parts.append(
                {"type": kind, "text": text, **({"annotations": []} if kind == "output_text" else {})}
            )
    return parts


def _json_text(value: Any) -> str:
    import orjson

    return orjson.dumps(value).decode()


def not_found(what: str, ident: str, param: str) -> SluicegateError:
    return SluicegateError(
        ErrorKind.NOT_FOUND, f"{what} with id '{ident}' not found.", param=param, code="not_found"
    )


__all__ = ["ResponsesRequest", "invalid", "not_found", "parse_responses_request"]
