"""What a chat template can take, found by rendering small probe conversations (llama.cpp's
`jinja/caps.cpp` asks the same questions by watching which values a template reads).

The answers decide how a conversation is handed over: a system prompt folded into the first user
turn, tool-call arguments as objects or as JSON text, content as a string or as typed parts, and
several tool calls in one turn or one per turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import jinja2

from sluicegate.engines.llamacpp.jinja_env import compile_template

_SYSTEM = "SYSTEM_MARKER_7c1"
_CONTENT = "CONTENT_MARKER_7c1"
_ARG = "ARGUMENT_MARKER_7c1"
_SECOND = "second_tool_7c1"
_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": "Tool description",
            "parameters": {
                "type": "object",
                "properties": {"arg": {"type": "string", "description": "Arg description"}},
                "required": ["arg"],
            },
        },
    }
    for name in ("tool1", _SECOND)
]


@dataclass(frozen=True, slots=True)
class TemplateCaps:
    system_role: bool = True
    string_content: bool = True  # False: content must be a list of typed parts
    tool_calls: bool = True
    object_arguments: bool = True  # False: arguments are handed over as JSON text
    parallel_tool_calls: bool = True


def _render(source: str, messages: list[dict[str, Any]], tools: bool = False) -> str | None:
    variables: dict[str, Any] = {
        "messages": messages,
        "bos_token": "",
        "eos_token": "",
        "add_generation_prompt": True,
    }
    if tools:
        variables["tools"] = _TOOLS
    try:
        return compile_template(source).render(**variables)
    except (jinja2.TemplateError, TypeError, ValueError, LookupError, AttributeError, ArithmeticError):
        return None


def _call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _tool_turns(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "User message"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        *({"role": "tool", "content": "Tool response", "tool_call_id": c["id"]} for c in calls),
        {"role": "assistant", "content": "The tool response was 'tool response'"},
        {"role": "user", "content": "User message"},
    ]


@lru_cache(maxsize=64)
def template_caps(source: str) -> TemplateCaps:
    user = [{"role": "user", "content": _CONTENT}]
    plain = _render(source, user)
    typed = None
    if plain is None or _CONTENT not in plain:
        typed = _render(source, [{"role": "user", "content": [{"type": "text", "text": _CONTENT}]}])
    string_content = not (typed is not None and _CONTENT in typed)

    def content(text: str) -> Any:
        return text if string_content else [{"type": "text", "text": text}]

    system = _render(
        source,
        [{"role": "system", "content": content(_SYSTEM)}, {"role": "user", "content": content("User")}],
    )
    system_role = system is not None and _SYSTEM in system

    as_object = _render(source, _tool_turns([_call("call00001", "tool1", {"arg": _ARG})]), tools=True)
    # A template that prints the arguments as they come shows an object as a Python dict: it
    # wants JSON text, as does one that cannot render an object at all.
    object_arguments = as_object is not None and _ARG in as_object and repr({"arg": _ARG}) not in as_object
    arguments: Any = {"arg": _ARG} if object_arguments else f'{{"arg": "{_ARG}"}}'
    if object_arguments:
        tool_calls = True
    else:
        as_text = _render(source, _tool_turns([_call("call00001", "tool1", arguments)]), tools=True)
        tool_calls = as_text is not None and _ARG in as_text
    parallel = tool_calls
    if tool_calls:
        two = [_call("call00001", "tool1", arguments), _call("call00002", _SECOND, arguments)]
        rendered = _render(source, _tool_turns(two), tools=True)
        parallel = rendered is not None and rendered.count(_ARG) >= 2
    return TemplateCaps(
        system_role=system_role,
        string_content=string_content,
        tool_calls=tool_calls,
        object_arguments=object_arguments,
        parallel_tool_calls=parallel,
    )
