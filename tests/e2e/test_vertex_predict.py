"""Vertex AI's prediction protocol (app/vertex.py), on a server started as Vertex AI starts a
custom container (`AIP_MODE=PREDICTION`): each instance answered by its own route, in order."""

from __future__ import annotations

import httpx
import pytest
from conftest import StartServer
from e2e_support import Server, scripted

pytestmark = pytest.mark.e2e

KEY = "sk-vertex"
ASK = {"max_tokens": 8, "messages": [{"role": "user", "content": "hello"}]}


@pytest.fixture(scope="module")
def server(start_server: StartServer) -> Server:
    return start_server(
        server={"api_keys": [KEY]},
        models=[scripted("chat", "chat.yaml")],
        env={"AIP_MODE": "PREDICTION", "AIP_HEALTH_ROUTE": "/vertex-health"},
    )


def predict(server: Server, body: object, key: str = KEY) -> httpx.Response:
    return httpx.post(
        server.base_url + "/predict", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60.0
    )


def test_instances_are_answered_in_order_by_their_routes(server: Server) -> None:
    instances = [
        {"@requestFormat": "chatCompletions", "model": "chat", **ASK},
        {"@requestFormat": "/v1/chat/completions", "model": "chat", "stream": True, **ASK},
        {"@requestFormat": "nothingLikeThis"},
        {"model": "chat"},
        {"@requestFormat": "chatCompletions", "model": "missing", **ASK},
    ]
    response = predict(server, {"instances": instances})
    assert response.status_code == 200, response.text
    first, streamed, unknown, unnamed, missing = response.json()["predictions"]
    for answer in (first, streamed):  # a stream asked for is answered whole
        assert answer["object"] == "chat.completion"
        assert answer["choices"][0]["message"]["role"] == "assistant"
        assert answer["choices"][0]["message"]["content"]
    assert "no handler registered" in unknown["error"]["message"]
    assert "@requestFormat" in unnamed["error"]["message"]
    assert missing["error"]["code"] == "model_not_found"  # the route's own error body


def test_the_key_is_checked_and_bad_bodies_are_400(server: Server) -> None:
    assert predict(server, {"instances": []}, key="wrong").status_code == 401
    assert predict(server, {"instances": "no"}).status_code == 400
    assert predict(server, {"instances": [{}] * 129}).status_code == 400
    assert predict(server, {"instances": []}).json() == {"predictions": []}


def test_the_health_route_vertex_names(server: Server) -> None:
    response = httpx.get(server.base_url + "/vertex-health", headers={"Authorization": f"Bearer {KEY}"})
    assert response.status_code == 200


def test_without_vertex_there_is_no_predict_route(start_server: StartServer) -> None:
    plain = start_server(models=[scripted("chat", "chat.yaml")])
    assert httpx.post(plain.base_url + "/predict", json={"instances": []}).status_code == 404
