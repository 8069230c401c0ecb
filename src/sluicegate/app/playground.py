"""The web pages: the playground at `/`, the models page at `/models` and the operators'
overview at `/overview`; static files shipped in the package (`sluicegate/web/`), no build step.
Open without an API key: the pages hold no data, they ask for a key themselves."""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from sluicegate.routes.models import list_models

WEB = Path(__file__).parent.parent / "web"  # sluicegate/web: the static pages


async def index(request: Request) -> Response:
    """The page for a browser; for an API client, Ollama's liveness answer (Ollama clients
    probe `GET /` and `HEAD /` for it before anything else)."""
    if not wants_page(request.headers.get("accept", "")):
        return PlainTextResponse("Ollama is running")
    return FileResponse(WEB / "index.html", headers={"Cache-Control": "no-cache"})


async def overview(request: Request) -> Response:
    """The operators' page: what `/metrics` says, live (it fetches `/metrics` with the key)."""
    return FileResponse(WEB / "overview.html", headers={"Cache-Control": "no-cache"})


def wants_page(accept: str) -> bool:
    """A browser's navigation asks for HTML; an API client's request does not."""
    return "text/html" in accept


async def models_page(request: Request) -> Response:
    """Models: list, load, unload, download from the Hub (through the LM Studio models API).
    An API client (no `text/html` in its Accept) gets `GET /v1/models`'s JSON instead: a base
    URL without `/v1`, as llama-server and LM Studio answer it (the key is checked for it)."""
    if not wants_page(request.headers.get("accept", "")):
        return await list_models(request)
    return FileResponse(WEB / "models.html", headers={"Cache-Control": "no-cache"})


def playground_routes() -> list[BaseRoute]:
    return [
        Route("/", index, methods=["GET"]),
        Route("/overview", overview, methods=["GET"]),
        Route("/models", models_page, methods=["GET"]),
        Mount("/playground", StaticFiles(packages=[("sluicegate", "web")]), name="playground"),
    ]
