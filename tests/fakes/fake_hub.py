"""A local stand-in for the Hugging Face Hub, speaking the wire format `huggingface_hub` uses.

Point `HF_ENDPOINT` at `FakeHub.url`. It serves what `HfApi.model_info` and `hf_hub_download`
call (read from huggingface_hub's `hf_api.py` and `file_download.py`):

- `GET /api/models/{repo}` and `/api/models/{repo}/revision/{rev}`: the repo's JSON, with
  `sha` and `siblings` (sizes and LFS info, as with `?blobs=true`);
- `HEAD`/`GET /{repo}/resolve/{rev}/{file}`: the file, with `ETag`, `X-Repo-Commit`,
  `Content-Length`, `Accept-Ranges` and `Range` requests (206);
- the Hub's errors: 404 with `X-Error-Code: RepoNotFound` / `RevisionNotFound` / `EntryNotFound`.

A repo can hold back the second half of every file body until its `gate` is set, so a test can
watch a download in progress without racing it.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+?)(?:/revision/(?P<rev>[^/]+))?$")


@dataclass
class FakeRepo:
    files: dict[str, bytes]
    sha: str = ""
    gate: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        if not self.sha:
            digest = hashlib.sha1(repr(sorted(self.files.items())).encode()).hexdigest()
            self.sha = digest  # a 40-hex commit id, as the Hub's are
        self.gate.set()  # open unless a test closes it

    def has_revision(self, rev: str | None) -> bool:
        return rev in (None, "main", self.sha)


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, FakeRepo] = {}
        self.requests: list[tuple[str, str]] = []  # (method, path), for assertions
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_GET(self) -> None:
                hub._handle(self, body=True)

            def do_HEAD(self) -> None:
                hub._handle(self, body=False)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def env(self, folder: Path) -> dict[str, str]:
        """Environment for a process that must reach this Hub only, with its HF cache in `folder`."""
        return {
            "HF_ENDPOINT": self.url,
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HOME": str(folder / "hf-home"),
            "HF_HUB_DISABLE_XET": "1",
        }

    def add(self, repo_id: str, files: dict[str, bytes]) -> FakeRepo:
        repo = self.repos[repo_id] = FakeRepo(files)
        return repo

    def downloads_of(self, repo_id: str, filename: str) -> int:
        return self.requests.count(("GET", f"/{repo_id}/resolve/{self.repos[repo_id].sha}/{filename}")) + (
            self.requests.count(("GET", f"/{repo_id}/resolve/main/{filename}"))
        )

    @contextmanager
    def running(self) -> Iterator[FakeHub]:
        thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        try:
            yield self
        finally:
            for repo in self.repos.values():
                repo.gate.set()
            self._server.shutdown()
            self._server.server_close()

    # --- wire ------------------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler, *, body: bool) -> None:
        path = unquote(urlsplit(handler.path).path)
        self.requests.append((handler.command, path))
        if (match := API.match(path)) is not None:
            self._model_info(handler, match["repo"], match["rev"], body)
        elif (match := RESOLVE.match(path)) is not None:
            self._resolve(handler, match["repo"], match["rev"], match["file"], body)
        else:
            self._error(handler, 404, None, "Not Found", body)

    def _model_info(self, handler: BaseHTTPRequestHandler, repo_id: str, rev: str | None, body: bool) -> None:
        repo = self.repos.get(repo_id)
        if repo is None:
            return self._error(handler, 404, "RepoNotFound", "Repository not found", body)
        if not repo.has_revision(rev):
            return self._error(handler, 404, "RevisionNotFound", f"Invalid rev id: {rev}", body)
        siblings = [
            {
                "rfilename": name,
                "blobId": hashlib.sha1(data).hexdigest(),
                "size": len(data),
                "lfs": {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134},
            }
            for name, data in repo.files.items()
        ]
        info = {
            "_id": repo.sha[:24],
            "id": repo_id,
            "modelId": repo_id,
            "author": repo_id.split("/")[0],
            "sha": repo.sha,
            "lastModified": "2026-01-01T00:00:00.000Z",
            "private": False,
            "gated": False,
            "disabled": False,
            "tags": ["gguf"],
            "library_name": "gguf",
            "siblings": siblings,
        }
        payload = json.dumps(info).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json; charset=utf-8")
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        if body:
            handler.wfile.write(payload)

    def _resolve(
        self, handler: BaseHTTPRequestHandler, repo_id: str, rev: str, name: str, body: bool
    ) -> None:
        repo = self.repos.get(repo_id)
        if repo is None:
            return self._error(handler, 404, "RepoNotFound", "Repository not found", body)
        if not repo.has_revision(rev):
            return self._error(handler, 404, "RevisionNotFound", f"Invalid rev id: {rev}", body)
        data = repo.files.get(name)
        if data is None:
            return self._error(handler, 404, "EntryNotFound", f"{name} does not exist on {rev}", body)
        start = 0
        if (ranged := re.fullmatch(r"bytes=(\d+)-", handler.headers.get("Range", ""))) is not None:
            start = min(int(ranged[1]), len(data))
        part = data[start:]
        handler.send_response(206 if start else 200)
        handler.send_header("Content-Type", "application/octet-stream")
        handler.send_header("Content-Length", str(len(part)))
        handler.send_header("Accept-Ranges", "bytes")
        if start:
            handler.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        handler.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        handler.send_header("X-Repo-Commit", repo.sha)
        handler.end_headers()
        if not body:
            return
        half = len(part) // 2
        try:
            handler.wfile.write(part[:half])
            handler.wfile.flush()
            repo.gate.wait()
            handler.wfile.write(part[half:])
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up

    def _error(
        self, handler: BaseHTTPRequestHandler, status: int, code: str | None, message: str, body: bool
    ) -> None:
        payload = json.dumps({"error": message}).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json; charset=utf-8")
        handler.send_header("Content-Length", str(len(payload)))
        if code is not None:
            handler.send_header("X-Error-Code", code)
            handler.send_header("X-Error-Message", message)
        handler.end_headers()
        if body:
            handler.wfile.write(payload)
