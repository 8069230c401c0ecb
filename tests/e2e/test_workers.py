"""`[server] workers = 2`: two server processes on one port, replicas sharing one real Redis.

Streams through either worker are whole, a response stored by one is read back through fresh
connections (whichever worker takes them), `/metrics` adds up both workers' counts, a worker
killed with SIGKILL is replaced, and the configurations where workers could not be replicas
(a SQLite store, a model that loads its weights in-process) are refused at startup.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest
from e2e_support import DEFAULT_REPLY, Server, run_server, scripted, write_config

from redis_support import RedisServer, redis_server

pytestmark = pytest.mark.e2e

WORKERS = 2
WAIT = 60.0  # seconds: a bound on waiting for workers to start, never a performance threshold


def worker_pids(server: Server) -> list[int]:
    """The supervisor's children that run a server (not multiprocessing's resource tracker)."""
    children = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children").read_text().split()
    pids = []
    for pid in map(int, children):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except FileNotFoundError:
            continue
        if b"spawn_main" in command and b"resource_tracker" not in command:
            pids.append(pid)
    return pids


def wait_for_workers(server: Server, started: int) -> list[int]:
    """Until `started` workers have completed startup (counted in the log) and WORKERS run."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        log = server.stderr_path.read_text(errors="replace")
        pids = worker_pids(server)
        if log.count("Application startup complete") >= started and len(pids) == WORKERS:
            return pids
        time.sleep(0.1)
    raise AssertionError(f"workers did not start: {worker_pids(server)}\n{server.output()}")


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="module")
def workers(redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("workers")
    config = write_config(
        folder,
        {"data_dir": str(folder / "data"), "workers": WORKERS},
        [scripted("chat", "chat.yaml")],
        {"store": {"backend": "redis", "url": redis.url}},
    )
    with run_server(folder, config) as server:
        wait_for_workers(server, WORKERS)
        yield server


def fresh_client(server: Server) -> openai.OpenAI:
    """A client of its own: a new connection, which either worker may accept."""
    return openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0, timeout=30.0)


def chat_stream(server: Server) -> str:
    with (
        fresh_client(server) as client,
        client.chat.completions.stream(model="chat", messages=[{"role": "user", "content": "hi"}]) as stream,
    ):
        for _ in stream:
            pass
        completion = stream.get_final_completion()
    assert completion.choices[0].finish_reason == "stop"
    return completion.choices[0].message.content or ""


def requests_counted(server: Server) -> float:
    text = httpx.get(server.base_url + "/metrics", timeout=10).text
    pattern = r'^sluicegate_requests_total\{dialect="chat_completions",status="200"\} (\S+)$'
    return sum(float(value) for value in re.findall(pattern, text, re.MULTILINE))


def test_streams_through_either_worker_are_whole_and_metrics_add_up(workers: Server) -> None:
    before = requests_counted(workers)
    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda _: chat_stream(workers), range(40)))
    assert replies == [DEFAULT_REPLY] * 40
    # A request is counted once its handler returns, just after its last byte went out.
    deadline = time.monotonic() + WAIT
    while requests_counted(workers) - before < 40 and time.monotonic() < deadline:
        time.sleep(0.05)
    # Every worker keeps its counts in the shared directory: whichever answers /metrics sums all.
    for _ in range(4):
        assert requests_counted(workers) - before == 40


def test_a_response_stored_by_one_worker_is_read_through_any(workers: Server) -> None:
    with fresh_client(workers) as client:
        created = client.responses.create(model="chat", input="My name is Ada.")
    for _ in range(10):
        with fresh_client(workers) as client:
            assert client.responses.retrieve(created.id).model_dump() == created.model_dump()
            follow_up = client.responses.create(
                model="chat", input="What is my name?", previous_response_id=created.id
            )
            assert follow_up.status == "completed"


def test_a_killed_worker_is_replaced(workers: Server) -> None:
    victim = worker_pids(workers)[0]
    os.kill(victim, signal.SIGKILL)
    pids = wait_for_workers(workers, WORKERS + 1)
    assert victim not in pids
    assert [chat_stream(workers) for _ in range(4)] == [DEFAULT_REPLY] * 4


def refused(folder: Path, config: Path) -> str:
    """Run `serve` with a config it must refuse; its error output."""
    process = subprocess.run(
        [sys.executable, "-m", "sluicegate", "serve", "--config", str(config), "--port", "1"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert process.returncode != 0
    assert "Traceback" not in process.stderr
    return process.stderr


def test_workers_without_the_redis_store_are_refused(tmp_path: Path) -> None:
    config = write_config(
        tmp_path, {"data_dir": str(tmp_path / "data"), "workers": 2}, [scripted("chat", "chat.yaml")]
    )
    assert 'needs [store] backend = "redis"' in refused(tmp_path, config)


def test_workers_with_a_local_model_are_refused(tmp_path: Path, redis: RedisServer) -> None:
    from sluicegate.demo.model import make_demo_gguf

    gguf = make_demo_gguf(tmp_path / "tiny.gguf")
    config = write_config(
        tmp_path,
        {"data_dir": str(tmp_path / "data"), "workers": 2},
        [scripted("chat", "chat.yaml"), {"id": "tiny", "engine": "llamacpp", "path": str(gguf)}],
        {"store": {"backend": "redis", "url": redis.url}},
    )
    error = refused(tmp_path, config)
    assert "tiny would load its weights once per worker" in error
