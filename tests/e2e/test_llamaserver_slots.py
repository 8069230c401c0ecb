"""llama-server's slot actions on a real llama.cpp model (the tiny demo GGUF), through real HTTP
as llama.cpp's own tests/unit/test_slot_save.py drives them: `id_slot` pins a completion to a
slot; `POST /slots/{id}?action=save` writes its KV cache to a file in the slot save folder,
`restore` reads it into a slot (a completion with the same prompt then reuses it: `cache_n`),
`erase` empties it. File names that are not plain names are refused in llama-server's shape."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import StartServer
from e2e_support import Server

pytestmark = pytest.mark.e2e

PROMPT = "Once upon a time, in a land far away, there lived a"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("slots")


@pytest.fixture(scope="module")
def server(start_server: StartServer, tmp_path_factory: pytest.TempPathFactory, folder: Path) -> Server:
    from sluicegate.demo.model import make_demo_gguf

    gguf = str(make_demo_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", ends_replies=False))
    model = {"id": "tiny", "engine": "llamacpp", "path": gguf, "batch_size": 16, "context_length": 512}
    return start_server(server={"slot_save_path": str(folder)}, models=[{**model, "parallel": 2}])


def post(server: Server, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
    return httpx.post(server.base_url + path, json=body, timeout=120.0)


def complete(server: Server, slot: int, n_predict: int = 8) -> dict[str, Any]:
    body = {"prompt": PROMPT, "id_slot": slot, "n_predict": n_predict, "temperature": 0, "cache_prompt": True}
    response = post(server, "/completion", body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    assert answer["id_slot"] == slot
    return answer


def test_save_restore_erase(server: Server, folder: Path) -> None:
    post(server, "/slots/0?action=erase")
    post(server, "/slots/1?action=erase")
    first = complete(server, 1)
    full = first["timings"]["prompt_n"]
    assert first["timings"]["cache_n"] == 0 and full == first["tokens_evaluated"]

    saved = post(server, "/slots/1?action=save", {"filename": "slot1.bin"})
    assert saved.status_code == 200, saved.text
    body = saved.json()
    assert body["id_slot"] == 1 and body["filename"] == "slot1.bin" and "save_ms" in body["timings"]
    # The prompt and every output token decoded after it (the last one sampled is not decoded).
    assert body["n_saved"] == full + first["tokens_predicted"] - 1
    assert (folder / "slot1.bin").stat().st_size == body["n_written"] > 0

    restored = post(server, "/slots/0?action=restore", {"filename": "slot1.bin"})
    assert restored.status_code == 200, restored.text
    assert restored.json()["n_restored"] == body["n_saved"]
    assert restored.json()["n_read"] == body["n_written"]

    again = complete(server, 0)  # the restored cache serves the prompt: only its last token is decoded
    assert again["timings"]["cache_n"] == full - 1 and again["timings"]["prompt_n"] == 1
    assert again["content"] == first["content"]
    still = complete(server, 1)  # slot 1 was not touched by the restore into 0
    assert still["timings"]["cache_n"] == full - 1

    erased = post(server, "/slots/0?action=erase")
    assert erased.status_code == 200 and erased.json() == {"id_slot": 0, "n_erased": body["n_saved"]}
    cold = complete(server, 0)
    assert cold["timings"]["cache_n"] == 0 and cold["timings"]["prompt_n"] == full
    assert cold["content"] == first["content"]


def test_a_save_waits_for_its_slot_to_finish(server: Server) -> None:
    """A save asked while its slot decodes runs when the sequence ends (llama-server defers
    it), so it holds every token that sequence decoded, never a half-written stream."""
    post(server, "/slots/0?action=erase")
    body = {"prompt": PROMPT, "id_slot": 0, "n_predict": 300, "temperature": 0, "stream": True}
    result: dict[str, Any] = {}
    with httpx.stream("POST", server.base_url + "/completion", json=body, timeout=120.0) as stream:
        lines = stream.iter_lines()
        next(line for line in lines if line.startswith("data:"))  # the slot is decoding now

        def save() -> None:
            result["save"] = post(server, "/slots/0?action=save", {"filename": "busy.bin"})

        saver = threading.Thread(target=save)
        saver.start()
        final = [line for line in lines if line.startswith("data:")][-1]
        saver.join(timeout=120)
    answer = httpx.Response(200, content=final.removeprefix("data:").strip()).json()
    saved = result["save"]
    assert saved.status_code == 200, saved.text
    assert saved.json()["n_saved"] == answer["tokens_evaluated"] + answer["tokens_predicted"] - 1


@pytest.mark.parametrize(
    "name",
    ["../escape.bin", "ABSOLUTE", "a/b.bin", "..", ".", "", " x.bin", "a\\b", "x\x00y", "n" * 300],
)
def test_a_filename_that_is_not_a_plain_name_is_refused(server: Server, folder: Path, name: str) -> None:
    if name == "ABSOLUTE":  # an absolute path, in a folder of the test's own (were it written)
        name = str(folder.parent / "absolute.bin")
    for action in ("save", "restore"):
        response = post(server, f"/slots/0?action={action}", {"filename": name})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == 400 and error["type"] == "invalid_request_error"
        assert "filename" in error["message"].lower() or "filename" in response.text
    assert not (folder.parent / "escape.bin").exists() and not (folder.parent / "absolute.bin").exists()


@pytest.mark.parametrize(
    ("path", "body", "fragment"),
    [
        ("/slots/0?action=fly", {"filename": "x.bin"}, "action"),
        ("/slots/x?action=save", {"filename": "x.bin"}, "slot ID"),
        ("/slots/9?action=save", {"filename": "x.bin"}, "slot ID"),
        ("/slots/0?action=save", {}, "filename"),
        ("/slots/0?action=restore", {"filename": "missing.bin"}, "Unable to restore slot"),
        ("/completion", {"prompt": "x", "id_slot": 9, "n_predict": 2}, "slot ID"),
    ],
)
def test_bad_slot_requests_in_llama_servers_shape(
    server: Server, path: str, body: dict[str, Any], fragment: str
) -> None:
    response = post(server, path, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == 400 and fragment in error["message"]


def test_a_corrupt_file_is_refused_and_the_slot_stays_usable(server: Server, folder: Path) -> None:
    (folder / "junk.bin").write_bytes(b"not a llama.cpp state file" * 10)
    response = post(server, "/slots/1?action=restore", {"filename": "junk.bin"})
    assert response.status_code == 400 and "Unable to restore slot" in response.json()["error"]["message"]
    after = complete(server, 1)
    assert after["timings"]["cache_n"] == 0  # what the failed load left was removed
