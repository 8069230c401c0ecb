"""Every Ollama route but the two chat routes (the turn runner serves those): one list for the
dialect's registration (`dialects/ollama/registration.py`)."""

from __future__ import annotations

from starlette.routing import Route

from sluicegate.routes import ollama_embed, ollama_models, ollama_pull

ROUTES = [
    Route("/api/version", ollama_models.version, methods=["GET"]),
    Route("/api/tags", ollama_models.tags, methods=["GET"]),
    Route("/api/show", ollama_models.show, methods=["POST"]),
    Route("/api/ps", ollama_models.ps, methods=["GET"]),
    Route("/api/delete", ollama_models.delete, methods=["DELETE"]),
    Route("/api/copy", ollama_models.copy, methods=["POST"]),
    Route("/api/pull", ollama_pull.pull, methods=["POST"]),
    Route("/api/embed", ollama_embed.embed_many, methods=["POST"]),
    Route("/api/embeddings", ollama_embed.embed_one, methods=["POST"]),
]
