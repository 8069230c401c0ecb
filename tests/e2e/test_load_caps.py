"""The caps an operator sets on loading (issue 14), with real llama.cpp models: the memory cap
(`max_loaded_model_bytes`, from GGUF file sizes) evicts idle just-in-time loads first and
otherwise refuses in the dialect's error shape; `max_instances` caps the models API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import StartServer
from e2e_support import Server

pytestmark = pytest.mark.e2e


def loaded(server: Server) -> dict[str, int]:
    models = httpx.get(server.base_url + "/api/v1/models", timeout=10).json()["models"]
    return {m["key"]: len(m["loaded_instances"]) for m in models}


def chat(server: Server, model: str) -> httpx.Response:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    return httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=60)


def test_memory_cap_evicts_idle_jit_loads_then_refuses(
    start_server: StartServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from sluicegate.demo.model import make_demo_gguf

    gguf = make_demo_gguf(tmp_path_factory.mktemp("caps") / "tiny.gguf")
    size = Path(gguf).stat().st_size
    common = {"engine": "llamacpp", "path": str(gguf), "context_length": 256}
    server = start_server(
        {"max_loaded_model_bytes": size + size // 2, "max_instances": 2},  # room for one model
        [{"id": "a", **common}, {"id": "b", **common}],
    )
    assert chat(server, "a").status_code == 200
    assert loaded(server) == {"a": 1, "b": 0}
    assert chat(server, "b").status_code == 200  # `a` was idle and JIT-loaded: unloaded for `b`
    assert loaded(server) == {"a": 0, "b": 1}

    load = httpx.post(server.base_url + "/api/v1/models/load", json={"model": "a"}, timeout=60)
    assert load.status_code == 200, load.text  # an explicit load makes room the same way
    assert loaded(server) == {"a": 1, "b": 0}

    refused = chat(server, "b")  # `a` was loaded explicitly: never evicted
    assert refused.status_code == 503, refused.text
    error = refused.json()["error"]
    assert error["code"] == "max_loaded_model_bytes_reached" and "max_loaded_model_bytes" in error["message"]

    again = httpx.post(server.base_url + "/api/v1/models/load", json={"model": "a"}, timeout=60)
    assert again.status_code == 503, again.text  # a second instance of `a` does not fit either
    assert set(again.json()["error"]) >= {"type", "message"}  # LM Studio's error shape
    assert loaded(server) == {"a": 1, "b": 0}
    assert "Traceback" not in server.output()
