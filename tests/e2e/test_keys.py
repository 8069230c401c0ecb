"""Runtime API keys (issue 46): issued by the admin API or `sluicegate keys`, used by the
official SDK, limited to models by glob, revoked at once — on one server with SQLite, and on
two replicas sharing Redis (a key made on A works on B; one revoked from a terminal stops on
both)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from e2e_support import Server, run_server, scripted, server_env, write_config

from redis_support import RedisServer, redis_server

pytestmark = pytest.mark.e2e

ADMIN = "sk-admin-test"
MODELS = [scripted("chat-a", "chat.yaml"), scripted("chat-b", "chat.yaml"), scripted("other", "chat.yaml")]


def admin(server: Server) -> httpx.Client:
    return httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10.0)


def sdk(server: Server, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.api_url, api_key=key, max_retries=0, timeout=10.0)


def ask(server: Server, key: str, model: str = "chat-a") -> str | None:
    with sdk(server, key) as client:
        answer = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
    return answer.choices[0].message.content


def status_of(server: Server, key: str, model: str = "chat-a") -> int:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.post(
        f"{server.api_url}/chat/completions", json=body, headers=headers, timeout=10.0
    ).status_code


def eventually(check: Callable[[], bool], what: str, tries: int = 100) -> None:
    """Poll a condition: keys reach a replica by polling (every 0.5 s), never by a fixed sleep."""
    for _ in range(tries):
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


def keys_command(config: Path, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = server_env(folder) | {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, "-m", "sluicegate", "keys", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        cwd=folder,
        env=env,
        timeout=60,
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("keys")
    config = write_config(
        folder,
        {"admin_key": ADMIN, "data_dir": str(folder / "data")},
        MODELS,
        {
            "prices": {"chat-*": {"input": 1.0, "output": 2.0}},
            "teams": {"squad": {"rpm": 3}, "thrifty": {"budget": {"tokens": 5, "period": "day"}}},
        },
    )
    with run_server(folder, config) as running:
        yield running


def test_a_created_key_works_with_the_sdk_and_its_secret_is_shown_once(server: Server) -> None:
    with admin(server) as client:
        created = client.post("/admin/keys", json={"name": "alice", "owner": "team-red"})
        assert created.status_code == 201, created.text
        secret = created.json()["key"]
        assert secret.startswith("sk-sg-")
        assert ask(server, secret)
        listed = client.get("/admin/keys").json()["data"]
        alice = next(k for k in listed if k["name"] == "alice")
        assert (
            alice["owner"] == "team-red"
            and "key" not in alice
            and secret not in created.text.replace(f'"key":"{secret}"', "")
        )
        assert client.get("/admin/keys/alice").json()["key_hint"].endswith(secret[-4:])
        again = client.post("/admin/keys", json={"name": "alice"})
        assert again.status_code == 409 and again.json()["error"]["code"] == "key_exists"


def test_no_key_and_an_unknown_key_are_refused(server: Server) -> None:
    assert status_of(server, "sk-sg-not-issued") == 401
    with httpx.Client(base_url=server.base_url) as anonymous:
        assert anonymous.get("/v1/models").status_code == 401


def test_only_the_admin_key_reaches_the_admin_api(server: Server) -> None:
    with admin(server) as client:
        secret = client.post("/admin/keys", json={"name": "bob"}).json()["key"]
    assert (
        httpx.get(f"{server.base_url}/admin/keys", headers={"Authorization": f"Bearer {secret}"}).status_code
        == 401
    )
    assert httpx.get(f"{server.base_url}/admin/keys").status_code == 401
    # and the admin key is not an API key
    assert status_of(server, ADMIN) == 401


def test_a_key_limited_by_glob_meets_other_models_as_missing(server: Server) -> None:
    with admin(server) as client:
        created = client.post("/admin/keys", json={"name": "globbed", "models": ["chat-*"]})
    secret = created.json()["key"]
    assert ask(server, secret, "chat-a") and ask(server, secret, "chat-b")
    with sdk(server, secret) as client, pytest.raises(openai.NotFoundError) as refused:
        client.chat.completions.create(model="other", messages=[{"role": "user", "content": "hi"}])
    assert refused.value.code == "model_not_found"
    with sdk(server, secret) as client:
        assert sorted(m.id for m in client.models.list()) == ["chat-a", "chat-b"]


def test_a_revoked_key_stops_at_once_and_an_expired_one_never_works(server: Server) -> None:
    with admin(server) as client:
        secret = client.post("/admin/keys", json={"name": "carol"}).json()["key"]
        assert status_of(server, secret) == 200
        revoked = client.delete("/admin/keys/carol")
        assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
        assert status_of(server, secret) == 401  # the replica that revoked re-reads at once
        expired = client.post("/admin/keys", json={"name": "dave", "expires_at": int(time.time()) - 1})
        assert status_of(server, expired.json()["key"]) == 401
        assert client.delete("/admin/keys/nobody").status_code == 404


def test_bad_admin_bodies_are_400s(server: Server) -> None:
    with admin(server) as client:
        for body in (
            {"name": "bad name!"},
            {"name": "x", "limits": {"rpm": -1}},
            {"name": "x", "models": "chat-*"},
            {"name": "x", "expires_at": "tomorrow"},
            [1, 2],
        ):
            answer = client.post("/admin/keys", json=body)
            assert answer.status_code == 400, (body, answer.text)
            assert answer.json()["error"]["type"] == "invalid_request_error"


def test_the_command_line_issues_a_key_the_running_server_accepts(server: Server) -> None:
    config = server.folder / "sluicegate.toml"
    made = keys_command(
        config, server.folder, "create", "--name", "from-cli", "--rpm", "60", "--models", "chat-*"
    )
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip().splitlines()[-1]
    assert secret.startswith("sk-sg-")
    eventually(lambda: status_of(server, secret) == 200, "the CLI's key works on the running server")
    listed = keys_command(config, server.folder, "list")
    line = next(line for line in listed.stdout.splitlines() if line.startswith("from-cli"))
    assert "rpm=60" in line and "models=chat-*" in line and secret not in listed.stdout
    assert keys_command(config, server.folder, "revoke", "from-cli").returncode == 0
    eventually(lambda: status_of(server, secret) == 401, "the revoked key stops working")
    assert keys_command(config, server.folder, "revoke", "missing").returncode == 1


# --- two replicas sharing Redis --------------------------------------------------------------


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as running:
        yield running


@pytest.fixture(scope="module")
def replicas(redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    def config(folder: Path) -> Path:
        return write_config(
            folder,
            {"admin_key": ADMIN, "data_dir": str(folder / "data")},
            MODELS,
            {"store": {"backend": "redis", "url": redis.url}},
        )

    a_dir, b_dir = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
    with run_server(a_dir, config(a_dir)) as a, run_server(b_dir, config(b_dir)) as b:
        yield a, b


def test_a_key_made_on_one_replica_works_on_the_other_and_a_revoke_reaches_both(
    replicas: tuple[Server, Server],
) -> None:
    a, b = replicas
    with admin(a) as on_a:
        secret = on_a.post("/admin/keys", json={"name": "shared"}).json()["key"]
    assert status_of(a, secret) == 200
    eventually(lambda: status_of(b, secret) == 200, "B accepts the key A made")
    config = b.folder / "sluicegate.toml"
    assert keys_command(config, b.folder, "revoke", "shared").returncode == 0
    eventually(lambda: status_of(a, secret) == 401 and status_of(b, secret) == 401, "both refuse it")


# --- limits ------------------------------------------------------------------------------------


def issue(server: Server, name: str, **limits: int) -> str:
    with admin(server) as client:
        created = client.post("/admin/keys", json={"name": name, "limits": limits})
    assert created.status_code == 201, created.text
    secret: str = created.json()["key"]
    return secret


def test_a_key_over_its_requests_per_minute_gets_429_with_retry_after_and_openai_headers(
    server: Server,
) -> None:
    secret = issue(server, "three-a-minute", rpm=3)
    body = {"model": "chat-a", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Authorization": f"Bearer {secret}"}
    answers = [
        httpx.post(f"{server.api_url}/chat/completions", json=body, headers=headers, timeout=10.0)
        for _ in range(4)
    ]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert [a.headers["x-ratelimit-remaining-requests"] for a in answers[:3]] == ["2", "1", "0"]
    assert answers[0].headers["x-ratelimit-limit-requests"] == "3"
    assert answers[0].headers["x-ratelimit-reset-requests"].endswith("s")
    refused = answers[3]
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"


def test_each_dialects_official_client_sees_its_own_rate_limit_error(server: Server) -> None:
    import anthropic
    import ollama

    openai_key, anthropic_key, ollama_key = (issue(server, f"one-{n}", rpm=1) for n in ("o", "a", "l"))
    with sdk(server, openai_key) as client:
        client.chat.completions.create(model="chat-a", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.RateLimitError) as limited:
            client.chat.completions.create(model="chat-a", messages=[{"role": "user", "content": "hi"}])
    assert limited.value.code == "rate_limit_exceeded"
    with anthropic.Anthropic(base_url=server.base_url, api_key=anthropic_key, max_retries=0) as claude:
        claude.messages.create(model="chat-a", max_tokens=50, messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(anthropic.RateLimitError) as limited_a:
            claude.messages.create(
                model="chat-a", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
            )
    assert limited_a.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    local = ollama.Client(host=server.base_url, headers={"Authorization": f"Bearer {ollama_key}"})
    local.chat(model="chat-a", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(ollama.ResponseError) as limited_o:
        local.chat(model="chat-a", messages=[{"role": "user", "content": "hi"}])
    assert limited_o.value.status_code == 429


def test_tokens_per_minute_stop_a_key_once_its_usage_reaches_them(server: Server) -> None:
    secret = issue(server, "few-tokens", tpm=5)
    assert status_of(server, secret) == 200  # the scripted reply reports more than 5 tokens
    refused = httpx.post(
        f"{server.api_url}/chat/completions",
        json={"model": "chat-a", "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {secret}"},
        timeout=10.0,
    )
    assert refused.status_code == 429 and "tokens per minute" in refused.json()["error"]["message"]


def test_twenty_clients_on_two_replicas_get_exactly_sixty_requests_a_minute(
    replicas: tuple[Server, Server],
) -> None:
    import concurrent.futures

    a, b = replicas
    secret = issue(a, "sixty", rpm=60)
    eventually(lambda: status_of(b, secret) in (200, 429), "B knows the key")  # one request counted

    def client(n: int) -> list[int]:
        target = a if n % 2 else b
        return [status_of(target, secret) for _ in range(4)]

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        statuses = [s for batch in pool.map(client, range(20)) for s in batch]
    assert statuses.count(200) == 59 and statuses.count(429) == 21  # 60 in all with B's first


def test_two_keys_of_one_team_share_its_requests_per_minute(server: Server) -> None:
    """`[teams.squad] rpm = 3`: the team's limit is over before either key's own (10)."""
    with admin(server) as client:
        first, second = (
            client.post(
                "/admin/keys", json={"name": f"squad-{n}", "owner": "squad", "limits": {"rpm": 10}}
            ).json()["key"]
            for n in (1, 2)
        )
    assert [status_of(server, k) for k in (first, second, first)] == [200, 200, 200]
    body = {"model": "chat-a", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}
    refused = httpx.post(
        f"{server.base_url}/v1/messages", json=body, headers={"x-api-key": second}, timeout=10.0
    )
    assert refused.status_code == 429 and 1 <= int(refused.headers["retry-after"]) <= 60
    error = refused.json()
    assert error["type"] == "error" and error["error"]["type"] == "rate_limit_error"
    assert "team (squad)" in error["error"]["message"]
    with sdk(server, first) as openai_client, pytest.raises(openai.RateLimitError) as limited:
        openai_client.chat.completions.create(model="chat-a", messages=[{"role": "user", "content": "hi"}])
    assert limited.value.code == "rate_limit_exceeded" and "team" in limited.value.message
    with admin(server) as client:
        eventually(
            lambda: (
                next(t for t in client.get("/admin/usage").json()["teams"] if t["name"] == "squad")["used"][
                    "requests"
                ]
                == 3
            ),
            "the team's three requests are counted",
        )
        report = client.get("/admin/usage").json()
    squad = next(t for t in report["teams"] if t["name"] == "squad")
    assert squad["limits"]["rpm"] == 3 and sorted(squad["keys"]) == ["squad-1", "squad-2"]
    assert not any(row["key"].startswith("team:") for row in report["data"])  # rows are the keys'
    mine = {k["name"]: k["used"]["requests"] for k in report["keys"] if k["name"].startswith("squad-")}
    assert mine == {"squad-1": 2, "squad-2": 1}  # the refused requests counted nowhere


# --- usage and budgets -------------------------------------------------------------------------


def test_usage_per_key_model_and_day_is_counted_and_priced(server: Server) -> None:
    with admin(server) as client:
        secret = client.post("/admin/keys", json={"name": "spender"}).json()["key"]
        ask(server, secret, "chat-a")
        ask(server, secret, "chat-a")
        ask(server, secret, "other")
        # counted when each request has ended, just after its answer went out
        eventually(
            lambda: (
                client.get("/admin/usage", params={"key": "spender"}).json()["keys"][0]["used"]["requests"]
                == 3
            ),
            "the third request is counted",
        )
        report = client.get("/admin/usage", params={"key": "spender"}).json()
    rows = {row["model"]: row for row in report["data"]}
    assert set(rows) == {"chat-a", "other"} and rows["chat-a"]["requests"] == 2
    chat = rows["chat-a"]
    assert chat["input_tokens"] > 0 and chat["output_tokens"] > 0
    expected = (chat["input_tokens"] * 1.0 + chat["output_tokens"] * 2.0) / 1e6
    assert chat["cost"] == pytest.approx(expected) and rows["other"]["cost"] == 0  # no price for it
    [key] = report["keys"]
    assert key["name"] == "spender" and key["used"]["requests"] == 3
    metrics = httpx.get(f"{server.base_url}/metrics", headers={"Authorization": f"Bearer {ADMIN}"}).text
    assert 'sluicegate_key_requests_total{key="spender"} 3.0' in metrics and secret not in metrics
    listed = keys_command(server.folder / "sluicegate.toml", server.folder, "list")
    assert "today: requests=3" in next(
        line for line in listed.stdout.splitlines() if line.startswith("spender")
    )


def test_a_spent_budget_stops_the_key_and_the_usage_endpoint_says_why(server: Server) -> None:
    with admin(server) as client:
        made = client.post("/admin/keys", json={"name": "budgeted", "budget": {"tokens": 5, "period": "day"}})
        secret = made.json()["key"]
        assert status_of(server, secret) == 200  # the scripted answer uses more than five tokens
        eventually(
            lambda: client.get("/admin/usage", params={"key": "budgeted"}).json()["keys"][0]["used"][
                "requests"
            ],
            "the first request is counted",
        )
        refused = httpx.post(
            f"{server.api_url}/chat/completions",
            json={"model": "chat-a", "messages": [{"role": "user", "content": "hi"}]},
            headers={"Authorization": f"Bearer {secret}"},
            timeout=10.0,
        )
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "insufficient_quota"
        [key] = client.get("/admin/usage", params={"key": "budgeted"}).json()["keys"]
    assert key["budget"]["exhausted"] is True and key["budget"]["spent_tokens"] >= 5
    assert key["budget"]["tokens_left"] == 0


def test_a_teams_spent_budget_stops_all_of_its_keys(server: Server) -> None:
    """`[teams.thrifty] budget = { tokens = 5, period = "day" }`: one answer spends it for both."""
    with admin(server) as client:
        first, second = (
            client.post("/admin/keys", json={"name": f"thrifty-{n}", "owner": "thrifty"}).json()["key"]
            for n in (1, 2)
        )
        assert status_of(server, first) == 200  # the scripted answer uses more than five tokens

        def thrifty() -> dict[str, Any]:
            team: dict[str, Any] = next(
                t for t in client.get("/admin/usage").json()["teams"] if t["name"] == "thrifty"
            )
            return team

        eventually(lambda: thrifty()["used"]["requests"] == 1, "the team's request is counted")
        refused = httpx.post(
            f"{server.api_url}/chat/completions",
            json={"model": "chat-a", "messages": [{"role": "user", "content": "hi"}]},
            headers={"Authorization": f"Bearer {second}"},
            timeout=10.0,
        )
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "insufficient_quota"
        assert "team (thrifty)" in refused.json()["error"]["message"]
        budget = thrifty()["budget"]
    assert budget["exhausted"] is True and budget["tokens_left"] == 0 and budget["spent_tokens"] >= 5
