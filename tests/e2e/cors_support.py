"""The other origin of the CORS tests: a blank page on another loopback port, and the servers
that allow it or not."""

from __future__ import annotations

import http.server
import socketserver
import threading
from collections.abc import Iterator

import pytest
from e2e_support import free_port, scripted

KEY = "sk-cors"
AUTH = {"Authorization": f"Bearer {KEY}"}
MODELS = [scripted("chat", "chat.yaml")]


@pytest.fixture(scope="module")
def page_origin() -> Iterator[str]:
    """Another loopback origin (another port) serving a blank page: where the browser's script runs."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<!doctype html><title>another origin</title><p>a browser app"
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    port = free_port()
    with socketserver.TCPServer(("127.0.0.1", port), Page) as httpd:
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            httpd.shutdown()
            thread.join()
