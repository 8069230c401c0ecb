"""Model downloads through the LM Studio API, against a fake Hugging Face Hub (`HF_ENDPOINT`).

`POST /api/v1/models/download` starts a job (or says `already_downloaded`), and
`GET /api/v1/models/download/status/{job_id}` reports it until it is completed or failed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_support import Server, poll, run_server, scripted, write_config
from fake_hub import FakeHub
from lmstudio_support import assert_lmstudio_error

pytestmark = pytest.mark.e2e

REPO = "acme/Tiny-GGUF"
Q4 = b"GGUF" + bytes(range(256)) * 64
Q8 = b"GGUF" + bytes(range(256)) * 128
DEADLINE = 30.0
Json = dict[str, Any]


@pytest.fixture(scope="module")
def hub() -> Iterator[FakeHub]:
    fake = FakeHub()
    fake.add(REPO, {"tiny-Q4_K_M.gguf": Q4, "tiny-Q8_0.gguf": Q8, "README.md": b"# Tiny\n"})
    fake.add("acme/Slow-GGUF", {"slow-Q4_K_M.gguf": Q4})
    with fake.running():
        yield fake


@pytest.fixture(scope="module")
def server(hub: FakeHub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("downloads")
    config = write_config(folder, {"models_dir": str(folder / "models")}, [scripted("chat", "chat.yaml")])
    with run_server(folder, config, env=hub.env(folder)) as running:
        yield running


@pytest.fixture
def lms(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=30.0) as client:
        yield client


def models_dir(server: Server) -> Path:
    return server.folder / "models"


def status_of(lms: httpx.Client, job_id: str) -> Json:
    response = lms.get(f"/api/v1/models/download/status/{job_id}")
    assert response.status_code == 200, response.text
    body: Json = response.json()
    assert body["job_id"] == job_id
    return body


def finished(lms: httpx.Client, job_id: str) -> Json:
    body = poll(lambda: (s := status_of(lms, job_id))["status"] != "downloading" and s, DEADLINE, 0.05)
    assert body, f"job {job_id} still downloading after {DEADLINE}s"
    return body


def test_a_download_runs_as_a_job_until_the_file_is_in_the_models_dir(
    lms: httpx.Client, hub: FakeHub, server: Server
) -> None:
    repo = hub.repos["acme/Slow-GGUF"]
    repo.gate.clear()  # the Hub holds back half the file: the job is seen mid-download
    try:
        started = lms.post("/api/v1/models/download", json={"model": "acme/Slow-GGUF"})
        assert started.status_code == 200, started.text
        job = started.json()
        assert job["status"] == "downloading" and job["job_id"].startswith("job_")
        assert job["total_size_bytes"] == len(Q4)
        running = status_of(lms, job["job_id"])
        assert running["status"] == "downloading"
        assert running["total_size_bytes"] == len(Q4)
        assert 0 <= running["downloaded_bytes"] < len(Q4)
        assert isinstance(running["bytes_per_second"], int)
        assert running["started_at"].endswith("Z") and "completed_at" not in running
    finally:
        repo.gate.set()
    done = finished(lms, job["job_id"])
    assert done["status"] == "completed", done
    assert done["downloaded_bytes"] == done["total_size_bytes"] == len(Q4)
    assert done["completed_at"] >= done["started_at"]
    path = models_dir(server) / "acme" / "Slow-GGUF" / "slow-Q4_K_M.gguf"
    assert done["path"] == str(path)
    assert path.read_bytes() == Q4

    again = lms.post("/api/v1/models/download", json={"model": "https://huggingface.co/acme/Slow-GGUF"})
    assert again.status_code == 200, again.text
    assert again.json()["status"] == "already_downloaded" and "job_id" not in again.json()
    assert hub.downloads_of("acme/Slow-GGUF", "slow-Q4_K_M.gguf") == 1


def test_quantization_picks_the_file(lms: httpx.Client, hub: FakeHub, server: Server) -> None:
    response = lms.post("/api/v1/models/download", json={"model": REPO})
    error = assert_lmstudio_error(response, 400, param="quantization", code="invalid_value")
    assert "Q4_K_M (tiny-Q4_K_M.gguf)" in error["message"] and "Q8_0 (tiny-Q8_0.gguf)" in error["message"]
    response = lms.post("/api/v1/models/download", json={"model": REPO, "quantization": "Q2_K"})
    assert_lmstudio_error(response, 400, param="quantization", code="invalid_value", mentions=("Q2_K",))

    response = lms.post("/api/v1/models/download", json={"model": REPO, "quantization": "Q8_0"})
    assert response.status_code == 200, response.text
    done = finished(lms, response.json()["job_id"])
    assert done["status"] == "completed" and done["file"] == "tiny-Q8_0.gguf"
    folder = models_dir(server) / "acme" / "Tiny-GGUF"
    assert (folder / "tiny-Q8_0.gguf").read_bytes() == Q8
    assert not (folder / "tiny-Q4_K_M.gguf").exists()


def test_an_unknown_repo_is_a_failed_job_with_a_clear_error(lms: httpx.Client) -> None:
    response = lms.post("/api/v1/models/download", json={"model": "acme/does-not-exist"})
    assert response.status_code == 200, response.text
    job = response.json()
    assert job["status"] == "failed"
    status = status_of(lms, job["job_id"])
    assert status["status"] == "failed" and "completed_at" in status
    assert status["error"] == (
        "Repository 'acme/does-not-exist' was not found on the Hub (or it is private or gated)."
    )


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({}, "model", "missing_required_parameter"),
        ({"model": REPO, "quantization": "Q8_0", "force": True}, "force", "unrecognized_keys"),
        ({"model": 5}, "model", None),
        ({"model": "not-a-repo"}, "model", "invalid_value"),
        ({"model": "https://example.com/acme/Tiny-GGUF"}, "model", "invalid_value"),
    ],
)
def test_bad_download_bodies_are_400s(lms: httpx.Client, body: Json, param: str, code: str | None) -> None:
    assert_lmstudio_error(lms.post("/api/v1/models/download", json=body), 400, param=param, code=code)


def test_an_unknown_job_is_job_not_found(lms: httpx.Client) -> None:
    response = lms.get("/api/v1/models/download/status/job_493c7c9ded")
    assert_lmstudio_error(
        response,
        404,
        type="job_not_found",
        code="job_not_found",
        param="job_id",
        mentions=("job_493c7c9ded",),
    )
