"""Newline-delimited JSON (`application/x-ndjson`), Ollama's stream: one JSON object a line.

Frames are written as their data and a newline; there are no event names (a frame with one
is an encoder's bug, not something to frame) and no end sentinel (`[DONE]` is never written:
an NDJSON stream ends when the last object, `"done": true`, has been sent and the body closes).

No heartbeat: Ollama sends nothing while a stream is quiet (a model loading, a long prompt),
and its clients read line by line with no keep-alive of their own — any extra line, even an
empty one, would be a line they try to parse. So an idle NDJSON stream is kept honest by the
same deadlines every stream has (the request timeout and the idle timeout end it with an
error line) and by disconnect → cancel, not by bytes on the wire. The write path, backpressure and
disconnect handling are every streaming transport's (`transport/stream.py`).
"""

from __future__ import annotations

from typing import Final

from sluicegate.core.frames import DONE, Frame
from sluicegate.transport.stream import Framing, raw_headers

NDJSON_TYPE: Final = "application/x-ndjson"
_BASE_RAW: Final = raw_headers(
    {"content-type": NDJSON_TYPE, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
)


def ndjson_bytes(frames: list[Frame]) -> bytes:
    """The lines of frames that are ready together (`frame.data` is one line: orjson output is)."""
    if len(frames) == 1 and frames[0] is not DONE:
        return frames[0].data + b"\n"
    return b"".join(frame.data + b"\n" for frame in frames if frame is not DONE)


NDJSON: Final = Framing(ndjson_bytes, _BASE_RAW)  # no heartbeat: see above
