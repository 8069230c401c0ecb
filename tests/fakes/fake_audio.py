"""OpenAI's audio endpoints as a fake upstream answers them, in the real wire format: a
transcription form (multipart) gets `{"text": ...}`, plain text or `transcript.text.*` events; a
speech request gets audio bytes (sent in pieces) or `speech.audio.*` events (issue 45)."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

TRANSCRIPT = "Hello from the fake upstream."
AUDIO_PIECES = [b"ID3\x04fake-mp3-", b"second-piece-", b"third-piece"]


def form_fields(raw: bytes, content_type: str) -> dict[str, Any]:
    """A multipart form's fields (the file as {"filename", "size"}), for the tests to look at."""
    boundary = content_type.split("boundary=", 1)[1].strip('"').encode()
    fields: dict[str, Any] = {}
    for part in raw.split(b"--" + boundary)[1:-1]:
        head, _, value = part.strip(b"\r\n").partition(b"\r\n\r\n")
        name = re.search(rb'name="([^"]*)"', head)
        filename = re.search(rb'filename="([^"]*)"', head)
        if name is None:
            continue
        if filename is not None:
            fields[name[1].decode()] = {"filename": filename[1].decode(), "size": len(value)}
        else:
            fields.setdefault(name[1].decode(), []).append(value.decode())
    return fields


def _sse(event: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(event).encode() + b"\n\n"


def transcription(fields: dict[str, Any]) -> tuple[bytes | list[bytes], str]:
    """(the body, or the frames of a stream; its content type)."""
    if fields.get("stream") == ["true"]:
        frames = [
            _sse({"type": "transcript.text.delta", "delta": w})
            for w in ("Hello", " from", " the fake upstream.")
        ]
        usage = {"type": "tokens", "input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
        frames.append(_sse({"type": "transcript.text.done", "text": TRANSCRIPT, "usage": usage}))
        return frames, "text/event-stream"
    fmt = (fields.get("response_format") or ["json"])[0]
    if fmt == "text":
        return TRANSCRIPT.encode() + b"\n", "text/plain"
    return json.dumps(
        {"text": TRANSCRIPT, "usage": {"type": "duration", "seconds": 2}}
    ).encode(), "application/json"


def speech(body: dict[str, Any]) -> tuple[list[bytes], str]:
    if body.get("stream_format") == "sse":
        frames = [
            _sse({"type": "speech.audio.delta", "audio": base64.b64encode(p).decode()}) for p in AUDIO_PIECES
        ]
        usage = {"input_tokens": 3, "output_tokens": 7, "total_tokens": 10}
        return [*frames, _sse({"type": "speech.audio.done", "usage": usage})], "text/event-stream"
    return list(AUDIO_PIECES), "audio/mpeg"
