"""`/api/copy` names (issue 47): a 4 MB destination once made `/health`, `/api/tags`, `/metrics`
and every unknown-model 404 megabytes long; NUL and HTML were accepted; a case-only copy
(`SCRIPTED`) shadowed the model it differs from. Names follow Ollama's own rules
(`types/model/name.go`), copies are bounded, and a 404 names a bounded list of models."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from sluicegate.app.factory import create_app
from sluicegate.config import load_settings
from sluicegate.dialects.ollama.names import is_valid_name
from sluicegate.routes.ollama_models import MAX_COPIES


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    (tmp_path / "a.yaml").write_text('replies:\n  - content: "from scripted"\n')
    (tmp_path / "b.yaml").write_text('replies:\n  - content: "from other"\n')
    config = tmp_path / "sluicegate.toml"
    config.write_text(
        '[server]\ndata_dir = "data"\n\n'
        '[[models]]\nid = "scripted"\nengine = "scripted"\nscript = "a.yaml"\n\n'
        '[[models]]\nid = "other"\nengine = "scripted"\nscript = "b.yaml"\n'
    )
    with TestClient(create_app(load_settings(config, env={}))) as test_client:
        yield test_client


@pytest.mark.parametrize(
    "name",
    ["x" * 4_000_000, "a\x00b", "<script>alert(1)</script>", "a b", "-leading", ".hidden", "a/b/c/d",
     "m" * 81, "m:" + "t" * 81, "ns.dot/m", "é", "a:b:c", "", "a/", "/a", "a:"],
)  # fmt: skip
def test_names_outside_ollamas_rules_are_refused(client: TestClient, name: str) -> None:
    assert not is_valid_name(name)
    answer = client.post("/api/copy", json={"source": "scripted", "destination": name})
    assert answer.status_code == 400 and len(answer.content) < 1000, answer.text[:200]
    listed = {m["name"] for m in client.get("/api/tags").json()["models"]}
    assert listed == {"scripted:latest", "other:latest"}


@pytest.mark.parametrize(
    "name", ["mine", "my-model_2.1:q4", "_x", "ns/model:tag", "host.example:8080/ns/m:v1", "m" * 80]
)
def test_names_inside_ollamas_rules_are_copies(client: TestClient, name: str) -> None:
    assert is_valid_name(name)
    assert client.post("/api/copy", json={"source": "scripted", "destination": name}).status_code == 200


def test_a_case_only_copy_does_not_shadow_the_model(client: TestClient) -> None:
    answer = client.post("/api/copy", json={"source": "other", "destination": "SCRIPTED"})
    assert answer.status_code == 400 and "already exists" in answer.json()["error"]
    body = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "stream": False}
    assert client.post("/api/chat", json=body).json()["message"]["content"] == "from scripted"
    assert client.post("/api/chat", json={**body, "model": "Scripted"}).json()["message"]["content"] == (
        "from scripted"
    )


def test_copies_are_bounded_and_a_404_does_not_list_every_model(client: TestClient) -> None:
    for i in range(MAX_COPIES):
        assert (
            client.post("/api/copy", json={"source": "scripted", "destination": f"copy-{i}"}).status_code
            == 200
        )
    refused = client.post("/api/copy", json={"source": "scripted", "destination": "one-more"})
    assert refused.status_code == 400 and "copies" in refused.json()["error"]
    missing = client.post(
        "/v1/chat/completions", json={"model": "nope", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert missing.status_code == 404
    message = missing.json()["error"]["message"]
    assert "copy-0" in message and f"copy-{MAX_COPIES - 1}" not in message and len(message) < 2000
