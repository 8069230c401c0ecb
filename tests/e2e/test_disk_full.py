"""The store's disk fills up: every dialect, streaming and not, background runs too; then the
disk gets room again and the server restarts. Nothing the server announced as done (a
completed response, an LM Studio `response_id`, an accepted background run) may be missing
afterwards, no answer is a 500, and the store file is intact.

The store lives on a 2 MiB tmpfs (CI runs as root); a filler file takes every byte SQLite could
grow into. Without the right to mount one, that test is skipped; its in-process twin runs
everywhere: the app's SQLite file may not grow (`PRAGMA max_page_count`, which fails writes
with SQLITE_FULL, "database or disk is full", exactly as a full disk does).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_support import Server, run_server, scripted, write_config

pytestmark = pytest.mark.e2e

TURNS = 3  # requests per dialect and mode while the disk is full


@contextlib.contextmanager
def small_filesystem(where: Path, size: str = "2m") -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(folder: Path) -> Path:
    """Take every free byte of the filesystem `folder` is on."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 4096)
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0")
    finally:
        os.close(fd)
    return filler


def sse_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    events, name = [], ""
    for line in text.splitlines():
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: {"):
            data = json.loads(line[len("data: ") :])
            events.append((name or data.get("type", ""), data))
    return events


class Client:
    """Sends every dialect's requests; remembers every id the server said is stored."""

    def __init__(self, server: Server | Any) -> None:
        # A server process, or an in-process app's TestClient (an HTTP client of its own).
        self.http = (
            httpx.Client(base_url=server.base_url, timeout=60) if isinstance(server, Server) else server
        )
        self.announced: list[str] = []
        self.statuses: list[int] = []

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        response = self.http.post(path, json=body)
        self.statuses.append(response.status_code)
        assert response.status_code < 500 or response.status_code == 503, (path, response.text)
        if response.status_code == 503:
            assert "store" in response.text, response.text
        return response

    def every_dialect(self, word: str) -> None:
        text = f"hello {word}"
        for stream in (False, True):
            self.post(
                "/v1/chat/completions",
                {"model": "chat", "messages": [{"role": "user", "content": text}], "stream": stream},
            )
            body = {
                "model": "chat",
                "max_tokens": 64,
                "messages": [{"role": "user", "content": text}],
                "stream": stream,
            }
            self.post("/v1/messages", body)
            response = self.post("/v1/responses", {"model": "chat", "input": text, "stream": stream})
            if response.status_code == 200:
                if stream:
                    for name, data in sse_events(response.text):
                        if name == "response.completed":
                            self.announced.append(data["response"]["id"])
                else:
                    self.announced.append(response.json()["id"])
            response = self.post("/api/v1/chat", {"model": "chat", "input": text, "stream": stream})
            if response.status_code == 200:
                ends = (
                    [d for n, d in sse_events(response.text) if n == "chat.end"]
                    if stream
                    else [{"result": response.json()}]
                )
                for end in ends:
                    if end["result"].get("response_id"):
                        self.announced.append(end["result"]["response_id"])
        response = self.post("/v1/responses", {"model": "chat", "input": text, "background": True})
        if response.status_code == 200:
            self.announced.append(response.json()["id"])


def test_a_full_disk_loses_nothing_announced(tmp_path: Path) -> None:
    with small_filesystem(tmp_path / "disk") as disk:
        config = write_config(tmp_path, {"data_dir": str(disk / "data")}, [scripted("chat", "chat.yaml")])
        with run_server(tmp_path / "run1", config) as server:
            client = Client(server)
            client.every_dialect("before")
            before = list(client.announced)
            filler = fill(disk)
            for i in range(TURNS):
                client.every_dialect(f"full {i} {uuid.uuid4().hex * 20}")
            assert 503 in client.statuses, "the disk never filled up: the test proves nothing"
            filler.unlink()
            client.every_dialect("after")  # room again: the store works without a restart
            assert client.statuses[-1] == 200
            for response_id in client.announced:
                got = client.http.get(f"/v1/responses/{response_id}")
                assert got.status_code == 200, (response_id, got.text)
        with run_server(tmp_path / "run2", config) as server:
            http = httpx.Client(base_url=server.base_url, timeout=60)
            for response_id in client.announced:
                got = http.get(f"/v1/responses/{response_id}")
                assert got.status_code == 200, (response_id, got.text)
                assert got.json()["status"] in ("completed", "failed", "incomplete", "cancelled"), got.json()
            assert set(before) <= set(client.announced)
        db = sqlite3.connect(disk / "data" / "sluicegate.sqlite3")
        try:
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            db.close()


def test_a_store_that_cannot_grow_loses_nothing_announced(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from sluicegate.app.factory import create_app
    from sluicegate.config import load_settings

    config = write_config(tmp_path, {"data_dir": str(tmp_path / "data")}, [scripted("chat", "chat.yaml")])

    def room(client: TestClient, pages: int | None) -> None:
        store = client.app.state.sluicegate.store  # type: ignore[attr-defined]

        def run() -> None:
            (count,) = store.db.execute("PRAGMA page_count").fetchone()
            store.db.execute(f"PRAGMA max_page_count={count + pages if pages is not None else 1073741823}")

        client.portal.call(store._call, run)  # type: ignore[union-attr]

    with TestClient(create_app(load_settings(config, env={}))) as http:
        client = Client(http)
        client.every_dialect("before")
        room(http, 0)
        for i in range(TURNS):
            client.every_dialect(f"full {i} {uuid.uuid4().hex * 20}")
        assert 503 in client.statuses, "the store never filled up: the test proves nothing"
        room(http, None)
        client.every_dialect("after")
        assert client.statuses[-1] == 200
    with TestClient(create_app(load_settings(config, env={}))) as http:
        for response_id in client.announced:
            got = http.get(f"/v1/responses/{response_id}")
            assert got.status_code == 200, (response_id, got.text)
