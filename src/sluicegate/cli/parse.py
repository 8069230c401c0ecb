"""`sluicegate models parse`: a model's raw output (stdin) as the message the server would make
of it, for people debugging a model's chat format and for tests.

    sluicegate models parse --template T.jinja [--tools tools.json] < output.txt
    {"reasoning": "…", "content": "…", "tool_calls": [{"name": "…", "arguments": {…}}]}

The family is recognised from the template as the engine does, and the output read as the
continuation of the prompt the template renders with its own defaults (no thinking switch set).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from sluicegate.core.events import ItemKind, TextDelta, ToolCallDelta
from sluicegate.core.request import Message, ToolSpec


def add_command(commands: Any) -> None:
    parse = commands.add_parser("parse", help="parse a model's raw output (stdin) as the server would")
    source = parse.add_mutually_exclusive_group(required=True)
    source.add_argument("--template", help="the chat template (Jinja) file")
    source.add_argument("--gguf", help="a GGUF file whose chat template to use")
    parse.add_argument("--tools", help="a JSON file holding an array of OpenAI-style tool objects")


def _template(args: argparse.Namespace) -> tuple[str, str, str]:
    """(template, bos, eos)."""
    if args.template:
        return Path(args.template).read_text(encoding="utf-8"), "", ""
    from sluicegate.engines.llamacpp.gguf_info import read_gguf_info

    info = read_gguf_info(Path(args.gguf))
    if not info.chat_template:
        raise ValueError(f"{args.gguf} has no chat template")
    return info.chat_template, info.bos_token, info.eos_token


def _tools(path: str | None) -> list[dict[str, Any]]:
    if not path:
        return []
    tools = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(tools, list):
        raise ValueError("--tools must hold a JSON array of tool objects")
    return tools


def parse_output(args: argparse.Namespace) -> int:
    from sluicegate.engines.llamacpp.template import render_chat
    from sluicegate.parsing import detect_reasoning, detect_tool_format, new_parser, tool_schemas

    try:
        source, bos, eos = _template(args)
        tools = _tools(args.tools)
    except (OSError, ValueError) as exc:
        print(f"sluicegate: {exc}", file=sys.stderr)
        return 1
    reasoning = detect_reasoning(source)
    specs = [
        ToolSpec(f["name"], f.get("description", ""), f.get("parameters") or {})
        for f in (t.get("function", t) for t in tools)
        if isinstance(f, dict) and isinstance(f.get("name"), str)
    ]
    starts = reasoning is not None and reasoning.starts_open
    try:
        prompt = render_chat(
            source, [Message(role="user", content="Hello")], specs, bos_token=bos, eos_token=eos
        )
        starts = reasoning is not None and reasoning.opened_by(prompt)
    except Exception:
        pass
    parser = new_parser(
        detect_tool_format(source), reasoning=reasoning, starts_in_reasoning=starts, tools=tool_schemas(tools)
    )
    events = parser.feed(sys.stdin.read()) + parser.finish()
    print(json.dumps(message_of(events), ensure_ascii=False))
    return 0


def message_of(events: list[Any]) -> dict[str, Any]:
    """Events folded into `{"reasoning", "content", "tool_calls"}` (arguments as objects when JSON)."""
    text = {ItemKind.MESSAGE: "", ItemKind.REASONING: ""}
    calls: list[dict[str, Any]] = []
    for event in events:
        if isinstance(event, TextDelta):
            text[event.channel] += event.text
        elif isinstance(event, ToolCallDelta):
            while len(calls) <= event.index:
                calls.append({"name": "", "arguments": ""})
            if event.name is not None:
                calls[event.index]["name"] = event.name
            calls[event.index]["arguments"] += event.arguments
    for call in calls:
        with contextlib.suppress(ValueError):
            call["arguments"] = json.loads(call["arguments"])
    return {
        "reasoning": text[ItemKind.REASONING] or None,
        "content": text[ItemKind.MESSAGE] or None,
        "tool_calls": calls,
    }
