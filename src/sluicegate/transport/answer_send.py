"""The ASGI `send` a turn answers through: it remembers whether the response started, and with
which status (the runner's error paths read both: a stream that started has ended itself).

Compiled (`_compiled.py`): a stream's head is awaited through it from compiled code (the stream
transport's `_Stream.run`) into compiled code (the observer's `send`); as the runner's
interpreted `_Send` it was an interpreted coroutine's frame between two compiled ones, once a
response (bench/README.md gateway, "Round fourteen ... the response head").
"""

from __future__ import annotations

from typing import Any

from starlette.types import Send


class AnswerSend:
    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False
        self.status = 0

    async def __call__(self, message: Any) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            self.status = message["status"]
        await self._send(message)
