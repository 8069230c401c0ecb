"""The playground page at `/`: static files shipped in the package (`sluicegate/web/`), no build
step. Open without an API key: the page holds no data, it asks for a key itself."""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

WEB = Path(__file__).parent.parent / "web"  # sluicegate/web: the static pages


async def index(request: Request) -> Response:
    return FileResponse(WEB / "index.html", headers={"Cache-Control": "no-cache"})


def playground_routes() -> list[BaseRoute]:
    return [
        Route("/", index, methods=["GET"]),
        Mount("/playground", StaticFiles(packages=[("sluicegate", "web")]), name="playground"),
    ]
