"""A server that serves chats from a local GGUF imports only what that takes.

Every import is memory the server holds while it serves (bench/README.md, "Memory, round
four"): numpy and llama-cpp-python's high-level `Llama` (engines/llamacpp/bindings.py), the
`gguf` package (gguf_types.py), jsonschema (a server tool's arguments) and cryptography (a
sealed item) wait until something needs them; the HTTP client (httpx2: an MCP server, an image
URL) too, and uvicorn's command line (click, the reload and workers supervisors with
multiprocessing and watchfiles) is never imported by one server process (app/uvicorn_package.py);
`websockets` comes with the first WebSocket (app/websocket_protocol.py); the upstream engines
with the first upstream model. The server runs with Python's import log
(`PYTHONPROFILEIMPORTTIME`), which names every module the moment it is imported.
"""

from __future__ import annotations

import re

import openai
import pytest
from e2e_support import Server

pytestmark = pytest.mark.e2e

MODEL = "lean"
# Packages (and llama_cpp's modules) a chat on a local GGUF must not import. Greedy sampling
# (temperature 0) does import numpy, on purpose: its argmax over the logits is ~25x cheaper per
# token than llama.cpp's greedy sampler (runtime.py, `argmax`).
NOT_NEEDED = (
    *("numpy", "gguf", "jsonschema", "cryptography", "diskcache", "sentencepiece", "yaml"),
    *("httpx2", "httpx", "click", "watchfiles", "multiprocessing", "websockets"),
)
NOT_NEEDED_MODULES = (
    *("llama_cpp.llama", "llama_cpp._internals", "llama_cpp.mtmd_cpp"),
    *("uvicorn.main", "uvicorn.supervisors"),
    *("sluicegate.engines.upstream.engine", "sluicegate.engines.upstream.anthropic_engine"),
)
_IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)\s*$", re.MULTILINE)


@pytest.fixture(scope="module")
def lean_server(start_server: object, tmp_path_factory: pytest.TempPathFactory) -> Server:
    from sluicegate.demo.model import make_demo_gguf

    gguf = str(make_demo_gguf(tmp_path_factory.mktemp("gguf") / "lean.gguf", ends_replies=False))
    models = [
        {
            "id": MODEL,
            "engine": "llamacpp",
            "path": gguf,
            "batch_size": 16,
            "context_length": 1024,
            "parallel": 2,
        },
        {
            "id": f"{MODEL}-single",
            "engine": "llamacpp",
            "path": gguf,
            "context_length": 1024,
            "batching": False,
        },
    ]
    server: Server = start_server(models=models, env={"PYTHONPROFILEIMPORTTIME": "1"})  # type: ignore[operator]
    return server


def imported(server: Server) -> set[str]:
    return set(_IMPORTED.findall(server.stderr_path.read_text(errors="replace")))


@pytest.mark.parametrize("model", [MODEL, f"{MODEL}-single"])
def test_a_chat_on_a_local_gguf_imports_none_of_the_heavy_packages(lean_server: Server, model: str) -> None:
    with openai.OpenAI(base_url=lean_server.api_url, api_key="unused", max_retries=0, timeout=60.0) as sdk:
        reply = sdk.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Hello there"}], max_tokens=6
        )
        assert reply.choices[0].message.content
        chunks = list(
            sdk.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": "And again, streamed"}],
                max_tokens=6,
                stream=True,
            )
        )
        assert any(chunk.choices and chunk.choices[0].delta.content for chunk in chunks)
    modules = imported(lean_server)
    # The log is the one the server wrote: the engine ran (and the bindings with it).
    assert {"sluicegate.engines.llamacpp.runtime", "llama_cpp.llama_cpp", "uvicorn.server"} <= modules
    heavy = sorted(m for m in modules if m.split(".")[0] in NOT_NEEDED or m in NOT_NEEDED_MODULES)
    assert heavy == []
