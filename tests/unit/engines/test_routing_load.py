"""Routing by the upstreams' own load reports (issue 46, part 4): llama-server's `/slots` and
`/metrics`, vLLM's `/metrics`, in their real formats, polled with the health checks; used by
`least_busy` and by `prefix_affinity`'s overload test beside Sluicegate's own in-flight counts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from fake_upstream import FakeUpstream, llama_metrics, llama_slots, running, vllm_metrics
from test_routing_policies import Conversation, ask, make_engine, no_sharing, turns

from sluicegate.engines.upstream.engine import OpenAIUpstreamEngine
from sluicegate.engines.upstream.load import LoadProbe, LoadReport, parse_metrics, parse_slots, root_url
from sluicegate.engines.upstream.routing import SlotMap

__all__ = ["no_sharing"]  # a fixture (autouse): no Redis copy of the prefix table
FAST = 0.05  # health-check (and load poll) interval for the tests


@pytest.fixture
def fakes() -> Iterator[list[FakeUpstream]]:
    with running("a", "b", "c") as upstreams:
        yield upstreams


@pytest.fixture
async def engines() -> AsyncIterator[list[OpenAIUpstreamEngine]]:
    made: list[OpenAIUpstreamEngine] = []
    yield made
    for engine in made:
        await engine.aclose()


async def started(
    made: list[OpenAIUpstreamEngine], fakes: list[FakeUpstream], **table: object
) -> OpenAIUpstreamEngine:
    engine = make_engine([f.base_url for f in fakes], health_check_interval=FAST, **table)
    await engine.start()
    made.append(engine)
    return engine


async def reported(engine: OpenAIUpstreamEngine, check: object) -> None:
    """Wait (on a condition, polled by the event loop) until every replica's probe has a report
    that `check(probe report)` accepts."""
    for _ in range(400):
        probes = [r.probe for r in engine.replicas.replicas]
        if all(p is not None and p.report is not None and check(p.report) for p in probes):  # type: ignore[operator]
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the load reports never arrived")


def test_the_real_formats_parse() -> None:
    assert parse_slots(llama_slots(6, 2)) == (6, frozenset({0, 1}))
    assert parse_metrics(llama_metrics(3, 4)) == (3, 4)
    assert parse_metrics(vllm_metrics(5, 7)) == (5, 7)
    two_models = vllm_metrics(1, 2, model="x") + vllm_metrics(3, 4, model="y")
    assert parse_metrics(two_models) == (4, 6)  # one sample per label set, summed
    # Not a load report: an OpenAI-style error, a model list, another server's metrics.
    assert parse_slots(b'{"error":{"message":"no such route"}}') is None
    assert parse_slots(b'[{"id": "gpt"}]') is None
    assert parse_metrics(b"# TYPE http_requests_total counter\nhttp_requests_total 12\n") is None
    assert parse_metrics(b'vllm:num_requests_running{model_name="m"} NaNx\n') is None


def test_the_root_is_beside_v1() -> None:
    assert root_url("http://127.0.0.1:8080/v1") == "http://127.0.0.1:8080"
    assert root_url("http://gpu:8000/v1/") == "http://gpu:8000"
    assert root_url("http://proxy/team/v1") == "http://proxy/team"


async def test_least_busy_avoids_the_replica_that_reports_a_queue(
    fakes: list[FakeUpstream], engines: list[OpenAIUpstreamEngine]
) -> None:
    a, b, c = fakes
    a.pages["/metrics"] = (200, vllm_metrics(8, 3))  # busy with other clients' requests
    for idle in (b, c):
        idle.pages["/metrics"] = (200, vllm_metrics(0, 0))
    engine = await started(engines, fakes)
    await reported(engine, lambda report: True)
    served = {(await ask(engine, Conversation(f"one-off {i}").request(0)))[0] for i in range(6)}
    assert served == {b.base_url, c.base_url}  # our own in-flight counts are all 0: without
    # the reports, least_busy would rotate over a too (the next test's control shows it)


async def test_without_reports_least_busy_rotates_over_all(
    fakes: list[FakeUpstream], engines: list[OpenAIUpstreamEngine]
) -> None:
    fakes[0].pages["/metrics"] = (200, vllm_metrics(8, 3))
    engine = await started(engines, fakes, routing_load_reports=False)
    served = {(await ask(engine, Conversation(f"one-off {i}").request(0)))[0] for i in range(6)}
    assert len(served) == 3 and all(r.probe is None for r in engine.replicas.replicas)


async def test_prefix_affinity_stays_while_the_replica_has_a_free_slot(
    fakes: list[FakeUpstream], engines: list[OpenAIUpstreamEngine]
) -> None:
    for fake in fakes:
        fake.pages["/slots"] = (200, llama_slots(6, 0))
    engine = await started(engines, fakes, routing="prefix_affinity")
    await reported(engine, lambda report: report.capacity == 6)
    chat = Conversation("slots")
    (home,) = set(await turns(engine, chat, 2))
    sticky = engine.replicas.by_name[home]
    # Four of ours in flight there, none elsewhere: the factor rule (1.5x the mean, two over
    # the least busy) would move the conversation; six slots say there is room. It stays.
    sticky.outstanding = 4
    assert (await ask(engine, chat.request(2)))[0] == home
    chat.messages.pop()
    # The replica reports every slot busy (other clients), and the others have free ones: it
    # would queue there, so the conversation moves.
    sticky.outstanding = 0
    by_url = {f.base_url: f for f in fakes}
    by_url[home].pages["/slots"] = (200, llama_slots(6, 6))
    await reported(
        engine, lambda report: report.capacity == 6 and (report.busy == 6) == (report is sticky.probe.report)
    )  # type: ignore[union-attr]
    replica, _ = await ask(engine, chat.request(2))
    assert replica != home


async def test_a_full_replica_is_kept_when_every_other_is_full_too(
    fakes: list[FakeUpstream], engines: list[OpenAIUpstreamEngine]
) -> None:
    for fake in fakes:
        fake.pages["/slots"] = (200, llama_slots(2, 2))
        fake.pages["/metrics"] = (200, llama_metrics(2, 1))  # llama-server --metrics: one deferred
    engine = await started(engines, fakes, routing="prefix_affinity")
    await reported(engine, lambda report: report.capacity == 2 and report.waiting == 1)
    chat = Conversation("all full")
    served = await turns(engine, chat, 3)
    assert len(set(served)) == 1, served  # queueing anywhere: where the prefix is


async def test_an_upstream_without_load_endpoints_is_asked_again_only_after_a_while(
    fakes: list[FakeUpstream], engines: list[OpenAIUpstreamEngine]
) -> None:
    engine = await started(engines, fakes)  # the fakes answer 404 on /slots and /metrics
    a = fakes[0]

    def asked(path: str) -> int:
        return sum(1 for r in a.requests if r.path == path)

    for _ in range(400):  # five health checks (the loop runs them while this waits)
        if sum(1 for r in a.requests if r.path.endswith("/models")) >= 5:
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the health checks never ran five times")
    assert asked("/slots") == 1 and asked("/metrics") == 1
    assert all(r.probe is not None and r.probe.report is None for r in engine.replicas.replicas)


async def test_a_report_past_its_bound_is_no_report(fakes: list[FakeUpstream]) -> None:
    fakes[0].pages["/metrics"] = (200, b"# padding\n" * 200_000 + llama_metrics(1, 0))  # ~2 MB
    probe = LoadProbe(fakes[0].base_url, {}, 1.0)
    try:
        assert await probe.poll() is None
        fakes[0].pages["/metrics"] = (200, llama_metrics(1, 0))
        report = await probe.poll()
        assert report is not None and (report.busy, report.waiting, report.capacity) == (1, 0, None)
    finally:
        await probe.aclose()


def test_a_slot_map_keeps_each_conversation_in_its_own_slot() -> None:
    slots = SlotMap(100)
    a1, b1 = [b"sys", b"a1"], [b"sys", b"b1"]  # one system prompt, two conversations
    first_a, first_b = slots.pin(a1, 4, frozenset()), slots.pin(b1, 4, frozenset())
    assert first_a is not None and first_b is not None and first_a != first_b  # never-used first
    slots.unpin(first_a)
    slots.unpin(first_b)
    assert slots.pin([*a1, b"a2"], 4, frozenset()) == first_a  # the next turn: its own slot
    assert slots.pin([*b1, b"b2"], 4, frozenset()) == first_b
    c = slots.pin([b"sys", b"c1"], 4, frozenset())  # a new one: not a slot in use, nor a's or b's
    assert c not in (first_a, first_b, None)


def test_a_busy_slot_is_not_named() -> None:
    slots = SlotMap(100)
    home = slots.pin([b"x1"], 2, frozenset())
    assert home is not None
    slots.unpin(home)
    other = slots.pin([b"x1", b"x2"], 2, frozenset({home}))  # reported processing (another client)
    assert other is not None and other != home
    assert slots.pin([b"y1"], 2, frozenset({home})) is None  # ours in flight and theirs: no slot


async def test_prefix_affinity_names_the_llama_server_slot_of_each_conversation(
    fakes: list[FakeUpstream], engines: list[OpenAIUpstreamEngine]
) -> None:
    for fake in fakes:
        fake.pages["/slots"] = (200, llama_slots(4, 0))
    engine = await started(engines, fakes, routing="prefix_affinity")
    await reported(engine, lambda report: report.capacity == 4)
    chats = [Conversation(f"slot chat {i}") for i in range(6)]
    for turn in range(3):
        for chat in chats:
            _replica, text = await ask(engine, chat.request(turn))
            chat.answered(text)
    sent: dict[str, list[tuple[str, int]]] = {}
    for fake in fakes:
        for observed in fake.chat_requests():
            name = observed.body["messages"][0]["content"].split(":")[0]
            sent.setdefault(name, []).append((fake.name, observed.body["id_slot"]))
    assert len(sent) == 6 and all(len(set(places)) == 1 for places in sent.values()), sent
    assert len({places[0] for places in sent.values()}) == 6  # no two conversations share a slot


async def test_no_slot_is_named_to_an_upstream_without_slots(
    fakes: list[FakeUpstream], engines: list[OpenAIUpstreamEngine]
) -> None:
    for fake in fakes:
        fake.pages["/metrics"] = (200, vllm_metrics(0, 0))
    engine = await started(engines, fakes, routing="prefix_affinity")
    await reported(engine, lambda report: report.capacity is None)
    await turns(engine, Conversation("vllm"), 2)
    assert all("id_slot" not in o.body for fake in fakes for o in fake.chat_requests())


def test_an_old_busy_count_is_dropped_but_the_slot_count_is_kept() -> None:
    group = make_engine(
        ["http://a/v1", "http://b/v1"], routing="prefix_affinity", health_check_interval=10
    ).replicas
    a, b = group.replicas
    assert a.probe is not None and b.probe is not None
    now = time.monotonic()
    a.probe.report = LoadReport(busy=6, waiting=2, capacity=6, at=now - 6.0)  # past 5 s
    b.probe.report = LoadReport(busy=0, waiting=0, capacity=6, at=now)
    group.pick(set())
    assert a.report is None and a.load == a.outstanding == 0 and a.capacity == 6
    a.probe.report = LoadReport(busy=6, waiting=2, capacity=6, at=now)
    group.pick(set())
    assert a.load == 8 and group.overloaded(a, group.replicas)
