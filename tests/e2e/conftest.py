"""Fixtures that start real `sluicegate serve` processes for the end-to-end tests.

`server` is one process shared by the whole session (ordinary settings, several scripted models);
tests that need special [server] settings start their own with `start_server`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
from e2e_support import Server, run_server, scripted, write_config

StartServer = Callable[..., Server]

COMMON_MODELS = [
    scripted("chat", "chat.yaml"),
    scripted("slow", "slow.yaml"),
    # One model per cancellation test, so their metrics never mix.
    scripted("cancel-raw", "slow.yaml"),
    scripted("cancel-sdk", "slow.yaml"),
    scripted("cancel-nonstream", "slow.yaml"),
    # The same pace, as a clock: "nothing more happened while it produced N deltas".
    scripted("pace", "slow.yaml"),
    # One generation at a time and no queue: a second concurrent request gets 503.
    {**scripted("single", "slow.yaml"), "max_concurrency": 1, "max_queue": 0},
]


@pytest.fixture(scope="session")
def start_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartServer]:
    """Start a server with these [server] settings and models; stopped at the end of the session."""
    with contextlib.ExitStack() as stack:

        def start(
            server: dict[str, Any] | None = None,
            models: list[dict[str, Any]] | None = None,
            tables: dict[str, dict[str, Any]] | None = None,
            env: dict[str, str] | None = None,
        ) -> Server:
            folder = tmp_path_factory.mktemp("server")
            config = write_config(
                folder, server or {}, models if models is not None else COMMON_MODELS, tables
            )
            return stack.enter_context(run_server(folder, config, env=env))

        yield start


@pytest.fixture(scope="session")
def server(start_server: StartServer) -> Server:
    return start_server()


@pytest.fixture
def client(server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0, timeout=30.0) as sdk:
        yield sdk


@pytest.fixture(scope="session")
def tiny_server(start_server: StartServer, tmp_path_factory: pytest.TempPathFactory) -> Server:
    """One llama.cpp model alone on its server, `tiny`: the demo GGUF, whose replies run to
    `max_tokens` (end of turn never sampled), for the tests of what sampling makes of it."""
    from sluicegate.demo.model import make_demo_gguf

    gguf = str(make_demo_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", ends_replies=False))
    return start_server(
        models=[{"id": "tiny", "engine": "llamacpp", "path": gguf, "batch_size": 16, "context_length": 1024}]
    )


@pytest.fixture
def tiny_sdk(tiny_server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=tiny_server.api_url, api_key="unused", max_retries=0, timeout=120.0) as sdk:
        yield sdk


@pytest.fixture(scope="session")
def llama_server(start_server: StartServer, tmp_path_factory: pytest.TempPathFactory) -> Server:
    """One server with llama.cpp models, all from ONE tiny random-weight GGUF built here.

    End-of-turn is never sampled (`ends_replies=False`), so every reply runs to `max_tokens`;
    `batch_size` is small so an ordinary prompt takes several batches. One model per test that
    reads a metric, so their numbers never mix.
    """
    from sluicegate.demo.model import make_demo_gguf

    folder = tmp_path_factory.mktemp("gguf")
    gguf = str(make_demo_gguf(folder / "tiny.gguf", ends_replies=False))
    # Its prompt opens <think>, and the model closes it after a few dozen tokens.
    thinking = str(make_demo_gguf(folder / "think.gguf", ends_replies=False, thinks=True))
    embedder = str(make_demo_gguf(folder / "embed.gguf", embedding=True))
    common = {"engine": "llamacpp", "path": gguf, "batch_size": 16, "context_length": 2048}
    return start_server(
        models=[
            {"id": "tiny", **common},
            {"id": "tiny-cancel", **common},
            {"id": "tiny-lms", **common},
            {"id": "tiny-parallel", **common, "parallel": 2, "batching": False},  # two instances
            {"id": "tiny-ctx", **common},
            {"id": "tiny-think", **common, "path": thinking},
            # A short context for the overflow tests: refused by default, trimmed when asked.
            {"id": "tiny-short", **common, "context_length": 256},
            {"id": "tiny-window", **common, "context_length": 256, "context_overflow": "rolling_window"},
            {"id": "tiny-embed", "engine": "llamacpp", "path": embedder},  # mean pooling, from its GGUF
        ]
    )
