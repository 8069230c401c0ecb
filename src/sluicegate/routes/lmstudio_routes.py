"""LM Studio's routes besides its chat route (the turn runner serves that): its models and
downloads, one list for the dialect's registration."""

from __future__ import annotations

from starlette.routing import Route

from sluicegate.routes.lmstudio_models import (
    cancel_download,
    download_model,
    download_options,
    download_status,
    list_lmstudio_models,
    load_model,
    unload_model,
)

ROUTES = [
    Route("/api/v1/models", list_lmstudio_models, methods=["GET"]),
    Route("/api/v1/models/load", load_model, methods=["POST"]),
    Route("/api/v1/models/unload", unload_model, methods=["POST"]),
    Route("/api/v1/models/download", download_model, methods=["POST"]),
    Route("/api/v1/models/download/options", download_options, methods=["GET"]),
    Route("/api/v1/models/download/cancel", cancel_download, methods=["POST"]),
    Route("/api/v1/models/download/status/{job_id}", download_status, methods=["GET"]),
]
