"""The frames corpus of the compiled hot path: every dialect's wire bytes for a set of upstream
streams, printed as JSON lines. `tests/unit/test_compiled.py` runs it twice, compiled and with
SLUICEGATE_PURE_PYTHON=1, and compares the two outputs byte for byte.

Each stream runs the gateway's path without the network: upstream body reads → `SSEReader` →
`ChunkDecoder` (with the output parser where the model writes markup) → the segmenter → the
accumulator and each dialect's encoder (the turn pipeline) → SSE or NDJSON framing. Ids and clocks are made
deterministic before Sluicegate loads, so one mode's two runs print the same bytes too.

    python tests/compiled_frames.py > frames.jsonl
    python tests/compiled_frames.py --blocks 10     # what ten passes leave allocated
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

# Before anything of Sluicegate loads: ids come from os.urandom, timestamps from time.
_bytes = itertools.count(1)
os.urandom = lambda n: next(_bytes).to_bytes(n, "big")
time.time = lambda: 1_764_000_000.0
time.time_ns = lambda: 1_764_000_000_000_000_000
time.perf_counter = lambda: 1000.0
time.perf_counter_ns = lambda: 1_000_000_000_000

from sluicegate.core.accumulate import Accumulator  # noqa: E402
from sluicegate.core.events import RawBatch, RawEvent  # noqa: E402
from sluicegate.core.frames import Frame  # noqa: E402
from sluicegate.dialects.anthropic.dialect import AnthropicDialect  # noqa: E402
from sluicegate.dialects.anthropic.signature import ThinkingSigner  # noqa: E402
from sluicegate.dialects.base import Dialect, EncoderContext  # noqa: E402
from sluicegate.dialects.chat_completions.dialect import ChatCompletionsDialect  # noqa: E402
from sluicegate.dialects.completions.dialect import CompletionsDialect  # noqa: E402
from sluicegate.dialects.lmstudio.dialect import LMStudioDialect  # noqa: E402
from sluicegate.dialects.ollama.dialect import OllamaChatDialect, OllamaGenerateDialect  # noqa: E402
from sluicegate.dialects.responses.dialect import ResponsesDialect  # noqa: E402
from sluicegate.engines.upstream.wire import ChunkDecoder, SSEReader  # noqa: E402
from sluicegate.parsing import (  # noqa: E402
    THINK,
    OutputParser,
    ToolCallFormat,
    new_parser,
)
from sluicegate.transport.ndjson import ndjson_bytes  # noqa: E402
from sluicegate.transport.sse import frames_bytes  # noqa: E402
from sluicegate.turn.pipeline import TurnPipeline  # noqa: E402


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    body = {
        "id": "chatcmpl-up",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "up",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, **extra}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}\n\n'
DONE = b"data: [DONE]\n\n"
WORDS = ["Hello", ",", " wörld", " — ", "\u2603", ' "quoted"', " \\ back", "\n", "end"]
LOGPROBS = {"content": [{"token": "a", "logprob": -0.5, "bytes": [97], "top_logprobs": []}]}

# Each stream: the upstream body, read by read (a read may hold several frames or split one).
STREAMS: dict[str, list[bytes]] = {
    "plain, one token a read": [
        chunk({"role": "assistant", "content": ""}),
        *(chunk({"content": w}) for w in WORDS),
        chunk({}, "stop"),
        USAGE,
        DONE,
    ],
    "plain, many tokens a read": [
        b"".join(chunk({"content": w}) for w in WORDS) + chunk({}, "stop") + USAGE + DONE,
    ],
    "frames split across reads, comments, CRLF": [
        b": keep-alive\r\n\r\n" + chunk({"content": "sp"})[:20],
        chunk({"content": "sp"})[20:] + chunk({"content": "lit"}).replace(b"\n", b"\r\n"),
        chunk({}, "length") + DONE,
    ],
    "reasoning then text": [
        chunk({"reasoning_content": "Let me think"}),
        chunk({"reasoning": " harder."}),
        chunk({"content": "Answer."}),
        chunk({}, "stop"),
        DONE,
    ],
    "tool calls by index, arguments streamed": [
        chunk({"content": "Calling."}),
        chunk(
            {"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "get"}}]}
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "put", "arguments": "{}"}}]}),
        chunk({}, "tool_calls"),
        USAGE,
        DONE,
    ],
    "refusal and logprobs": [
        chunk({"content": "a"}, logprobs=LOGPROBS),
        chunk({"refusal": "I can't."}),
        chunk({}, "stop"),
        DONE,
    ],
    "error frame mid-stream": [
        chunk({"content": "partial"}),
        b'data: {"error": {"message": "overloaded", "type": "server_error", "code": 503}}\n\n',
    ],
    "closed without finish": [chunk({"content": "cut"})],
}
# Streams whose text the output parser reads (the upstream's `think_tags`, a local model's markup).
PARSED: dict[str, tuple[Callable[[], OutputParser], list[bytes]]] = {
    "think tags": (
        lambda: OutputParser(reasoning=THINK),
        [chunk({"content": t}) for t in ["<thi", "nk>plan", "</think>", "Done."]] + [chunk({}, "stop"), DONE],
    ),
    "hermes tool call markup": (
        lambda: new_parser(ToolCallFormat("hermes")),
        [
            chunk({"content": t})
            for t in ["Sure. <tool_", 'call>{"name": "get", ', '"arguments": {"q": "x"}}</tool_call>']
        ]
        + [chunk({}, "stop"), DONE],
    ),
}


async def upstream(reads: list[bytes], parser: OutputParser | None) -> AsyncIterator[RawEvent]:
    """What the upstream engine's relay does per body read (`engines/upstream/base.py`)."""
    reader, decoder = SSEReader(), ChunkDecoder(parser)
    for data in reads:
        batch: list[RawEvent] = []
        for name, frame in reader.feed(data):
            batch.extend(decoder.frame(name, frame))
        if len(batch) > 1:
            yield RawBatch(batch)
        elif batch:
            yield batch[0]
        if decoder.over:
            return
    for name, frame in reader.close():
        for event in decoder.frame(name, frame):
            yield event
    for event in decoder.end():
        yield event


OLLAMA_CLOCK = re.compile(r'"created_at":"[0-9T:.-]+Z"')
REQUEST = [{"role": "user", "content": "hi"}]
DIALECTS: list[tuple[Dialect, dict[str, Any], Callable[[list[Frame]], bytes]]] = [
    (
        ChatCompletionsDialect(),
        {"model": "m", "messages": REQUEST, "stream": True, "stream_options": {"include_usage": True}},
        frames_bytes,
    ),
    (
        ChatCompletionsDialect(),
        {"model": "m", "messages": REQUEST, "stream": True, "logprobs": True},
        frames_bytes,
    ),
    (
        ResponsesDialect(lambda: [], sealer=None),
        {"model": "m", "input": "hi", "stream": True, "store": False},
        frames_bytes,
    ),
    (LMStudioDialect(), {"model": "m", "input": "hi", "stream": True}, frames_bytes),
    (
        AnthropicDialect(ThinkingSigner(b"k" * 32)),
        {"model": "m", "max_tokens": 64, "messages": REQUEST, "stream": True},
        frames_bytes,
    ),
    (CompletionsDialect(), {"model": "m", "prompt": "hi", "stream": True}, frames_bytes),
    (OllamaChatDialect(), {"model": "m", "messages": REQUEST}, ndjson_bytes),
    (OllamaGenerateDialect(), {"model": "m", "prompt": "hi"}, ndjson_bytes),
]


async def wire_bytes(
    dialect: Dialect,
    body: dict[str, Any],
    framing: Callable[[list[Frame]], bytes],
    reads: list[bytes],
    parser: OutputParser | None,
) -> bytes:
    turn = dialect.parse(body, {}, {})
    accumulator = Accumulator()
    context = EncoderContext("turn_1", 1_764_000_000, "inst_1", accumulator, lambda _: None, stored=False)
    pipeline = TurnPipeline(upstream(reads, parser), dialect.encoder(turn, context), accumulator)
    pipeline.open()
    # One write per list, as the transport does: the framing of each list is what goes out.
    return b"".join([framing(frame_list) async for frame_list in pipeline.frames()])


async def corpus() -> AsyncIterator[tuple[str, str, bytes]]:
    streams = [(name, reads, None) for name, reads in STREAMS.items()]
    streams += [(name, reads, make) for name, (make, reads) in PARSED.items()]
    for name, reads, make in streams:
        for dialect, body, framing in DIALECTS:
            wire = await wire_bytes(dialect, body, framing, reads, make() if make is not None else None)
            yield name, type(dialect).__name__, wire


async def main() -> None:
    async for name, dialect, wire in corpus():
        text = OLLAMA_CLOCK.sub('"created_at":"(now)"', wire.decode())  # a datetime, not `time`
        line = {"stream": name, "dialect": dialect, "wire": text}
        sys.stdout.write(json.dumps(line, ensure_ascii=False) + "\n")


async def blocks_kept(passes: int) -> None:
    """`--blocks N`: the memory blocks still allocated after N more passes over the corpus than
    after one, and the frames those passes wrote. A reference leaked per frame shows as
    thousands of blocks; nothing kept shows as a handful."""
    frames = 0
    async for _ in corpus():  # warm: caches, interned names, the loop's own state
        pass
    gc.collect()
    before = sys.getallocatedblocks()
    for _ in range(passes):
        async for *_, wire in corpus():
            frames += wire.count(b"\n")
    gc.collect()
    sys.stdout.write(json.dumps({"blocks": sys.getallocatedblocks() - before, "lines": frames}) + "\n")


if __name__ == "__main__":
    asyncio.run(blocks_kept(int(sys.argv[2])) if sys.argv[1:2] == ["--blocks"] else main())
    from sluicegate import _compiled

    # Which build ran, for the test to check: the mode, and each hot module's loader.
    sys.stderr.write(json.dumps({"mode": _compiled.mode, "loaded": _compiled.loaded()}) + "\n")
