"""Gateway mode with `discover = true`: the upstream's `/v1/models` become Sluicegate models
under a prefix, refreshed in the background; an upstream down at startup is retried."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from conftest import StartServer
from e2e_support import Server, poll
from fake_upstream import FakeUpstream
from upstream_support import REPLICA_HEADER, dead_url

pytestmark = pytest.mark.e2e

LATE_URL = dead_url()  # nothing listens here when the server starts


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream(name="listing") as upstream:
        upstream.models = ["small", "org/large"]
        yield upstream


@pytest.fixture(scope="module")
def server(start_server: StartServer, fake: FakeUpstream) -> Server:
    models = [
        {
            "id": "up",
            "engine": "openai",
            "base_url": fake.base_url,
            "discover": True,
            "discover_interval": 0.3,
        },
        {
            "engine": "openai",
            "base_url": LATE_URL,
            "discover": True,
            "prefix": "late:",
            "discover_interval": 0.3,
        },
        {"id": "fixed", "engine": "scripted"},
    ]
    return start_server({}, models)


@pytest.fixture
def client(server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.api_url, api_key="x", max_retries=0, timeout=30) as sdk:
        yield sdk


def model_ids(client: openai.OpenAI) -> set[str]:
    return {m.id for m in client.models.list()}


def test_discovered_models_are_listed_and_served_under_the_prefix(
    client: openai.OpenAI, fake: FakeUpstream
) -> None:
    assert {"up/small", "up/org/large", "fixed"} <= model_ids(client)
    raw = client.chat.completions.with_raw_response.create(
        model="up/org/large", messages=[{"role": "user", "content": "Hi"}]
    )
    assert raw.parse().choices[0].message.content == "Hello from listing"
    assert raw.headers[REPLICA_HEADER] == fake.base_url
    assert fake.chat_requests()[-1].body["model"] == "org/large"


def test_the_list_is_refreshed(client: openai.OpenAI, fake: FakeUpstream) -> None:
    fake.models = ["small", "org/large", "fresh"]
    poll(lambda: "up/fresh" in model_ids(client), timeout=10, fail=True)
    fake.models = ["small", "org/large"]
    poll(lambda: "up/fresh" not in model_ids(client), timeout=10, fail=True)


def test_an_upstream_down_at_startup_is_found_later(client: openai.OpenAI) -> None:
    assert not any(i.startswith("late:") for i in model_ids(client))
    port = int(LATE_URL.rsplit(":", 1)[1].split("/")[0])
    with FakeUpstream(name="late", port=port) as late:
        late.models = ["tardy"]
        poll(lambda: "late:tardy" in model_ids(client), timeout=15, interval=0.1, fail=True)
        reply = client.chat.completions.create(
            model="late:tardy", messages=[{"role": "user", "content": "Hi"}]
        )
        assert reply.choices[0].message.content == "Hello from late"
