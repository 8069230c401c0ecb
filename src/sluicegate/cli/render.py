"""`sluicegate models render (--template FILE | --gguf FILE)`: the prompt text a conversation
becomes, exactly as the llama.cpp engine renders it before decoding.

stdin holds an OpenAI Chat Completions body, at least `{"messages": [...]}` and optionally
`tools`, `tool_choice`, `reasoning_effort`, `continue_final_message`; it is read by the Chat Completions dialect, as the
server would. With `--gguf` the model's own template (or its fallback), BOS/EOS tokens and BOS
handling apply; with `--template` (which also overrides a GGUF's) the file is the template.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sluicegate.core.errors import SluicegateError
from sluicegate.engines.base import ConfigError


def add_render_command(commands: Any) -> None:
    render = commands.add_parser(
        "render", help="print the prompt text a conversation on stdin becomes (llama.cpp engine)"
    )
    render.add_argument("--template", help="a Jinja chat template file")
    render.add_argument("--gguf", help="a GGUF model file (its template, or its fallback, and tokens)")


def render_command(args: argparse.Namespace) -> int:
    if not args.template and not args.gguf:
        print("sluicegate: models render needs --template FILE or --gguf FILE", file=sys.stderr)
        return 2
    try:
        prompt = _render(args.template, args.gguf, sys.stdin.read())
    except ConfigError as exc:
        print(f"sluicegate: {exc}", file=sys.stderr)
        return 2
    except (SluicegateError, ValueError, OSError) as exc:
        message = exc.info.message if isinstance(exc, SluicegateError) else str(exc)
        print(f"sluicegate: {message}", file=sys.stderr)
        return 1
    sys.stdout.write(prompt)
    return 0


def _render(template: str | None, gguf: str | None, text: str) -> str:
    # Imported here: the llama.cpp bindings load only for this command.
    from sluicegate.dialects.chat_completions.request import parse_chat_request
    from sluicegate.engines.llamacpp.template import render_request

    body = json.loads(text)
    if not isinstance(body, dict):
        raise ValueError("stdin must hold a JSON object with `messages`")
    request, _ = parse_chat_request({"model": "render", **body})
    source = Path(template).read_text(encoding="utf-8") if template else None
    if gguf is None:
        assert source is not None
        from sluicegate.parsing import detect_reasoning

        return render_request(source, request, bos_token="", eos_token="", reasoning=detect_reasoning(source))
    from sluicegate.engines.llamacpp import LlamaCppEngine

    table: dict[str, Any] = {"id": "render", "engine": "llamacpp", "path": str(Path(gguf).resolve())}
    if source is not None:
        table["chat_template"] = source
    return LlamaCppEngine.from_config(table, Path.cwd()).render_prompt(request)
