"""Anthropic's routes besides its chat route (the turn runner serves that), one list for the
dialect's registration."""

from __future__ import annotations

from starlette.routing import Route

from sluicegate.routes.anthropic_tokens import count_tokens

ROUTES = [Route("/v1/messages/count_tokens", count_tokens, methods=["POST"])]
