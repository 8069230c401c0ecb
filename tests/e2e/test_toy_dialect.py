"""A dialect declares itself once: a toy dialect package, found through its entry point like a
third party's, served by a real server with no edit anywhere in `src/` — its routing, its error
shape (a bad request, an unknown route, a wrong method, a missing API key, an unknown model),
a streamed and a collected turn against the scripted engine, and its metrics label."""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import orjson
import pytest
from e2e_support import DEFAULT_REPLY, Server, run_server, scripted, write_config

from toy_dialect.installed import TESTS, install

pytestmark = pytest.mark.e2e
KEY = {"Authorization": "Bearer toy-key"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("toy")
    config = write_config(folder, {"api_keys": ["toy-key"]}, [scripted("chat", "chat.yaml")])
    site = install(folder / "site")
    path = os.pathsep.join(p for p in (str(site), str(TESTS), os.environ.get("PYTHONPATH", "")) if p)
    with run_server(folder, config, env={"PYTHONPATH": path}) as running:
        yield running


def test_its_other_route_is_served(server: Server) -> None:
    response = httpx.get(server.base_url + "/toy/ping", headers=KEY)
    assert response.status_code == 200 and response.json() == {"pong": True}


def test_a_collected_turn(server: Server) -> None:
    response = httpx.post(server.base_url + "/toy/say", json={"model": "chat", "say": "hi"}, headers=KEY)
    assert response.status_code == 200, response.text
    assert response.json() == {"said": DEFAULT_REPLY}


def test_a_streamed_turn_in_its_own_framing(server: Server) -> None:
    body = {"model": "chat", "say": "hi", "stream": True}
    response = httpx.post(server.base_url + "/toy/say", json=body, headers=KEY, timeout=30)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/x-ndjson")  # its declared transport
    lines = [orjson.loads(line) for line in response.text.splitlines()]
    assert len(lines) > 2 and lines[-1] == {"done": "stop"}
    assert "".join(line["bit"] for line in lines[:-1]) == DEFAULT_REPLY


def test_its_hooks_answer_without_a_turn(server: Server) -> None:
    response = httpx.post(server.base_url + "/toy/say", json={"hush": True}, headers=KEY)
    assert response.status_code == 200 and response.json() == {"hushed": True}


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "error"),
    [
        (
            "POST",
            "/toy/say",
            {"model": "chat"},
            400,
            {"oops": "`say` must be a non-empty string", "what": "say"},
        ),
        ("POST", "/toy/say", {"model": "nope", "say": "hi"}, 404, None),
        ("GET", "/toy/say", None, 405, None),
        ("GET", "/toy/nothing-here", None, 404, None),
    ],
)
def test_errors_in_its_own_shape(
    server: Server, method: str, path: str, body: object, status: int, error: object
) -> None:
    response = httpx.request(method, server.base_url + path, json=body, headers=KEY)
    assert response.status_code == status
    assert set(response.json()) == {"oops", "what"}
    if error is not None:
        assert response.json() == error


def test_a_missing_key_is_refused_in_its_shape(server: Server) -> None:
    response = httpx.post(server.base_url + "/toy/say", json={"model": "chat", "say": "hi"})
    assert response.status_code == 401 and set(response.json()) == {"oops", "what"}


def test_its_requests_carry_its_metrics_label(server: Server) -> None:
    httpx.post(server.base_url + "/toy/say", json={"model": "chat", "say": "hi"}, headers=KEY)
    metrics = httpx.get(server.base_url + "/metrics", headers=KEY).text
    assert 'dialect="toy"' in metrics
