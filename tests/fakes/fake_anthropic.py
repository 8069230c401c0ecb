"""A fake Anthropic Messages upstream: the same loopback HTTP server as fake_upstream.py,
speaking streamed Messages byte for byte as Anthropic's API does (`event:` and `data:` lines,
`message_start` … `message_stop`, `ping`, `error` events). Scenarios work the same way: the
request's `model`, or a last user message starting with `@name`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fake_upstream import FakeUpstream, Scenario

__all__ = ["FakeAnthropic", "Scenario", "event", "fake_anthropic", "message", "overloaded"]


def event(name: str, body: dict[str, Any]) -> bytes:
    return (
        f"event: {name}\ndata: ".encode()
        + json.dumps({"type": name, **body}, separators=(",", ":")).encode()
        + b"\n\n"
    )


def message(
    blocks: list[dict[str, Any]],
    *,
    stop_reason: str = "end_turn",
    input_tokens: int = 10,
    output_tokens: int | None = None,
    cache_read: int = 0,
    cache_creation: int = 0,
    model: str = "claude-fake",
) -> list[bytes | None]:
    """A whole streamed message. `blocks` are content blocks as the non-streaming API has them:
    text and thinking stream one word per delta, tool_use inputs in two JSON pieces."""
    start_usage = {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": cache_creation,
        "cache_read_input_tokens": cache_read,
        "output_tokens": 1,
    }
    frames: list[bytes | None] = [
        event(
            "message_start",
            {
                "message": {
                    "id": "msg_fake0123",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": start_usage,
                }
            },
        ),
        event("ping", {}),
    ]
    words = 0
    for index, block in enumerate(blocks):
        kind = block["type"]
        if kind == "text":
            frames.append(
                event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
            )
            for word in _words(block["text"]):
                words += 1
                frames.append(_delta(index, {"type": "text_delta", "text": word}))
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            frames.append(event("content_block_start", {"index": index, "content_block": start}))
            for word in _words(block["thinking"]):
                words += 1
                frames.append(_delta(index, {"type": "thinking_delta", "thinking": word}))
            frames.append(_delta(index, {"type": "signature_delta", "signature": block["signature"]}))
        elif kind == "tool_use":
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            frames.append(event("content_block_start", {"index": index, "content_block": start}))
            text = json.dumps(block["input"])
            for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
                words += 1
                frames.append(_delta(index, {"type": "input_json_delta", "partial_json": piece}))
        frames.append(event("content_block_stop", {"index": index}))
    usage = {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": cache_creation,
        "cache_read_input_tokens": cache_read,
        "output_tokens": words if output_tokens is None else output_tokens,
    }
    frames.append(
        event("message_delta", {"delta": {"stop_reason": stop_reason, "stop_sequence": None}, "usage": usage})
    )
    frames.append(event("message_stop", {}))
    return frames


def overloaded() -> bytes:
    return event("error", {"error": {"type": "overloaded_error", "message": "Overloaded"}})


def _delta(index: int, delta: dict[str, Any]) -> bytes:
    return event("content_block_delta", {"index": index, "delta": delta})


def _words(text: str) -> list[str]:
    out: list[str] = []
    for i, word in enumerate(text.split(" ")):
        out.append(word if i == 0 else " " + word)
    return out


class FakeAnthropic(FakeUpstream):
    api_path = "/messages"
    end_frame = b""  # Anthropic streams end with message_stop, no sentinel

    def default_frames(self) -> list[bytes | None]:
        return message([{"type": "text", "text": f"Hello from {self.name}"}])


@contextmanager
def fake_anthropic(name: str = "fake-anthropic") -> Iterator[FakeAnthropic]:
    with FakeAnthropic(name=name) as fake:
        yield fake
