"""LM Studio REST v1 `/api/v1/chat` request parsing, as strict as LM Studio's own.

Unknown keys are a 400 `unrecognized_keys` naming the key; input items are
`{"type": "text", "content"}` or `{"type": "image", "data_url"}`; `integrations` are validated
for shape (plugin id strings, `plugin` and `ephemeral_mcp` objects).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sluicegate.core.errors import invalid
from sluicegate.core.request import ContentPart, SamplingParams
from sluicegate.core.tool_selection import PluginChoice, RequestServer, ToolSelection
from sluicegate.core.validation import INT32_MAX, MAX_REPEAT_PENALTY, Fields

Json = dict[str, Any]

CHAT_KEYS = frozenset(
    {
        "model",
        "input",
        "system_prompt",
        "integrations",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "repeat_penalty",
        "max_output_tokens",
        "reasoning",
        "context_length",
        "context_overflow",
        "store",
        "previous_response_id",
    }
)
REASONING_OPTIONS = ("off", "low", "medium", "high", "on")
PLUGIN_KEYS = frozenset({"type", "id", "allowed_tools"})
EPHEMERAL_MCP_KEYS = frozenset({"type", "server_label", "server_url", "allowed_tools", "headers"})


@dataclass(slots=True)
class LMStudioChatRequest:
    model: str
    input_parts: list[ContentPart]  # the user message: text and images
    system_prompt: str | None = None
    integrations: list[Json] = field(default_factory=list)
    stream: bool = False
    sampling: SamplingParams = field(default_factory=SamplingParams)
    reasoning: str | None = None
    context_length: int | None = None
    context_overflow: str | None = (
        None  # a Sluicegate extension: "error", "rolling_window", "truncate_middle"
    )
    store: bool = True
    previous_response_id: str | None = None


def reject_unknown_keys(f: Fields, allowed: frozenset[str]) -> None:
    unknown = [key for key in f.obj if key not in allowed]
    if unknown:
        names = ", ".join(f"'{key}'" for key in unknown)
        raise invalid(
            f"Unrecognized key(s) in object: {names}", f.path or unknown[0], code="unrecognized_keys"
        )


def parse_lmstudio_chat(body: Any) -> LMStudioChatRequest:
    f = Fields(body)
    reject_unknown_keys(f, CHAT_KEYS)
    req = LMStudioChatRequest(model=f.string("model", required=True) or "", input_parts=_input(f))
    req.system_prompt = f.string("system_prompt")
    req.stream = bool(f.boolean("stream"))
    s = req.sampling
    s.temperature = f.number("temperature", low=0, high=1)
    s.top_p = f.number("top_p", low=0, high=1)
    s.top_k = f.integer("top_k", low=-1, high=INT32_MAX)
    s.min_p = f.number("min_p", low=0, high=1)
    s.repeat_penalty = f.number("repeat_penalty", low=0, high=MAX_REPEAT_PENALTY)
    s.max_tokens = f.integer("max_output_tokens", low=1, high=INT32_MAX)
    req.reasoning = f.string("reasoning", choices=REASONING_OPTIONS)
    req.context_length = f.integer("context_length", low=1, high=INT32_MAX)
    req.context_overflow = f.string(
        "context_overflow", choices=("error", "rolling_window", "truncate_middle")
    )
    store = f.boolean("store")
    req.store = True if store is None else store
    req.previous_response_id = f.string("previous_response_id")
    if req.previous_response_id is not None and not req.previous_response_id.startswith("resp_"):
        f.fail("previous_response_id", "Invalid 'previous_response_id': it must start with \"resp_\".")
    req.integrations = _integrations(f)
    return req


def _input(f: Fields) -> list[ContentPart]:
    raw = f.obj.get("input")
    if raw is None:
        f.fail("input", '"input" is required', "missing_required_parameter")
    if isinstance(raw, str):
        return [ContentPart("text", text=raw)]
    if not isinstance(raw, list) or not raw:
        f.fail("input", "Invalid 'input': expected a string or a non-empty array of text and image items.")
    parts: list[ContentPart] = []
    for item in f.items("input", raw):
        kind = item.obj.get("type")
        if kind == "text":
            reject_unknown_keys(item, frozenset({"type", "content"}))
            parts.append(ContentPart("text", text=item.string("content", required=True) or ""))
        elif kind == "image":
            reject_unknown_keys(item, frozenset({"type", "data_url"}))
            url = item.string("data_url", required=True) or ""
            if not url.startswith("data:image/"):
                item.fail(
                    "data_url",
                    f"Invalid '{item.where('data_url')}': expected a base64 data URL (data:image/...;base64,...).",
                )
            parts.append(ContentPart("image", image_url=url))
        else:
            raise invalid(
                "Invalid discriminator value. Expected 'text' | 'image'", item.path, code="invalid_union"
            )
    return parts


def _integrations(f: Fields) -> list[Json]:
    raw = f.array("integrations") or []
    out: list[Json] = []
    for index, value in enumerate(raw):
        where = f"integrations.{index}"
        if isinstance(value, str):
            if not value:
                raise invalid("A plugin id must not be empty.", where)
            out.append({"type": "plugin", "id": value})
            continue
        item = Fields(value, where)
        kind = item.string("type", required=True, choices=("plugin", "ephemeral_mcp"))
        reject_unknown_keys(item, PLUGIN_KEYS if kind == "plugin" else EPHEMERAL_MCP_KEYS)
        if kind == "plugin":
            item.string("id", required=True)
        else:
            item.string("server_label", required=True)
            item.string("server_url", required=True)
            headers = item.object("headers")
            if headers is not None and not all(isinstance(v, str) for v in headers.obj.values()):
                item.fail("headers", f"Invalid '{where}.headers': header values must be strings.")
        tools = item.array("allowed_tools")
        if tools is not None and not all(isinstance(t, str) for t in tools):
            item.fail("allowed_tools", f"Invalid '{where}.allowed_tools': expected an array of strings.")
        out.append(item.obj)
    return out


def tool_selection(integrations: list[Json]) -> ToolSelection:
    """Validated `integrations` as the providers the request picks."""
    selection = ToolSelection()
    for item in integrations:
        if item["type"] == "plugin":
            selection.plugins.append(PluginChoice(item["id"], item.get("allowed_tools")))
        else:
            selection.servers.append(
                RequestServer(
                    item["server_label"],
                    item["server_url"],
                    dict(item.get("headers") or {}),
                    item.get("allowed_tools"),
                )
            )
    return selection
