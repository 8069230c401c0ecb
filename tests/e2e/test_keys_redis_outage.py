"""Runtime keys and their limits on Redis, and Redis going away mid-run (issue 46): with
`limits_on_store_failure = "open"` requests still pass (uncounted), with "closed" they get a
clear 503 in the dialect's own shape (Anthropic's 529 `overloaded_error`), never a 500; and
when Redis is back both count again. The keys themselves survive the outage (held in memory)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis
from e2e_support import Server, run_server, scripted, write_config

from redis_support import RedisServer, redis_server

pytestmark = pytest.mark.e2e

ADMIN = "sk-admin-test"
CHAT = {"model": "chat-a", "messages": [{"role": "user", "content": "hi"}]}


def chat(server: Server, key: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.post(f"{server.api_url}/chat/completions", json=CHAT, headers=headers, timeout=30.0)


def messages(server: Server, key: str) -> httpx.Response:
    body = {**CHAT, "max_tokens": 20}
    return httpx.post(f"{server.base_url}/v1/messages", json=body, headers={"x-api-key": key}, timeout=30.0)


def eventually(check: Callable[[], bool], what: str, tries: int = 200) -> None:
    """Poll a condition (keys and Redis come back by polling), never a fixed sleep."""
    for _ in range(tries):
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


@pytest.fixture(scope="module")
def redis_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as running:
        yield running


@pytest.fixture(scope="module")
def servers(
    redis_db: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, Server]]:
    def config(folder: Path, on_failure: str) -> Path:
        return write_config(
            folder,
            {"admin_key": ADMIN, "data_dir": str(folder / "data"), "limits_on_store_failure": on_failure},
            [scripted("chat-a", "chat.yaml")],
            {"store": {"backend": "redis", "url": redis_db.url}},
        )

    open_dir, closed_dir = tmp_path_factory.mktemp("open"), tmp_path_factory.mktemp("closed")
    with (
        run_server(open_dir, config(open_dir, "open")) as opened,
        run_server(closed_dir, config(closed_dir, "closed")) as closed,
    ):
        yield opened, closed


def test_a_redis_outage_fails_open_or_closed_as_configured_and_recovers(
    redis_db: RedisServer, servers: tuple[Server, Server]
) -> None:
    opened, closed = servers
    with httpx.Client(base_url=opened.base_url, headers={"Authorization": f"Bearer {ADMIN}"}) as admin:
        made = admin.post("/admin/keys", json={"name": "steady", "owner": "ops", "limits": {"rpm": 1000}})
    assert made.status_code == 201, made.text
    key = made.json()["key"]
    eventually(lambda: chat(closed, key).status_code == 200, "the closed server knows the key")
    counted = chat(opened, key)
    assert counted.status_code == 200 and "x-ratelimit-remaining-requests" in counted.headers

    # Redis goes away (its data saved first, as a Redis with persistence keeps it).
    redis.Redis.from_url(redis_db.url).save()
    redis_db.stop()

    for _ in range(3):
        passed = chat(opened, key)  # open: through, uncounted (no rate headers to tell)
        assert passed.status_code == 200, passed.text
        assert "x-ratelimit-remaining-requests" not in passed.headers
        refused = chat(closed, key)  # closed: OpenAI's 503 shape, never a 500
        assert refused.status_code == 503, refused.text
        assert refused.headers["retry-after"] == "1"
        error = refused.json()["error"]
        assert error["code"] == "store_unavailable" and "limits cannot be checked" in error["message"]
    anthropic_refused = messages(closed, key)  # Anthropic's own: 529 overloaded_error
    assert anthropic_refused.status_code == 529, anthropic_refused.text
    body = anthropic_refused.json()
    assert body["type"] == "error" and body["error"]["type"] == "overloaded_error"
    assert messages(opened, key).status_code == 200

    # Redis is back: both count again, and the closed server serves again.
    redis_db.start()
    eventually(lambda: chat(closed, key).status_code == 200, "the closed server serves again")
    again = chat(opened, key)
    assert again.status_code == 200 and "x-ratelimit-remaining-requests" in again.headers
