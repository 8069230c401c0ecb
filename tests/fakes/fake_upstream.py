"""A fake OpenAI-compatible upstream: a real HTTP/1.1 server on loopback, for the gateway tests.

It speaks streaming Chat Completions byte for byte as vLLM and llama-server do (compact JSON,
`data: ...\\n\\n` frames, chunked transfer encoding, `data: [DONE]`), and can be told, per
request, to misbehave in every way real upstreams do: the request's `model` names a `Scenario`
registered on the server (unknown names get a plain greeting), or a last user message
`@name` does. It records what it observed:
every request's body and headers, and when the client went away while it was still answering.

Written on raw asyncio streams (no framework) so it controls every byte: it can stall before
the status line, close without the chunked terminator, or answer 503 on the first try only.
It runs its own event loop in a thread, so sync tests and async tests use it alike.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import fake_audio

CREATED = 1_760_000_000


def chunk(
    delta: dict[str, Any] | None = None,
    *,
    finish_reason: str | None = None,
    usage: dict[str, Any] | None = None,
    logprobs: dict[str, Any] | None = None,
    choices: bool = True,
    model: str = "fake-model",
    extra: dict[str, Any] | None = None,
) -> bytes:
    """One `chat.completion.chunk` frame in vLLM's exact shape (compact JSON, null fields kept)."""
    body: dict[str, Any] = {
        "id": "chatcmpl-fake0123456789",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
        "choices": [{"index": 0, "delta": delta or {}, "logprobs": logprobs, "finish_reason": finish_reason}]
        if choices
        else [],
    }
    if usage is not None:
        body["usage"] = usage
    body.update(extra or {})
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def usage(
    prompt: int, completion: int, *, cached: int | None = None, reasoning: int | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
    }
    if cached is not None:
        body["prompt_tokens_details"] = {"cached_tokens": cached}
    if reasoning is not None:
        body["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return body


def text_stream(words: list[str], *, finish: str = "stop", use: dict[str, Any] | None = None) -> list[bytes]:
    """vLLM's shape: a role chunk with empty content, a chunk per word, the finish chunk, then
    (include_usage) a separate `choices: []` usage chunk."""
    frames = [chunk({"role": "assistant", "content": ""})]
    frames += [chunk({"content": w}) for w in words]
    frames.append(chunk(finish_reason=finish))
    frames.append(chunk(choices=False, usage=use or usage(10, len(words))))
    return frames


def completion_chunk(
    text: str = "",
    *,
    finish_reason: str | None = None,
    usage: dict[str, Any] | None = None,
    logprobs: dict[str, Any] | None = None,
    choices: bool = True,
    model: str = "fake-model",
) -> bytes:
    """One legacy `text_completion` chunk in vLLM's exact shape (`/v1/completions`)."""
    body: dict[str, Any] = {
        "id": "cmpl-fake0123456789",
        "object": "text_completion",
        "created": CREATED,
        "model": model,
        "choices": [
            {
                "index": 0,
                "text": text,
                "logprobs": logprobs,
                "finish_reason": finish_reason,
                "stop_reason": None,
            }
        ]
        if choices
        else [],
    }
    if usage is not None:
        body["usage"] = usage
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def completion_stream(body: Any, words: list[str]) -> list[bytes]:
    """vLLM's `/v1/completions` stream for `body`: the prompt first when `echo`, a chunk per
    word, the finish chunk (`length` when `max_tokens` cut it), then a `choices: []` usage chunk."""
    prompt = body.get("prompt")
    limit = body.get("max_tokens")
    finish = "stop"
    if isinstance(limit, int) and len(words) > limit:
        words, finish = words[:limit], "length"
    frames = [completion_chunk(prompt)] if body.get("echo") and isinstance(prompt, str) else []
    frames += [completion_chunk(w) for w in words]
    frames.append(completion_chunk(finish_reason=finish))
    prompt_tokens = len(prompt.split()) if isinstance(prompt, str) else len(prompt or [])
    frames.append(completion_chunk(choices=False, usage=usage(prompt_tokens, len(words))))
    return frames


@dataclass
class Scenario:
    """What to answer. Frames are sent as given; `None` in `frames` means "stall here forever"."""

    frames: list[bytes | None] = field(default_factory=list)
    status: int = 200
    body: bytes = b""  # for a non-2xx answer
    content_type: str = "application/json"
    headers_delay: float = 0.0  # before the status line
    body_delay: float = 0.0  # after the headers, before the first frame
    frame_delay: float = 0.0  # between frames
    done: bool = True  # end with `data: [DONE]`
    abrupt: bool = False  # close the socket without the chunked terminator
    fail_first: int = 0  # answer 503 to the first N requests, then this scenario
    split: bool = False  # send every frame in two TCP writes, split mid-line
    flood: int = 0  # first send this many one-token content frames, as fast as the client reads
    raw: bool = False  # write the frames as they are, no chunk framing (a broken chunked body)


def embeddings(body: Any) -> dict[str, Any]:
    """OpenAI's embeddings answer: for each input, a unit vector of 3 floats that depends on its
    length (float32 little-endian in base64 when asked, as OpenAI sends it)."""
    inputs = (
        body["input"]
        if isinstance(body["input"], list) and not isinstance(body["input"][0], int)
        else [body["input"]]
    )
    data = []
    for index, item in enumerate(inputs):
        vector = [0.6, 0.8, 0.0] if len(item) % 2 else [0.0, 0.6, 0.8]
        encoded: Any = vector
        if body.get("encoding_format") == "base64":
            encoded = base64.b64encode(struct.pack("<3f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    tokens = sum(len(item) for item in inputs)
    return {
        "object": "list",
        "data": data,
        "model": body["model"],
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def rerank(body: Any) -> dict[str, Any]:
    """llama-server's rerank answer: a document's score is its share of the query's words, best
    first, at most `top_n`."""
    words = set(body["query"].lower().split())
    scored = [
        {"index": i, "relevance_score": len(words & set(str(doc).lower().split())) / max(len(words), 1)}
        for i, doc in enumerate(body["documents"])
    ]
    scored.sort(key=lambda r: -r["relevance_score"])
    return {
        "model": body["model"],
        "object": "list",
        "results": scored[: body.get("top_n") or len(scored)],
        "usage": {"prompt_tokens": 10, "total_tokens": 10},
    }


def llama_slots(slots: int, busy: int, n_ctx: int = 4096) -> bytes:
    """llama-server's `GET /slots` (tools/server/README.md): one object per slot."""
    return json.dumps(
        [
            {
                "id": i,
                "id_task": 100 + i if i < busy else -1,
                "n_ctx": n_ctx,
                "speculative": False,
                "is_processing": i < busy,
                "params": {
                    "n_predict": -1,
                    "seed": 4294967295,
                    "temperature": 0.8,
                    "top_k": 40,
                    "top_p": 0.95,
                },
                "next_token": {
                    "has_next_token": i < busy,
                    "has_new_line": False,
                    "n_remain": -1,
                    "n_decoded": 0,
                },
            }
            for i in range(slots)
        ]
    ).encode()


def llama_metrics(processing: int, deferred: int) -> bytes:
    """llama-server's `GET /metrics` (with --metrics), as server-task.cpp writes it."""
    gauges = [
        ("prompt_tokens_total", "counter", "Number of prompt tokens processed.", 1234),
        ("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.", 512.5),
        ("requests_processing", "gauge", "Number of requests processing.", processing),
        ("requests_deferred", "gauge", "Number of requests deferred.", deferred),
        ("n_busy_slots_per_decode", "gauge", "Average number of busy slots per llama_decode() call.", 1.5),
    ]
    return "".join(
        f"# HELP llamacpp:{name} {text}\n# TYPE llamacpp:{name} {kind}\nllamacpp:{name} {value}\n"
        for name, kind, text, value in gauges
    ).encode()


def vllm_metrics(running: int, waiting: int, model: str = "fake-model") -> bytes:
    """vLLM's `GET /metrics` (prometheus_client's text format; gauges labelled by model)."""
    labels = f'engine="0",model_name="{model}"'
    return (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{{{labels}}} {float(running)}\n"
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting{{{labels}}} {float(waiting)}\n"
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f"vllm:kv_cache_usage_perc{{{labels}}} 0.25\n"
        "# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.\n"
        "# TYPE vllm:iteration_tokens_total histogram\n"
        f'vllm:iteration_tokens_total_bucket{{le="1.0",{labels}}} 3.0\n'
        f"vllm:iteration_tokens_total_sum{{{labels}}} 42.0\n"
        "# HELP python_gc_objects_collected_total Objects collected during gc\n"
        "# TYPE python_gc_objects_collected_total counter\n"
        'python_gc_objects_collected_total{generation="0"} 9001.0\n'
    ).encode()


@dataclass
class Observed:
    path: str
    method: str
    headers: dict[str, str]
    body: Any
    received_at: float
    answered_status: int | None = None
    disconnected_at: float | None = None  # the client left before we were done
    finished: bool = False
    frames_sent: int = 0  # frames written so far (and accepted by the socket: drain returned)


class FakeUpstream:
    # What differs in fake_anthropic.py's subclass: the API path, the stream's end marker, the
    # default answer and where a "@scenario" message is found.
    api_path = "/chat/completions"
    end_frame = DONE

    def __init__(self, *, name: str = "fake", port: int = 0) -> None:
        self.name = name
        self.scenarios: dict[str, Scenario] = {}
        self.models: list[str] = ["fake-model"]
        self.healthy = True  # False: GET /v1/models answers 503
        # GET pages at the server's root by path, e.g. llama-server's "/slots" and "/metrics"
        # (`llama_slots`, `llama_metrics`, `vllm_metrics` below): (status, body)
        self.pages: dict[str, tuple[int, bytes]] = {}
        self.requests: list[Observed] = []
        self.connections = 0  # TCP connections accepted (keep-alive reuse shows here)
        self._served: dict[str, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = port  # 0: any free port

    # --- lifecycle -----------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """What a client passes as its OpenAI base URL."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeUpstream:
        started = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._server = loop.run_until_complete(
                asyncio.start_server(self._connection, "127.0.0.1", self.port)
            )
            self.port = self._server.sockets[0].getsockname()[1]
            started.set()
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=run, name=f"fake-upstream-{self.name}", daemon=True)
        self._thread.start()
        started.wait(10)
        return self

    def stop(self) -> None:
        loop, server = self._loop, self._server
        if loop is None or server is None:
            return

        async def close() -> None:
            server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        assert self._thread is not None
        self._thread.join(5)

    def __enter__(self) -> FakeUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- observations --------------------------------------------------------------------

    def chat_requests(self, model: str | None = None) -> list[Observed]:
        return [
            r
            for r in self.requests
            if r.path.endswith(self.api_path) and (model is None or r.body.get("model") == model)
        ]

    def wait_for(self, check: Callable[[], Any], timeout: float = 10.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if result := check():
                return result
            time.sleep(0.01)
        raise AssertionError(f"fake upstream {self.name}: condition not met within {timeout}s")

    # --- HTTP ----------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while await self._one_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {
            k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if line)
        }
        raw = await reader.readexactly(int(headers.get("content-length", "0")))
        content_type = headers.get("content-type", "")
        if raw and content_type.startswith("multipart/form-data"):  # an audio upload
            body: Any = fake_audio.form_fields(raw, content_type)
        else:
            body = json.loads(raw) if raw else None
        observed = Observed(path, method, headers, body, time.monotonic())
        self.requests.append(observed)
        if method == "GET" and path in self.pages:
            status, page = self.pages[path]
            await self._plain(writer, observed, status, page)
            return True
        if method == "GET" and path.endswith("/models"):
            if self.healthy:
                listing = {
                    "object": "list",
                    "data": [{"id": m, "object": "model", "owned_by": "fake"} for m in self.models],
                }
                await self._plain(writer, observed, 200, json.dumps(listing).encode())
            else:
                await self._plain(writer, observed, 503, b'{"error":{"message":"warming up"}}')
            return True
        if method == "POST" and path.endswith("/embeddings"):
            scenario = self.scenarios.get(str(body.get("model")) if isinstance(body, dict) else "")
            if scenario is not None:  # a misbehaving embeddings answer: its frames are the body
                return await self._answer(reader, writer, observed, scenario)
            await self._plain(writer, observed, 200, json.dumps(embeddings(body)).encode())
            return True
        if method == "POST" and "/audio/" in path and isinstance(body, dict):
            await self._audio(writer, observed, path, body)
            return True
        if method == "POST" and path.endswith("/rerank"):
            await self._plain(writer, observed, 200, json.dumps(rerank(body)).encode())
            return True
        if method == "POST" and path.endswith("/v1/completions") and isinstance(body, dict):
            # Legacy completions: the model's scenario when there is one, else a fixed middle
            # for a `suffix` (fill-in-the-middle) and a fixed continuation otherwise.
            words = [" return", " a", " +", " b"] if "suffix" in body else [" upon", " a", " time"]
            found = self.scenarios.get(str(body.get("model")))
            return await self._answer(
                reader, writer, observed, found or Scenario(completion_stream(body, words))
            )
        if method != "POST" or not path.split("?")[0].endswith(self.api_path):
            await self._plain(writer, observed, 404, b'{"error":{"message":"no such route"}}')
            return True
        model = self.scenario_name(body)
        scenario = self.scenarios.get(model) or Scenario(frames=self.default_frames())
        count = self._served.get(model, 0)
        self._served[model] = count + 1
        if count < scenario.fail_first:
            await self._plain(writer, observed, 503, b'{"error":{"message":"overloaded, try again"}}')
            return True
        return await self._answer(reader, writer, observed, scenario)

    def scenario_name(self, body: Any) -> str:
        """The request's model, or "@name" at the start of the last message: that scenario."""
        model = body.get("model", "") if isinstance(body, dict) else ""
        last = (body.get("messages") or [{}])[-1].get("content") if isinstance(body, dict) else None
        if isinstance(last, list) and last and isinstance(last[-1], dict):
            last = last[-1].get("text")
        if isinstance(last, str) and last.startswith("@"):
            return last[1:].split()[0]
        return str(model)

    def default_frames(self) -> list[bytes | None]:
        return list(text_stream(["Hello", " from", f" {self.name}"]))

    async def _plain(
        self,
        writer: asyncio.StreamWriter,
        observed: Observed,
        status: int,
        body: bytes,
        content_type: str = "application/json",
    ) -> None:
        observed.answered_status = status
        writer.write(
            f"HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        observed.finished = True

    async def _answer(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        observed: Observed,
        scenario: Scenario,
    ) -> bool:
        # Watch for the client leaving while we answer (it sends nothing more on this connection).
        gone = asyncio.ensure_future(reader.read(1))
        try:
            if not await self._pause(gone, scenario.headers_delay, observed):
                return False
            if scenario.status != 200:
                await self._plain(writer, observed, scenario.status, scenario.body, scenario.content_type)
                return True
            observed.answered_status = 200
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
            )
            await writer.drain()
            if not await self._pause(gone, scenario.body_delay, observed):
                return False
            if scenario.flood:
                legacy = observed.path.endswith("/v1/completions")  # text chunks, not chat deltas
                token = completion_chunk(" tok") if legacy else chunk({"content": " tok"})
                frames_head = completion_chunk("") if legacy else chunk({"role": "assistant", "content": ""})
                writer.write(b"%x\r\n" % len(frames_head))
                writer.write(frames_head + b"\r\n")
                for _ in range(scenario.flood):
                    writer.write(b"%x\r\n" % len(token) + token + b"\r\n")
                    observed.frames_sent += 1
                    if writer.transport.get_write_buffer_size() > 65536:
                        await writer.drain()  # waits while the client reads nothing
                    if gone.done():
                        observed.disconnected_at = time.monotonic()
                        return False
            frames = list(scenario.frames) + ([self.end_frame] if scenario.done and self.end_frame else [])
            for i, frame in enumerate(frames):
                if i and not await self._pause(gone, scenario.frame_delay, observed):
                    return False
                if frame is None:  # stall until the client leaves
                    await self._pause(gone, 3600.0, observed)
                    return False
                parts = [frame[: len(frame) // 2], frame[len(frame) // 2 :]] if scenario.split else [frame]
                for part in parts:
                    writer.write(part if scenario.raw else f"{len(part):x}\r\n".encode() + part + b"\r\n")
                    await writer.drain()
                observed.frames_sent += 1
            if scenario.abrupt:
                observed.finished = True
                return False
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            observed.finished = True
            return True
        except ConnectionError:
            observed.disconnected_at = observed.disconnected_at or time.monotonic()
            return False
        finally:
            gone.cancel()
            await asyncio.gather(gone, return_exceptions=True)

    async def _audio(
        self, writer: asyncio.StreamWriter, observed: Observed, path: str, body: dict[str, Any]
    ) -> None:
        """OpenAI's audio endpoints (fake_audio.py); a model with a scenario answers its status."""
        scenario = self.scenarios.get(
            str((body.get("model") or [""])[0] if "file" in body else body.get("model"))
        )
        if scenario is not None and scenario.status != 200:
            await self._plain(writer, observed, scenario.status, scenario.body, scenario.content_type)
            return
        answer, content_type = (
            fake_audio.speech(body) if path.endswith("/speech") else fake_audio.transcription(body)
        )
        if isinstance(answer, bytes):
            await self._plain(writer, observed, 200, answer, content_type)
            return
        observed.answered_status = 200
        writer.write(
            f"HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n\r\n".encode()
        )
        for piece in answer:
            writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            await writer.drain()
            observed.frames_sent += 1
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        observed.finished = True

    @staticmethod
    async def _pause(gone: asyncio.Future[bytes], seconds: float, observed: Observed) -> bool:
        """Wait `seconds`; False (and the time noted) if the client left meanwhile."""
        if seconds <= 0 and not gone.done():
            return True
        done, _ = await asyncio.wait({gone}, timeout=seconds)
        if done:
            observed.disconnected_at = time.monotonic()
            return False
        return True


@contextlib.contextmanager
def fake_upstream(name: str = "fake") -> Iterator[FakeUpstream]:
    with FakeUpstream(name=name) as fake:
        yield fake


@contextlib.contextmanager
def running(*names: str) -> Iterator[list[FakeUpstream]]:
    """Fake upstreams by these names, started; stopped however the block ends."""
    upstreams: list[FakeUpstream] = []
    try:
        for name in names:
            upstreams.append(FakeUpstream(name=name).start())
        yield upstreams
    finally:
        for upstream in upstreams:
            upstream.stop()
