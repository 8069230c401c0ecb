"""engines/downloads.py: which file a reference and quantization pick, and jobs against a fake Hub."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fake_hub import FakeHub

from sluicegate.engines.downloads import (
    DownloadError,
    DownloadJob,
    Downloads,
    Target,
    fetch,
    parse_model_ref,
    pick_file,
    pick_projector,
    quantization_of,
    resolve,
)

LIMIT = 20.0  # seconds: generous, so a loaded machine never fails a test by being slow
REPO = "acme/Tiny-GGUF"
Q4 = b"GGUF" + bytes(range(256)) * 40
Q8 = b"GGUF" + bytes(range(256)) * 80
FILES = {
    "tiny-Q4_K_M.gguf": Q4,
    "tiny-Q8_0.gguf": Q8,
    "mmproj-tiny-f16.gguf": b"GGUF projector",
    "README.md": b"# Tiny\n",
}


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    fake = FakeHub()
    fake.add(REPO, FILES)
    fake.add("acme/solo-GGUF", {"solo.Q5_K_S.gguf": Q4})
    fake.add("acme/no-gguf", {"model.safetensors": b"weights"})
    # A hostile Hub: names that leave the repository's folder (issue 47).
    fake.add("evil/up", {"../up-Q4_K_M.gguf": Q4})
    fake.add("evil/deep", {"a/../../../deep-Q4_K_M.gguf": Q4})
    fake.add("evil/absolute", {"/tmp/absolute-Q4_K_M.gguf": Q4})
    fake.add("evil/mixed", {"../mixed-Q8_0.gguf": Q8, "mixed-Q4_K_M.gguf": Q4, "/abs/mixed-F16.gguf": Q4})
    with fake.running():
        yield fake


async def until(check: Callable[[], bool], what: str) -> None:
    async with asyncio.timeout(LIMIT):
        while not check():
            await asyncio.sleep(0.01)


# --- references and file choice ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("acme/Tiny-GGUF", ("acme/Tiny-GGUF", None, None)),
        (" acme/Tiny-GGUF/ ", ("acme/Tiny-GGUF", None, None)),
        ("https://huggingface.co/acme/Tiny-GGUF", ("acme/Tiny-GGUF", None, None)),
        ("https://hf.co/acme/Tiny-GGUF/tree/dev", ("acme/Tiny-GGUF", "dev", None)),
        (
            "https://huggingface.co/acme/Tiny-GGUF/blob/main/tiny-Q8_0.gguf",
            ("acme/Tiny-GGUF", "main", "tiny-Q8_0.gguf"),
        ),
        (
            "https://huggingface.co/acme/Tiny-GGUF/resolve/abc123/q/tiny-Q8_0.gguf?download=true",
            ("acme/Tiny-GGUF", "abc123", "q/tiny-Q8_0.gguf"),
        ),
    ],
)
def test_model_references(ref: str, expected: tuple[str, str | None, str | None]) -> None:
    assert parse_model_ref(ref) == expected


@pytest.mark.parametrize(
    "ref", ["tiny", "https://example.com/acme/Tiny-GGUF", "acme/Tiny-GGUF/extra", "ftp://huggingface.co/a/b"]
)
def test_bad_model_references(ref: str) -> None:
    with pytest.raises(DownloadError):
        parse_model_ref(ref)


@pytest.mark.parametrize(
    ("name", "quant"),
    [
        ("tiny-Q4_K_M.gguf", "Q4_K_M"),
        ("Llama-3.2-1B-Instruct-IQ3_XXS.gguf", "IQ3_XXS"),
        ("qwen2.5-0.5b-instruct-q8_0.gguf", "Q8_0"),
        ("model.BF16.gguf", "BF16"),
        ("sub/model-f16.gguf", "F16"),
        ("solo.Q5_K_S.gguf", "Q5_K_S"),
        ("model.gguf", None),
    ],
)
def test_quantization_is_read_from_the_file_name(name: str, quant: str | None) -> None:
    assert quantization_of(name) == quant


def test_pick_file() -> None:
    sizes: dict[str, int | None] = {name: len(data) for name, data in FILES.items()}
    assert pick_file(REPO, sizes, "Q8_0") == "tiny-Q8_0.gguf"
    assert pick_file(REPO, sizes, "q4_k_m") == "tiny-Q4_K_M.gguf"  # case does not matter
    assert pick_file(REPO, {"only.gguf": 1, "mmproj.gguf": 1}, None) == "only.gguf"
    with pytest.raises(DownloadError, match=r"2 GGUF files; choose one with `quantization`") as many:
        pick_file(REPO, sizes, None)
    assert "Q4_K_M (tiny-Q4_K_M.gguf)" in str(many.value) and "Q8_0 (tiny-Q8_0.gguf)" in str(many.value)
    assert "mmproj" not in str(many.value)  # a projector is not a model to choose
    with pytest.raises(DownloadError, match=r"no Q2_K GGUF file; available: Q4_K_M"):
        pick_file(REPO, sizes, "Q2_K")
    with pytest.raises(DownloadError, match=r"has no \.gguf files"):
        pick_file(REPO, {"model.safetensors": 1}, None)


# --- the Hub ---------------------------------------------------------------------------------


def test_resolve_and_fetch_put_the_file_in_the_models_dir(hub: FakeHub, tmp_path: Path) -> None:
    target = resolve(REPO, "Q8_0", tmp_path, hub.url)
    projector = FILES["mmproj-tiny-f16.gguf"]
    assert target == Target(
        REPO,
        hub.repos[REPO].sha,
        "tiny-Q8_0.gguf",
        len(Q8),
        tmp_path / REPO,
        "mmproj-tiny-f16.gguf",
        len(projector),
    )
    path = fetch(target, endpoint=hub.url)
    assert path == tmp_path / "acme" / "Tiny-GGUF" / "tiny-Q8_0.gguf"
    assert path.read_bytes() == Q8
    assert (path.parent / "mmproj-tiny-f16.gguf").read_bytes() == projector  # the projector came along
    solo = resolve("acme/solo-GGUF", None, tmp_path, hub.url)
    assert solo.projector is None and solo.files() == [("solo.Q5_K_S.gguf", len(Q4))]
    assert not list(path.parent.glob("*.incomplete"))


def test_resolve_takes_the_file_a_url_names(hub: FakeHub, tmp_path: Path) -> None:
    url = f"https://huggingface.co/{REPO}/blob/main/tiny-Q4_K_M.gguf"
    assert resolve(url, None, tmp_path, hub.url).filename == "tiny-Q4_K_M.gguf"
    with pytest.raises(DownloadError, match="not a Q8_0 file"):
        resolve(url, "Q8_0", tmp_path, hub.url)
    with pytest.raises(DownloadError, match=r"has no file 'nope\.gguf'"):
        resolve(f"https://huggingface.co/{REPO}/blob/main/nope.gguf", None, tmp_path, hub.url)


async def test_a_job_downloads_and_reports_progress(hub: FakeHub, tmp_path: Path) -> None:
    finished: list[Path] = []
    downloads = Downloads(tmp_path, hub.url, on_downloaded=finished.append)
    hub.repos[REPO].gate.clear()  # the fake Hub holds back the second half of the file
    job = await downloads.start(REPO, "Q4_K_M")
    assert isinstance(job, DownloadJob) and job.job_id.startswith("job_")
    body = job.body()
    assert body["status"] == "downloading"
    total = len(Q4) + len(FILES["mmproj-tiny-f16.gguf"])  # the model and its projector
    assert body["total_size_bytes"] == total and body["projector"] == "mmproj-tiny-f16.gguf"
    assert body["started_at"].endswith("Z") and "completed_at" not in body
    assert body["path"] == str(tmp_path / REPO / "tiny-Q4_K_M.gguf")
    again = await downloads.start(REPO, "Q4_K_M")
    assert again is job  # one job per file while it runs
    hub.repos[REPO].gate.set()
    await until(lambda: job.status != "downloading", "the job ends")
    body = job.body()
    assert body["status"] == "completed", body
    assert body["downloaded_bytes"] == body["total_size_bytes"] == total
    assert body["completed_at"] >= body["started_at"]
    assert (tmp_path / REPO / "tiny-Q4_K_M.gguf").read_bytes() == Q4
    assert downloads.get(job.job_id) is job
    path = tmp_path / REPO / "tiny-Q4_K_M.gguf"
    await until(lambda: finished == [path], "the server hears of the new file, on its loop")

    present = await downloads.start(REPO, "Q4_K_M")
    assert isinstance(present, Target)  # already there: no job, no second transfer
    assert finished == [path, path]  # and the server is told again (served already: no-op)
    assert hub.downloads_of(REPO, "tiny-Q4_K_M.gguf") == 1
    assert hub.downloads_of(REPO, "mmproj-tiny-f16.gguf") == 1


async def test_an_unknown_repo_is_a_failed_job_with_the_reason(hub: FakeHub, tmp_path: Path) -> None:
    job = await Downloads(tmp_path, hub.url).start("acme/missing", None)
    assert isinstance(job, DownloadJob)
    assert job.status == "failed"
    assert job.error == "Repository 'acme/missing' was not found on the Hub (or it is private or gated)."
    assert "completed_at" in job.body() and job.body()["error"] == job.error


async def test_an_unreachable_hub_is_a_failed_job(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    job = await Downloads(tmp_path, url).start(REPO, None)
    assert isinstance(job, DownloadJob) and job.status == "failed"
    assert job.error is not None and job.error.startswith(f"Could not download '{REPO}' from {url}")


async def test_wrong_requests_raise_download_error(hub: FakeHub, tmp_path: Path) -> None:
    downloads = Downloads(tmp_path, hub.url)
    with pytest.raises(DownloadError, match="choose one"):
        await downloads.start(REPO, None)
    with pytest.raises(DownloadError, match=r"no \.gguf files"):
        await downloads.start("acme/no-gguf", None)
    with pytest.raises(DownloadError, match="not a valid repository id"):
        await downloads.start("acme/bad..name", None)
    assert downloads.jobs == {}


async def test_closing_stops_a_transfer_and_leaves_no_file(hub: FakeHub, tmp_path: Path) -> None:
    downloads = Downloads(tmp_path, hub.url)
    hub.repos["acme/solo-GGUF"].gate.clear()
    job = await downloads.start("acme/solo-GGUF", None)
    assert isinstance(job, DownloadJob)
    downloads.close()
    hub.repos["acme/solo-GGUF"].gate.set()
    await until(lambda: job.status != "downloading", "the job ends")
    assert job.status == "failed" and job.error is not None and "shutting down" in job.error
    assert not (tmp_path / "acme" / "solo-GGUF" / "solo.Q5_K_S.gguf").exists()


def test_pick_projector() -> None:
    files: dict[str, int | None] = {
        "m-Q4_K_M.gguf": 1,
        "mmproj-m-f32.gguf": 1,
        "mmproj-m-f16.gguf": 1,
        "mmproj-m-BF16.gguf": 1,
        "sub/mmproj-other-f16.gguf": 1,
    }
    assert pick_projector(files, "m-Q4_K_M.gguf") == "mmproj-m-f16.gguf"
    assert pick_projector({"mmproj-m-f32.gguf": 1, "mmproj-m-BF16.gguf": 1}, "m.gguf") == "mmproj-m-BF16.gguf"
    assert pick_projector(files, "sub/m-Q8_0.gguf") == "sub/mmproj-other-f16.gguf"  # the model's folder
    assert pick_projector({"m.gguf": 1}, "m.gguf") is None


# --- a hostile Hub: every path written is checked against the models directory ----------------

HOSTILE = ["evil/up", "evil/deep", "evil/absolute"]


@pytest.mark.parametrize("repo", HOSTILE)
async def test_a_file_name_that_leaves_the_models_dir_is_refused(
    hub: FakeHub, tmp_path: Path, repo: str
) -> None:
    models = tmp_path / "models"
    with pytest.raises(DownloadError, match="outside the models directory"):
        resolve(repo, None, models, hub.url)
    downloads = Downloads(models, hub.url)
    with pytest.raises(DownloadError, match="outside the models directory"):
        await downloads.start(repo, "Q4_K_M")
    assert downloads.jobs == {}  # no job whose status names a path outside
    assert await downloads.options(repo) == []  # and none offered
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


async def test_the_options_of_a_repository_are_only_its_safe_files(hub: FakeHub, tmp_path: Path) -> None:
    downloads = Downloads(tmp_path / "models", hub.url)
    assert [f.filename for f in await downloads.options("evil/mixed")] == ["mixed-Q4_K_M.gguf"]
    assert resolve("evil/mixed", "Q4_K_M", tmp_path / "models", hub.url).filename == "mixed-Q4_K_M.gguf"
    with pytest.raises(DownloadError, match="outside the models directory"):
        resolve("evil/mixed", "Q8_0", tmp_path / "models", hub.url)


@pytest.mark.parametrize("ref", ["../x", "acme/..", "./x", "https://huggingface.co/../x"])
def test_a_repository_id_that_leaves_the_models_dir_is_refused(ref: str) -> None:
    with pytest.raises(DownloadError, match="not a Hub repository"):
        parse_model_ref(ref)
