"""Benchmark: bytes stored per background response, the previous store against this one.

Run from the repository root (venv active): `python bench/store_size.py`

One background response of --tokens text deltas is encoded by the real Responses encoder,
with a request carrying --tools function tools (JSON schemas of ~400 bytes each) and ~2 KB
of instructions, as agent frameworks send. --responses such responses are stored in a fresh
SQLite file by:

  before   the store as it was before issue 13 (git revision BEFORE): the whole log as one JSON
           list of frame strings, each created/queued/in_progress/completed frame repeating
           the response object with every tool and the instructions
  after    this store: the run created at acceptance, its frames appended in batches of 64
           (what RunLog writes), request-derived fragments stored once per run, each batch
           zlib-compressed

It prints, per response: the event-log bytes (the frames column) and the database file
size after a WAL checkpoint (pages, indexes and all), and the after/before ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

from sluicegate.core.accumulate import Accumulator
from sluicegate.core.events import (
    Finished,
    FinishReason,
    Item,
    ItemAdded,
    ItemDelta,
    ItemDone,
    ItemKind,
    Usage,
    UsageReport,
)
from sluicegate.dialects.responses.encoder import ResponsesEncoder, ResponseState
from sluicegate.dialects.responses.request import parse_responses_request
from sluicegate.store.base import StoredResponse
from sluicegate.store.runlog import RunLog
from sluicegate.store.sqlite import SQLiteStore

BEFORE = "702a9ac"  # main just before issue 13
Json = dict[str, Any]


def tool(i: int) -> Json:
    properties = {
        f"arg_{j}": {"type": "string", "description": f"argument {j} of tool {i}"} for j in range(6)
    }
    return {
        "type": "function",
        "name": f"tool_{i}",
        "description": f"Tool number {i}: does one thing well.",
        "parameters": {"type": "object", "properties": properties, "required": ["arg_0"]},
    }


def background_response(
    response_id: str, tokens: int, tools: int
) -> tuple[StoredResponse, list[bytes], Json]:
    body = {
        "model": "m",
        "input": "Write a long answer.",
        "background": True,
        "instructions": "You are a careful assistant. " * 70,
        "tools": [tool(i) for i in range(tools)],
    }
    request = parse_responses_request(body)
    accumulator = Accumulator()
    encoder = ResponsesEncoder(ResponseState(response_id, request), accumulator)
    frames = encoder.opening(queued=True)
    accepted = encoder.snapshot()
    frames += encoder.in_progress()
    item = Item(index=0, kind=ItemKind.MESSAGE, id="msg_" + response_id[5:])
    events: list[Any] = [ItemAdded(item)]
    for n in range(tokens):
        events.append(ItemDelta(item, f" word{n % 97}"))
    events += [
        ItemDone(item),
        UsageReport(Usage(prompt_tokens=50, completion_tokens=tokens)),
        Finished(FinishReason.STOP),
    ]
    for event in events:
        if isinstance(event, ItemDelta):
            item.parts.append(event.text)
        if isinstance(event, ItemDone):
            item.text, item.parts, item.done = "".join(item.parts), [], True
        accumulator.feed(event)
        frames += encoder.encode(event)
    final = encoder.final or encoder.snapshot()
    inputs = [
        {"type": "message", "id": "msg_in", "role": "user", "content": [{"type": "input_text", "text": "x"}]}
    ]
    now = time.time()
    record = StoredResponse(response_id, final, inputs, [*inputs, *final["output"]], now, now + 3600)
    return record, frames, accepted


def old_store_module() -> ModuleType:
    source = subprocess.run(
        ["git", "show", f"{BEFORE}:src/sluicegate/store/sqlite.py"],
        capture_output=True,
        check=True,
        text=True,
    ).stdout.replace("class SQLiteStore(Store):", "class SQLiteStore:")  # not today's interface
    spec = importlib.util.spec_from_loader("old_sqlite_store", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, "old_sqlite_store", "exec"), module.__dict__)
    return module


def file_bytes(path: Path) -> int:
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return path.stat().st_size + sum(p.stat().st_size for p in path.parent.glob(path.name + "-*"))


async def measure(tokens: int, tools: int, responses: int, workdir: Path) -> dict[str, tuple[int, int]]:
    runs = [background_response(f"resp_{n:048x}", tokens, tools) for n in range(responses)]

    old = old_store_module().SQLiteStore(workdir / "before.sqlite3")
    for record, frames, _ in runs:
        await old.put(replace(record, events=frames))
    await old.aclose()
    before_log = sqlite3.connect(workdir / "before.sqlite3").execute(
        "SELECT sum(length(events)) FROM responses"
    )
    before = (before_log.fetchone()[0], file_bytes(workdir / "before.sqlite3"))

    new = SQLiteStore(workdir / "after.sqlite3")
    for record, frames, accepted in runs:
        await new.create_run(
            StoredResponse(record.id, accepted, record.input_items, [], record.created_at, record.expires_at)
        )
        log = RunLog(new, record.id, batch_frames=64)
        await log.extend(frames[:-1])
        await log.finish(frames[-1:], record)
    await new.aclose()
    after_log = sqlite3.connect(workdir / "after.sqlite3").execute(
        "SELECT sum(length(frames)) FROM run_events"
    )
    after = (after_log.fetchone()[0], file_bytes(workdir / "after.sqlite3"))
    raw = sum(len(f) for _, frames, _ in runs for f in frames)
    return {"raw frames": (raw, 0), "before": before, "after": after}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--tools", type=int, default=10)
    parser.add_argument("--responses", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = asyncio.run(measure(args.tokens, args.tools, args.responses, Path(tmp)))
    n = args.responses
    print(f"{args.tokens}-token background responses, {args.tools} tools, {n} responses; bytes per response:")
    raw = result["raw frames"][0] / n
    print(f"  frames as streamed       {raw:>12,.0f}")
    (b_log, b_file), (a_log, a_file) = result["before"], result["after"]
    print(f"  before: event log        {b_log / n:>12,.0f}   database file {b_file / n:>12,.0f}")
    print(f"  after:  event log        {a_log / n:>12,.0f}   database file {a_file / n:>12,.0f}")
    print(f"  after/before             {a_log / b_log:>12.3f}                 {a_file / b_file:>12.3f}")


if __name__ == "__main__":
    sys.exit(main())
