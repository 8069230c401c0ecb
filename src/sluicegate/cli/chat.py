"""`sluicegate chat [MODEL]`: a terminal chat against a running server, over Chat Completions.

Streams the answer as it comes (reasoning dimmed, tool calls shown), keeps the conversation for
the session, and has readline editing and history. Ctrl-C while an answer streams closes the
HTTP stream — the server cancels the generation — and returns to the prompt; Ctrl-D quits.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import orjson

if TYPE_CHECKING:  # imported where used: `sluicegate serve` parses its arguments here too
    import httpx

HELP = """Commands:
  /model NAME    talk to another model (the conversation is kept)
  /models        list the server's models
  /system TEXT   set the system prompt (empty: none); starts a new conversation
  /reset         forget the conversation
  /help          this text
A line ending in \\ continues on the next line; a line of three quotes (\"\"\") starts and ends a block.
Ctrl-C stops an answer, Ctrl-D quits."""

DIM, RESET, BOLD, RED = "\x1b[2m", "\x1b[0m", "\x1b[1m", "\x1b[31m"
BLOCK = '"""'
HISTORY_LENGTH = 1000


def add_command(commands: Any) -> None:
    chat = commands.add_parser("chat", help="chat with a model of a running server, in the terminal")
    chat.add_argument("model", nargs="?", help="model id (default: the server's first model)")
    chat.add_argument("--url", help="server URL (default: the configured host and port)")
    chat.add_argument("--api-key", help="API key (default: env SLUICEGATE_API_KEY or the config's)")
    chat.add_argument("--system", help="system prompt")
    chat.add_argument(
        "--config", help="TOML config file, for the default URL and key (env SLUICEGATE_CONFIG)"
    )
    chat.add_argument("--color", choices=["auto", "always", "never"], default="auto")


@dataclass
class Style:
    on: bool

    def __call__(self, code: str, text: str) -> str:
        return f"{code}{text}{RESET}" if self.on and text else text


@dataclass
class Session:
    client: httpx.Client
    model: str
    system: str | None
    out: TextIO
    style: Style
    messages: list[dict[str, Any]] = field(default_factory=list)

    def request_messages(self, text: str) -> list[dict[str, Any]]:
        system = [{"role": "system", "content": self.system}] if self.system else []
        return [*system, *self.messages, {"role": "user", "content": text}]

    def write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def ask(self, text: str) -> None:
        """Stream one answer; Ctrl-C ends it (the stream is closed, so the server cancels)."""
        import httpx

        answer: list[str] = []
        try:
            stopped, stats = self._stream(text, answer)
        except KeyboardInterrupt:
            stopped, stats = True, ""
        except httpx.HTTPError as exc:
            self.write(self.style(RED, f"\n[could not reach the server: {exc}]") + "\n")
            return
        if stopped:
            self.write(self.style(DIM, "\n[stopped]") + "\n")
        elif stats:
            self.write("\n" + self.style(DIM, stats) + "\n")
        if answer:  # also a partial one: the conversation is what was seen
            self.messages += [
                {"role": "user", "content": text},
                {"role": "assistant", "content": "".join(answer)},
            ]

    def _stream(self, text: str, answer: list[str]) -> tuple[bool, str]:
        body = {
            "model": self.model,
            "messages": self.request_messages(text),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        started = time.perf_counter()
        first: float | None = None
        deltas = 0
        usage: dict[str, Any] | None = None
        mode = ""  # "reasoning" or "content": what the last delta was, to separate them
        with self.client.stream("POST", "/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                response.read()
                self.write(self.style(RED, f"[{response.status_code}] {_error_message(response)}") + "\n")
                return False, ""
            for chunk in _sse_data(response.iter_lines()):
                if chunk.get("error"):
                    self.write(self.style(RED, f"\n[error] {chunk['error'].get('message', chunk)}") + "\n")
                    return False, ""
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") or {}
                    thought = delta.get("reasoning_content") or delta.get("reasoning")
                    pieces = [("reasoning", thought), ("content", delta.get("content"))]
                    pieces.append(("content", delta.get("refusal")))
                    for kind, piece in pieces:
                        if not piece:
                            continue
                        if mode == "reasoning" and kind == "content":
                            self.write("\n")
                        mode = kind
                        self.write(self.style(DIM, piece) if kind == "reasoning" else piece)
                        if kind == "content":
                            answer.append(piece)
                        deltas += 1
                        first = first or time.perf_counter()
                    for call in delta.get("tool_calls") or ():
                        function = call.get("function") or {}
                        if function.get("name"):
                            self.write(self.style(BOLD, f"\n[tool call] {function['name']}") + " ")
                        self.write(self.style(DIM, function.get("arguments") or ""))
                        first = first or time.perf_counter()
        return False, _stats(usage, deltas, started, first)


def _stats(usage: dict[str, Any] | None, deltas: int, started: float, first: float | None) -> str:
    end = time.perf_counter()
    out = int(usage["completion_tokens"]) if usage else deltas
    parts = [f"{usage['prompt_tokens']} in" if usage else "", f"{out} out"]
    if first is not None and end > first and out > 1:
        parts.append(f"{(out - 1) / (end - first):.1f} tokens/s")
    parts.append(f"{end - started:.2f} s")
    return " · ".join(p for p in parts if p)


def _sse_data(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The JSON of each `data:` line until `[DONE]` (Chat Completions frames are one line)."""
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        parsed = orjson.loads(data)
        if isinstance(parsed, dict):
            yield parsed


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text
    error = body.get("error") if isinstance(body, dict) else None
    return str(error.get("message")) if isinstance(error, dict) else response.text


def read_message(prompt: str, more: str) -> str:
    """One message: a line, lines joined by trailing backslashes, or a \"\"\" block."""
    line = input(prompt)
    if line.strip() == BLOCK:
        lines: list[str] = []
        while (line := input(more)).strip() != BLOCK:
            lines.append(line)
        return "\n".join(lines)
    lines = []
    while line.endswith("\\"):
        lines.append(line[:-1])
        line = input(more)
    lines.append(line)
    return "\n".join(lines)


@contextlib.contextmanager
def readline_history(path: Path) -> Iterator[None]:
    """Line editing and history (kept in `path` between sessions) where readline exists."""
    try:
        import readline
    except ImportError:  # e.g. Windows without pyreadline
        yield
        return
    with contextlib.suppress(OSError):
        readline.read_history_file(path)
    readline.set_history_length(HISTORY_LENGTH)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            readline.write_history_file(path)


def list_models(client: httpx.Client) -> list[str]:
    response = client.get("/v1/models")
    if response.status_code != 200:
        raise SystemExit(
            f"sluicegate chat: {response.status_code} from /v1/models: {_error_message(response)}"
        )
    return [m["id"] for m in response.json().get("data", [])]


def command(session: Session, line: str) -> None:
    name, _, arg = line.partition(" ")
    arg = arg.strip()
    if name == "/model":
        if not arg:
            session.write(f"model: {session.model}\n")
        else:
            session.model = arg
            session.write(session.style(DIM, f"now talking to {arg}") + "\n")
    elif name == "/models":
        session.write("\n".join(list_models(session.client)) + "\n")
    elif name == "/system":
        session.system = arg or None
        session.messages.clear()
        session.write(
            session.style(DIM, "system prompt set; new conversation" if arg else "no system prompt") + "\n"
        )
    elif name == "/reset":
        session.messages.clear()
        session.write(session.style(DIM, "new conversation") + "\n")
    elif name == "/help":
        session.write(HELP + "\n")
    else:
        session.write(f"unknown command {name}; /help lists them\n")


def run(args: argparse.Namespace, url: str, api_key: str | None, history: Path) -> int:
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    timeout = httpx.Timeout(30.0, read=None)  # an answer may take long between tokens (loads)
    color = args.color == "always" or (
        args.color == "auto" and sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    )
    with httpx.Client(base_url=url, headers=headers, timeout=timeout) as client:
        try:
            model = args.model or next(iter(list_models(client)), None)
        except httpx.HTTPError as exc:
            print(f"sluicegate chat: cannot reach {url}: {exc}", file=sys.stderr)
            return 1
        if model is None:
            print("sluicegate chat: the server has no models", file=sys.stderr)
            return 1
        session = Session(client, model, args.system, sys.stdout, Style(color))
        session.write(
            session.style(DIM, f"Chatting with {model} at {url}. /help for commands, Ctrl-D to quit.") + "\n"
        )
        with readline_history(history):
            while True:
                try:
                    text = read_message(f"{session.model}> ", "... ")
                except KeyboardInterrupt:
                    session.write("\n")
                    continue
                except EOFError:
                    session.write("\n")
                    return 0
                if not text.strip():
                    continue
                if text.startswith("/"):
                    command(session, text.strip())
                    continue
                session.ask(text)
