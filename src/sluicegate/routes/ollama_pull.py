"""`POST /api/pull`: Ollama's pull, backed by the Hugging Face downloader.

Names are Ollama's for the Hub: `hf.co/owner/repo` or `hf.co/owner/repo:QUANT` (the tag picks
the GGUF by its quantization). The stream is Ollama's: `pulling manifest`, then `pulling
<digest>` lines with `digest`, `total` and `completed` while bytes arrive, then `verifying
sha256 digest`, `writing manifest` and `{"status":"success"}`; a failure is one `{"error": …}`
line. With `"stream": false` the answer is `{"status":"success"}` once the file is here.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from sluicegate.core.errors import invalid
from sluicegate.core.validation import Fields
from sluicegate.dialects.ollama.names import hf_ref
from sluicegate.engines.downloads import DownloadError, DownloadJob, Target
from sluicegate.routes.common import JSONResponse, app_state, read_json
from sluicegate.routes.ollama_models import endpoint
from sluicegate.transport.ndjson import NDJSON
from sluicegate.transport.stream import body_writer, server_send, stream_chunks

POLL_SECONDS = 0.25  # how often a pull reports its progress
Json = dict[str, Any]


def _line(body: Json) -> bytes:
    return orjson.dumps(body) + b"\n"


def _digest(target: Target) -> str:
    return (
        "sha256:"
        + hashlib.sha256(f"{target.repo_id}/{target.filename}@{target.revision}".encode()).hexdigest()
    )


class NDJSONLines(Response):
    """A streamed NDJSON answer from lines already framed, through the NDJSON transport."""

    def __init__(self, lines: AsyncIterator[bytes]) -> None:
        super().__init__(media_type="application/x-ndjson")
        self.lines = lines

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await stream_chunks(
            self.lines,
            send,
            receive,
            framing=NDJSON,
            body_send=server_send(scope, send),
            writer=body_writer(scope),
        )


async def _progress(started: DownloadJob | Target) -> AsyncIterator[bytes]:
    yield _line({"status": "pulling manifest"})
    if isinstance(started, DownloadJob):
        job = started
        while True:
            if job.target is not None:
                yield _line(
                    {
                        "status": f"pulling {_digest(job.target)[7:19]}",
                        "digest": _digest(job.target),
                        "total": job.total_bytes or 0,
                        "completed": job.downloaded_bytes,
                    }
                )
            if job.status != "downloading":
                break
            await asyncio.sleep(POLL_SECONDS)
        if job.status == "failed":
            yield _line({"error": job.error or "the download failed"})
            return
        await asyncio.sleep(0)  # the downloaded file is served from the next loop turn on
    yield _line({"status": "verifying sha256 digest"})
    yield _line({"status": "writing manifest"})
    yield _line({"status": "success"})


@endpoint
async def pull(request: Request) -> Response:
    state = app_state(request)
    f = Fields(await read_json(request, state.settings.max_body_bytes))
    name = f.string("model") or f.string("name")
    if not name:
        f.fail("model", "model is required")
    f.boolean("insecure")
    stream = f.boolean("stream") is not False
    ref = hf_ref(name)
    if ref is None:
        raise invalid(
            f"pull model manifest: '{name}' is not a Hugging Face model; "
            "pull GGUF models as hf.co/OWNER/REPO or hf.co/OWNER/REPO:QUANT",
            "model",
        )
    try:
        started = await state.downloads.start(*ref)
    except DownloadError as exc:
        raise invalid(str(exc), "model") from exc
    if stream:
        return NDJSONLines(_progress(started))
    async for line in _progress(started):
        body = orjson.loads(line)
        if "error" in body:
            raise invalid(body["error"], "model")  # the Hub refused or is unreachable: not our fault
    return JSONResponse({"status": "success"})
