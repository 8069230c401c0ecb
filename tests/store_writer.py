"""Writes to a store as fast as it can and says which writes returned; the test kills it (-9).

    python store_writer.py sqlite <path> | redis <url> <prefix>

Prints `run` once a run was created, then `put <n>` after each put and `events <n>` after each
append returned, flushed line by line: whatever it printed, the reopened store must have.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from sluicegate.store.base import Store, StoredResponse

SCOPE = "4b1d"


def deterministic(n: int) -> StoredResponse:
    text = f"answer {n} " * (n % 7 + 1)
    output = [
        {
            "type": "message",
            "id": f"msg_{n}",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text}],
        }
    ]
    return StoredResponse(
        id=f"resp_{n}",
        response={"id": f"resp_{n}", "object": "response", "status": "completed", "output": output},
        input_items=[{"type": "message", "id": f"in_{n}", "role": "user", "content": []}],
        conversation=output,
        created_at=1000.0 + n,
        expires_at=4e9,
    )


def frame(seq: int) -> bytes:
    return b'event: response.output_text.delta\ndata: {"sequence_number":%d,"delta":"x"}\n\n' % seq


async def main(kind: str, target: str, prefix: str = "") -> None:
    store: Store
    if kind == "sqlite":
        from sluicegate.store.sqlite import SQLiteStore

        store = SQLiteStore(Path(target))
    else:
        from sluicegate.store.redis import RedisStore

        store = RedisStore(target, prefix=prefix, lease_seconds=0.5, renew_seconds=0.1)
        await store.start()
    run = StoredResponse(
        "resp_run", {"id": "resp_run", "status": "in_progress", "output": []}, [], [], 1.0, 4e9
    )
    await store.create_run(run, scope=SCOPE)
    print("run", flush=True)
    seq = 0
    for n in range(100000):
        await store.put(deterministic(n), scope=SCOPE)
        print(f"put {n}", flush=True)
        await store.append_events("resp_run", seq, [frame(seq + i) for i in range(3)], scope=SCOPE)
        seq += 3
        print(f"events {seq}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
