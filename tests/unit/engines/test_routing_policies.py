"""Routing across an upstream's replicas (issue 46, part 4), against three fake upstreams:
prefix_affinity keeps a conversation on one replica and spreads different ones, leaves an
overloaded replica, keeps its table bounded, shares it through Redis (and does without Redis);
round_robin cycles; a dead replica fails over under every policy."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from fake_upstream import FakeUpstream, running

from redis_support import RedisServer, free_port, redis_server
from sluicegate.core.events import Answered, Failed, RawBatch, RawEvent, TextDelta
from sluicegate.core.request import ChatRequest, Message, ToolSpec
from sluicegate.engines.base import ConfigError
from sluicegate.engines.upstream import routing
from sluicegate.engines.upstream.config import parse_config
from sluicegate.engines.upstream.engine import OpenAIUpstreamEngine
from sluicegate.engines.upstream.relay import REPLICA_HEADER
from sluicegate.engines.upstream.routing import MIN_PREFIX_BYTES, prefix_keys

SYSTEM = "You are a careful assistant for the routing tests. " * 8  # past MIN_PREFIX_BYTES alone


@pytest.fixture(scope="module")
def fakes() -> Iterator[list[FakeUpstream]]:
    with running("a", "b", "c") as upstreams:
        yield upstreams


@pytest.fixture(autouse=True)
def no_sharing() -> Iterator[None]:
    routing.share_through_redis(None)
    yield
    routing.share_through_redis(None)


def make_engine(urls: list[str], **table: object) -> OpenAIUpstreamEngine:
    config: dict[str, object] = {
        "id": "m",
        "upstream_model": "fake-model",
        "base_urls": urls,
        "health_check_interval": 0,
    }
    return OpenAIUpstreamEngine(parse_config({**config, **table}, env={}))


Make = Callable[..., Awaitable[OpenAIUpstreamEngine]]


@pytest.fixture
async def engine_for(fakes: list[FakeUpstream]) -> AsyncIterator[Make]:
    made: list[OpenAIUpstreamEngine] = []

    async def make(policy: str, **table: object) -> OpenAIUpstreamEngine:
        engine = make_engine([f.base_url for f in fakes], routing=policy, **table)
        await engine.start()
        made.append(engine)
        return engine

    yield make
    for engine in made:
        await engine.aclose()


class Conversation:
    """A chat whose turns grow: the system prompt, then user and assistant messages."""

    def __init__(self, name: str, system: str = SYSTEM) -> None:
        self.name = name
        self.messages = [Message(role="system", content=f"{name}: {system}")]

    def request(self, turn: int) -> ChatRequest:
        self.messages.append(Message(role="user", content=f"{self.name}, question {turn}"))
        return ChatRequest(model="m", messages=list(self.messages))

    def answered(self, text: str) -> None:
        self.messages.append(Message(role="assistant", content=text))


async def ask(engine: OpenAIUpstreamEngine, request: ChatRequest) -> tuple[str, str]:
    """(the replica that answered, the text); a failure fails the test."""
    replica, text = "", ""
    events: list[RawEvent] = []
    async for event in engine.generate(request):
        events.extend(event.events if type(event) is RawBatch else (event,))
    for event in events:
        if type(event) is Answered:
            replica = event.headers[REPLICA_HEADER]
        elif type(event) is TextDelta:
            text += event.text
        assert type(event) is not Failed, event
    return replica, text


async def turns(engine: OpenAIUpstreamEngine, conversation: Conversation, count: int) -> list[str]:
    served = []
    for turn in range(count):
        replica, text = await ask(engine, conversation.request(turn))
        conversation.answered(text)
        served.append(replica)
    return served


def by_url(fakes: list[FakeUpstream]) -> dict[str, str]:
    return {f.base_url: f.name for f in fakes}


async def test_a_multi_turn_conversation_sticks_to_one_replica(
    engine_for: Make, fakes: list[FakeUpstream]
) -> None:
    engine = await engine_for("prefix_affinity")
    served = await turns(engine, Conversation("one"), 6)
    assert len(set(served)) == 1, served
    # least_busy (the default) spreads the same turns over the idle replicas instead.
    other = await engine_for("least_busy")
    assert len(set(await turns(other, Conversation("two"), 6))) > 1


async def test_different_conversations_spread_and_each_keeps_its_replica(
    engine_for: Make, fakes: list[FakeUpstream]
) -> None:
    engine = await engine_for("prefix_affinity")
    chats = [Conversation(f"chat {i}") for i in range(6)]
    served: dict[str, list[str]] = {c.name: [] for c in chats}
    for turn in range(3):  # turn by turn across the conversations, as users interleave
        for chat in chats:
            replica, text = await ask(engine, chat.request(turn))
            chat.answered(text)
            served[chat.name].append(replica)
    assert all(len(set(replicas)) == 1 for replicas in served.values()), served
    homes = Counter(replicas[0] for replicas in served.values())
    assert len(homes) == 3 and max(homes.values()) == 2, homes


async def test_a_shared_system_prompt_and_tools_lead_to_the_replica_that_has_them(engine_for: Make) -> None:
    engine = await engine_for("prefix_affinity")
    tools = [ToolSpec(name="lookup", description="Look something up. " * 20, parameters={"type": "object"})]
    first = ChatRequest(model="m", messages=[Message(role="user", content="hi")], tools=tools)
    home, _ = await ask(engine, first)
    for i in range(3):  # other users, the same tools and system: the same replica
        request = ChatRequest(model="m", messages=[Message(role="user", content=f"user {i}")], tools=tools)
        assert (await ask(engine, request))[0] == home


async def test_an_overloaded_sticky_replica_is_passed_over(
    engine_for: Make, fakes: list[FakeUpstream]
) -> None:
    engine = await engine_for("prefix_affinity")
    chat = Conversation("busy")
    (home,) = set(await turns(engine, chat, 2))
    sticky = engine.replicas.by_name[home]
    # One request in flight more than the others: still the better place for its prefix.
    sticky.outstanding = 1
    assert (await ask(engine, chat.request(2)))[0] == home
    chat.messages.pop()
    # Above 1.5x the mean and two more than the least busy: the least busy gets it.
    sticky.outstanding = 4
    replica, text = await ask(engine, chat.request(2))
    assert replica != home
    sticky.outstanding = 0
    chat.answered(text)
    # The conversation's prefix now lives where it went: it stays there.
    assert set(await turns(engine, chat, 2)) == {replica}


def test_overloaded_follows_the_factor_and_the_margin() -> None:
    group = make_engine(["http://a/v1", "http://b/v1", "http://c/v1"], routing="prefix_affinity").replicas
    a, b, c = group.replicas
    for loads, factor, expected in [
        ((1, 0, 0), 1.5, False),  # one more than the others: not worth a cache miss
        ((2, 0, 0), 1.5, True),  # 2 >= 1.5 x 0.67 and two more than the least busy
        ((2, 2, 0), 1.5, True),  # 2 >= 1.5 x 1.33: the idle one takes it
        ((2, 1, 1), 1.5, False),  # only one more than the least busy
        ((6, 4, 4), 1.5, False),  # 6 < 1.5 x 4.67
        ((9, 4, 4), 1.5, True),
        ((9, 4, 4), 2.0, False),
    ]:
        a.outstanding, b.outstanding, c.outstanding = loads
        group.config.routing_overload_factor = factor
        assert group.overloaded(a, group.replicas) is expected, (loads, factor)


async def test_the_prefix_table_stays_bounded(engine_for: Make) -> None:
    engine = await engine_for("prefix_affinity", routing_table_size=8)
    chats = [Conversation(f"bounded {i}") for i in range(20)]
    for chat in chats:
        await turns(engine, chat, 2)
    table = engine.replicas.affinity
    assert table is not None and len(table) == 8
    keys = [prefix_keys("fake-model", ChatRequest(model="m", messages=c.messages)) for c in chats]
    assert table.lookup(keys[0]) is None  # the oldest forgotten
    assert table.lookup(keys[-1]) is not None  # the newest remembered


def test_prefix_keys_follow_message_boundaries() -> None:
    chat = Conversation("keys")
    short = ChatRequest(model="m", messages=[Message(role="user", content="hi")])
    assert prefix_keys("m", short) == []  # shorter than MIN_PREFIX_BYTES: no affinity
    first = prefix_keys("m", chat.request(0))
    chat.answered("an answer")
    later = prefix_keys("m", chat.request(1))
    assert len(SYSTEM) > MIN_PREFIX_BYTES and later[: len(first)] == first and len(later) == len(first) + 2
    assert prefix_keys("other-model", chat.request(2))[0] != later[0]  # the model is in the seed


async def test_round_robin_cycles(engine_for: Make, fakes: list[FakeUpstream]) -> None:
    engine = await engine_for("round_robin")
    engine.replicas.replicas[0].outstanding = 5  # busy: least_busy would pass it over, not this
    chat = Conversation("cycle")
    served = [by_url(fakes)[url] for url in await turns(engine, chat, 6)]
    assert served[:3] == served[3:] and sorted(served[:3]) == ["a", "b", "c"], served


@pytest.mark.parametrize("policy", ["least_busy", "prefix_affinity", "round_robin"])
async def test_a_dead_replica_fails_over(policy: str, fakes: list[FakeUpstream]) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    engine = make_engine([dead, fakes[0].base_url, fakes[1].base_url], routing=policy)
    await engine.start()
    try:
        if policy == "prefix_affinity":  # the conversation's replica dies under it
            chat = Conversation("failover")
            await turns(engine, chat, 2)
            table = engine.replicas.affinity
            assert table is not None
            table.record(prefix_keys("fake-model", ChatRequest(model="m", messages=chat.messages)), dead)
            served = await turns(engine, chat, 3)
            assert dead not in served and len(set(served)) == 1
        else:
            served = [(await ask(engine, Conversation(f"{policy} {i}").request(0)))[0] for i in range(4)]
            assert dead not in served
        assert not engine.replicas.by_name[dead].healthy
    finally:
        await engine.aclose()


def test_routing_config_is_validated() -> None:
    for table, message in [
        ({"routing": "fastest"}, "routing must be one of least_busy, prefix_affinity, round_robin"),
        ({"routing_overload_factor": 0.5}, "routing_overload_factor must be a number >= 1"),
        ({"routing_table_size": 0}, "routing_table_size must be a positive integer"),
    ]:
        with pytest.raises(ConfigError, match=message):
            make_engine(["http://a/v1", "http://b/v1"], **table)
    assert make_engine(["http://a/v1"]).replicas.config.routing == "least_busy"


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as server:
        yield server


async def test_sluicegate_replicas_share_the_table_through_redis(
    redis: RedisServer, fakes: list[FakeUpstream]
) -> None:
    routing.share_through_redis(redis.url)
    urls = [f.base_url for f in fakes]
    one, two = (make_engine(urls, routing="prefix_affinity") for _ in range(2))
    await one.start()
    await two.start()
    try:
        # Another user's short request first: without the shared table, `two`'s rotation of
        # idle replicas would not land where `one`'s did.
        await ask(two, ChatRequest(model="m", messages=[Message(role="user", content="hi")]))
        chat = Conversation("shared")
        (home,) = set(await turns(one, chat, 2))
        assert one.replicas.shared is not None
        await asyncio.gather(*one.replicas.shared._pending)  # the background write landed
        # The other Sluicegate has never seen this conversation, and sends it where it lives.
        assert set(await turns(two, chat, 3)) == {home}
    finally:
        await one.aclose()
        await two.aclose()


async def test_without_redis_routing_goes_on_locally(
    fakes: list[FakeUpstream], caplog: pytest.LogCaptureFixture
) -> None:
    routing.share_through_redis(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    engine = make_engine([f.base_url for f in fakes], routing="prefix_affinity")
    await engine.start()
    try:
        served = await turns(engine, Conversation("no redis"), 4)
        assert len(set(served)) == 1
        assert "Redis is unavailable" in caplog.text
    finally:
        await engine.aclose()


def test_the_factory_shares_where_the_store_is(tmp_path: Path) -> None:
    from sluicegate.app.factory import create_app
    from sluicegate.config import load_settings

    config = tmp_path / "sluicegate.toml"
    config.write_text('[store]\nbackend = "redis"\nurl = "redis://127.0.0.1:1/0"\n')
    create_app(load_settings(config, env={}))
    assert routing.shared_url() == "redis://127.0.0.1:1/0"
    config.write_text("")
    create_app(load_settings(config, env={}))
    assert routing.shared_url() is None


async def test_a_failed_redis_is_left_alone_for_a_while() -> None:
    shared = routing.SharedPrefixes(f"redis://127.0.0.1:{free_port()}/0")
    calls = 0

    async def mget(keys: list[str]) -> list[bytes | None]:
        nonlocal calls
        calls += 1
        raise ConnectionError("refused")

    shared.redis.mget = mget
    try:
        assert await shared.fetch([b"k" * 16]) is None
        assert await shared.fetch([b"k" * 16]) is None  # resting: Redis not asked again
        assert calls == 1
        shared._rest_until = 0.0  # the rest is over
        assert await shared.fetch([b"k" * 16]) is None and calls == 2
    finally:
        await shared.aclose()
