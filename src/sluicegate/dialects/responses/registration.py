"""OpenAI Responses, as the server registers it (`sluicegate.dialects` entry point): its chat
route also answers on a WebSocket, and its stored responses have routes of their own."""

from __future__ import annotations

from sluicegate.dialects.base import Dialect, DialectContext, Registration
from sluicegate.dialects.responses.dialect import SPEC, ResponsesDialect

COMPILED = ("encoder",)  # read by the build without importing this module (`_compiled.py`)


def build(context: DialectContext) -> list[Dialect]:
    settings = context.settings
    return [
        ResponsesDialect(
            context.plugin_ids,
            settings.responses_reasoning_events,
            hosted_tools=settings.responses_hosted_tools,
            sealer=context.sealer,
        )
    ]


REGISTRATION = Registration(
    specs=(SPEC,),
    build=build,
    routes=("sluicegate.routes.responses_routes:ROUTES",),
    websocket="sluicegate.turn.websocket:ResponsesSocket",
    compiled=COMPILED,
)
