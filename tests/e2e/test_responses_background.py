"""Runs that outlive their connection: background mode, resuming a stream with `starting_after`,
`/cancel`, foreground clients that leave, heartbeats while the model is slow, and deadlines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from e2e_support import engine_window
from responses_support import (
    CRAWL_WORDS,
    LATE_ANSWER,
    STROLL_WORDS,
    Server,
    assert_openai_error,
    events_of,
    parse_sse,
    poll,
    running_server,
    stream_raw,
    validate_event,
    validate_response,
)

pytestmark = pytest.mark.e2e

STROLL_TEXT = " ".join(f"s{i}" for i in range(STROLL_WORDS))
CRAWL_TEXT = " ".join(f"c{i}" for i in range(CRAWL_WORDS))
# One model per test that watches metrics, so their counters never mix.
MODELS = {
    "slow": "responses_slow.yaml",
    "cancel-bg": "responses_slow.yaml",
    "cancel-fg": "responses_slow.yaml",
    "cancel-nonstream": "responses_slow.yaml",
    "delete-bg": "responses_slow.yaml",
    "pace": "responses_slow.yaml",  # a clock in engine steps (engine_window)
}


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("responses-background")
    with running_server(folder, server={"heartbeat_seconds": 0.2}, models=MODELS) as server:
        yield server


@pytest.fixture(scope="module")
def deadline_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("responses-deadline")
    with running_server(
        folder, server={"request_timeout_seconds": 1.0}, models={"slow": "responses_slow.yaml"}
    ) as s:
        yield s


@pytest.fixture
def sdk(slow_server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=slow_server.api_url, api_key="unused", max_retries=0, timeout=30.0) as c:
        yield c


def metric(server: Server, name: str, model: str) -> float:
    text = httpx.get(server.base_url + "/metrics", timeout=10.0).text
    match = re.search(rf'^{name}{{model="{re.escape(model)}"}} (\S+)$', text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def assert_stops_generating(server: Server, model: str) -> None:
    """The engine is no longer producing: no active generation, and the delta count stays put."""
    poll(lambda: metric(server, "sluicegate_generations_active", model) == 0, timeout=10)
    before = metric(server, "sluicegate_engine_deltas_total", model)
    engine_window(server.base_url, "pace", 6, prompt="crawl")  # six token delays of the crawl script
    assert metric(server, "sluicegate_engine_deltas_total", model) == before
    assert 0 < before < CRAWL_WORDS  # it did generate (so the metric exists), and stopped early


def read_until(response: httpx.Response, enough: Any) -> list[dict[str, Any]]:
    """Read events off an open stream until `enough(events)` says so."""
    events: list[dict[str, Any]] = []
    for line in response.iter_lines():
        if line.startswith("data: {"):
            events.append(json.loads(line[len("data: ") :]))
            if enough(events):
                return events
    raise AssertionError(f"the stream ended first: {[e['type'] for e in events]}")


def deltas(events: list[dict[str, Any]]) -> int:
    return sum(e["type"] == "response.output_text.delta" for e in events)


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


# --- background ---------------------------------------------------------------------------


def test_background_returns_at_once_and_retrieve_shows_progress(sdk: openai.OpenAI) -> None:
    raw = sdk.responses.with_raw_response.create(model="slow", input="stroll please", background=True)
    created = raw.parse()
    assert created.status in ("queued", "in_progress")
    assert created.background is True and created.output == []
    validate_response(raw.http_response.json())

    def partial() -> Any:
        now = sdk.responses.retrieve(created.id)
        return now if now.status == "in_progress" and now.output_text else None

    midway = poll(partial)
    assert STROLL_TEXT.startswith(midway.output_text) and len(midway.output_text) < len(STROLL_TEXT)
    assert midway.output[0].status == "in_progress"

    final = poll(lambda: (r := sdk.responses.retrieve(created.id)).status == "completed" and r)
    assert final.output_text == STROLL_TEXT
    assert final.output[0].id == midway.output[0].id
    assert final.usage is not None and final.usage.output_tokens == STROLL_WORDS


def test_background_stream_resumes_after_a_disconnect(slow_server: Server, sdk: openai.OpenAI) -> None:
    body = {"model": "slow", "input": "stroll please", "background": True, "stream": True}
    with httpx.Client(base_url=slow_server.base_url, timeout=30.0) as http:
        with http.stream("POST", "/v1/responses", json=body) as response:
            assert response.status_code == 200
            first = read_until(response, lambda events: deltas(events) >= 3)
        # The connection is closed; the run goes on without anyone listening.
        assert [e["type"] for e in first[:2]] == ["response.created", "response.queued"]
        assert first[0]["response"]["status"] == "queued"
        response_id = first[0]["response"]["id"]
        after = first[-1]["sequence_number"]
        assert [e["sequence_number"] for e in first] == list(range(after + 1))

        # The server replays from after `after` (then follows live) when asked to.
        raw = http.get(f"/v1/responses/{response_id}", params={"stream": "true", "starting_after": after})
        assert raw.status_code == 200 and raw.headers["content-type"].startswith("text/event-stream")
        frames = parse_sse(raw.text)
        assert frames[-1].is_done
        resumed_raw = events_of(frames)

    # The SDK's way: it replays the stream and yields only what follows `starting_after`.
    with sdk.responses.stream(response_id=response_id, starting_after=after) as stream:
        resumed = [(event.type, event.sequence_number, getattr(event, "delta", None)) for event in stream]
        final = stream.get_final_response()

    numbers = [e["sequence_number"] for e in resumed_raw]
    assert numbers == list(range(after + 1, after + 1 + len(numbers))), numbers  # each exactly once
    assert text_of(first + resumed_raw) == STROLL_TEXT
    assert resumed_raw[-1]["type"] == "response.completed"
    assert resumed == [(e["type"], e["sequence_number"], e.get("delta")) for e in resumed_raw]
    assert final.id == response_id and final.status == "completed" and final.output_text == STROLL_TEXT
    for event in first + resumed_raw:
        validate_event(event)

    # Once finished, the stored log replays the very same events.
    again = stream_raw(
        slow_server.base_url,
        {},
        method="GET",
        path=f"/v1/responses/{response_id}?stream=true&starting_after={after}",
    )
    assert again.events == resumed_raw
    assert again.frames[-1].is_done
    everything = stream_raw(
        slow_server.base_url, {}, method="GET", path=f"/v1/responses/{response_id}?stream=true"
    )
    assert [e["sequence_number"] for e in everything.events] == list(range(len(everything.events)))
    assert everything.events[: after + 1] == first
    past_the_end = stream_raw(
        slow_server.base_url,
        {},
        method="GET",
        path=f"/v1/responses/{response_id}?stream=true&starting_after=100000",
    )
    assert past_the_end.events == [] and past_the_end.frames[-1].is_done


def test_resuming_a_foreground_stream_or_with_a_bad_cursor_is_refused(
    slow_server: Server, sdk: openai.OpenAI
) -> None:
    done = sdk.responses.create(model="slow", input="quick")
    with httpx.Client(base_url=slow_server.base_url, timeout=30.0) as http:
        refused = http.get(f"/v1/responses/{done.id}", params={"stream": "true"})
        assert_openai_error(refused, 400, param="stream", code=None, type="invalid_request_error")
        bad = http.get(f"/v1/responses/{done.id}", params={"stream": "true", "starting_after": "two"})
        assert_openai_error(bad, 400, param="starting_after", code=None, type="invalid_request_error")
        missing = http.get("/v1/responses/resp_missing", params={"stream": "true"})
        error = assert_openai_error(missing, 404, param="response_id", code="not_found")
        assert "resp_missing" in error["message"]


def test_cancel_stops_a_background_run_and_keeps_its_partial_output(
    slow_server: Server, sdk: openai.OpenAI
) -> None:
    created = sdk.responses.create(model="cancel-bg", input="crawl along", background=True)
    poll(lambda: len(sdk.responses.retrieve(created.id).output_text) > 0)

    raw = sdk.responses.with_raw_response.cancel(created.id)
    cancelled = raw.parse()
    assert cancelled.id == created.id and cancelled.status == "cancelled"
    text = cancelled.output_text
    assert text and CRAWL_TEXT.startswith(text) and len(text) < len(CRAWL_TEXT)
    assert cancelled.output[0].status == "incomplete"  # cut short
    validate_response(raw.http_response.json())
    assert_stops_generating(slow_server, "cancel-bg")

    stored = sdk.responses.retrieve(created.id)
    assert stored.status == "cancelled" and stored.output_text == text
    # Cancelling what has already ended changes nothing.
    assert sdk.responses.cancel(created.id).model_dump() == stored.model_dump()
    # The stored event log ends the stream properly, too.
    replayed = stream_raw(
        slow_server.base_url, {}, method="GET", path=f"/v1/responses/{created.id}?stream=true"
    )
    assert replayed.events[-1]["response"]["status"] == "cancelled"
    assert text_of(replayed.events) == text


def test_cancel_is_only_for_background_responses(sdk: openai.OpenAI) -> None:
    foreground = sdk.responses.create(model="slow", input="quick")
    with pytest.raises(openai.BadRequestError):
        sdk.responses.cancel(foreground.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.cancel("resp_does_not_exist")


def test_a_foreground_client_that_leaves_cancels_the_run(slow_server: Server, sdk: openai.OpenAI) -> None:
    body = {"model": "cancel-fg", "input": "crawl along", "stream": True}
    with (
        httpx.Client(base_url=slow_server.base_url, timeout=30.0) as http,
        http.stream("POST", "/v1/responses", json=body) as response,
    ):
        seen = read_until(response, lambda events: deltas(events) >= 3)
    response_id = seen[0]["response"]["id"]

    stored = poll(lambda: (r := sdk.responses.retrieve(response_id)).status != "in_progress" and r)
    assert stored.status == "cancelled"
    assert stored.incomplete_details is not None and stored.incomplete_details.reason == "client_disconnected"
    text = stored.output_text
    assert text.startswith(text_of(seen)) and CRAWL_TEXT.startswith(text) and len(text) < len(CRAWL_TEXT)
    validate_response(sdk.responses.with_raw_response.retrieve(response_id).http_response.json())
    assert_stops_generating(slow_server, "cancel-fg")
    assert metric(slow_server, "sluicegate_generations_cancelled_total", "cancel-fg") >= 1


def test_heartbeats_fill_a_slow_first_token(slow_server: Server) -> None:
    raw = stream_raw(slow_server.base_url, {"model": "slow", "input": "you are late", "stream": True})
    kinds = ["heartbeat" if f.is_heartbeat else "done" if f.is_done else f.event for f in raw.frames]
    first_item = kinds.index("response.output_item.added")
    assert kinds[:2] == ["response.created", "response.in_progress"]
    # 1.5 s of silence with a 0.2 s heartbeat: several beats before the first item.
    assert kinds[2:first_item].count("heartbeat") >= 3, kinds
    assert kinds[-1] == "done" and kinds[-2] == "response.completed"
    assert raw.events[-1]["response"]["output"][0]["content"][0]["text"] == LATE_ANSWER


def test_request_timeout_fails_the_stream(deadline_server: Server) -> None:
    raw = stream_raw(deadline_server.base_url, {"model": "slow", "input": "crawl along", "stream": True})
    assert raw.frames[-1].is_done
    last = raw.events[-1]
    assert last["type"] == "response.failed"
    response = last["response"]
    assert response["status"] == "failed"
    assert response["error"]["code"] == "request_timeout"
    assert "request_timeout_seconds" in response["error"]["message"]
    partial = text_of(raw.events)
    assert partial and CRAWL_TEXT.startswith(partial) and len(partial) < len(CRAWL_TEXT)
    for event in raw.events:
        validate_event(event)
    stored = httpx.get(f"{deadline_server.base_url}/v1/responses/{response['id']}", timeout=10.0).json()
    assert stored["status"] == "failed" and stored["error"]["code"] == "request_timeout"


def test_request_timeout_without_streaming_is_an_error_response(deadline_server: Server) -> None:
    reply = httpx.post(
        f"{deadline_server.base_url}/v1/responses",
        json={"model": "slow", "input": "crawl along"},
        timeout=30.0,
    )
    assert_openai_error(reply, 504, param=None, code="request_timeout", type="timeout_error")
    stored = httpx.get(
        f"{deadline_server.base_url}/v1/responses/{reply.headers['x-request-id']}", timeout=10.0
    )
    assert stored.json()["status"] == "failed"


def test_a_non_streaming_client_that_leaves_cancels_the_run(slow_server: Server) -> None:
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{slow_server.base_url}/v1/responses",
            json={"model": "cancel-nonstream", "input": "crawl along"},
            timeout=httpx.Timeout(30.0, read=1.0),
        )
    assert_stops_generating(slow_server, "cancel-nonstream")
    text = httpx.get(f"{slow_server.base_url}/metrics", timeout=10.0).text
    assert 'sluicegate_generations_cancelled_total{model="cancel-nonstream"} 1' in text


def test_deleting_a_running_background_response_stops_it(slow_server: Server, sdk: openai.OpenAI) -> None:
    created = sdk.responses.create(model="delete-bg", input="crawl along", background=True)
    poll(lambda: len(sdk.responses.retrieve(created.id).output_text) > 0)
    assert sdk.responses.delete(created.id) is None
    assert_stops_generating(slow_server, "delete-bg")
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(created.id)


def test_continuing_a_response_still_in_progress_is_refused(sdk: openai.OpenAI) -> None:
    created = sdk.responses.create(model="slow", input="crawl along", background=True)
    try:
        with pytest.raises(openai.BadRequestError) as caught:
            sdk.responses.create(model="slow", input="next", previous_response_id=created.id)
        assert caught.value.code == "previous_response_in_progress"
        assert created.id in caught.value.message
    finally:
        sdk.responses.cancel(created.id)


def test_stored_state_survives_a_restart(tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path_factory.mktemp("responses-restart")
    models = {"slow": "responses_slow.yaml"}
    with (
        running_server(folder, models=models) as first,
        openai.OpenAI(base_url=first.api_url, api_key="unused", max_retries=0, timeout=30.0) as sdk,
    ):
        done = sdk.responses.create(model="slow", input="stroll please", background=True)
        poll(lambda: sdk.responses.retrieve(done.id).status == "completed")
        running = sdk.responses.create(model="slow", input="crawl along", background=True)
        poll(lambda: len(sdk.responses.retrieve(running.id).output_text) > 0)
    # Terminated with a run in flight: the server stores it as cancelled on the way out.
    with (
        running_server(folder, models=models) as second,
        openai.OpenAI(base_url=second.api_url, api_key="unused", max_retries=0, timeout=30.0) as sdk,
    ):
        assert sdk.responses.retrieve(done.id).output_text == STROLL_TEXT
        interrupted = sdk.responses.retrieve(running.id)
        assert interrupted.status == "cancelled" and CRAWL_TEXT.startswith(interrupted.output_text)
        assert interrupted.incomplete_details is not None
        assert interrupted.incomplete_details.reason == "server_shutdown"
        follow = sdk.responses.create(model="slow", input="quick", previous_response_id=done.id)
        assert follow.status == "completed"
        replayed = stream_raw(second.base_url, {}, method="GET", path=f"/v1/responses/{done.id}?stream=true")
        assert text_of(replayed.events) == STROLL_TEXT


def test_expired_responses_are_gone(tmp_path_factory: pytest.TempPathFactory) -> None:
    retention_days = 0.00004  # about 3.5 s
    folder = tmp_path_factory.mktemp("responses-retention")
    with (
        running_server(
            folder, responses={"retention_days": retention_days}, models={"slow": "responses_slow.yaml"}
        ) as s,
        openai.OpenAI(base_url=s.api_url, api_key="unused", max_retries=0, timeout=30.0) as sdk,
    ):
        created = sdk.responses.create(model="slow", input="quick")
        assert sdk.responses.retrieve(created.id).status == "completed"

        def expired() -> bool:
            try:
                sdk.responses.retrieve(created.id)
            except openai.NotFoundError:
                return True
            return False

        poll(expired, timeout=30, interval=0.1)
        with pytest.raises(openai.NotFoundError) as caught:
            sdk.responses.create(model="slow", input="more", previous_response_id=created.id)
        assert created.id in caught.value.message and caught.value.code == "not_found"
