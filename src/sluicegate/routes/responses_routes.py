"""The Responses API's routes besides its chat route (the turn runner serves that): stored
responses and compaction, one list for the dialect's registration."""

from __future__ import annotations

from starlette.routing import Route

from sluicegate.routes.responses_compact import compact_response
from sluicegate.routes.responses_stored import (
    cancel_response,
    delete_response,
    list_input_items,
    retrieve_response,
)

ROUTES = [
    Route("/v1/responses/compact", compact_response, methods=["POST"]),
    Route("/v1/responses/{response_id}", retrieve_response, methods=["GET"]),
    Route("/v1/responses/{response_id}", delete_response, methods=["DELETE"]),
    Route("/v1/responses/{response_id}/cancel", cancel_response, methods=["POST"]),
    Route("/v1/responses/{response_id}/input_items", list_input_items, methods=["GET"]),
]
