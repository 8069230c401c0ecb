"""LM Studio's REST API, as the server registers it (`sluicegate.dialects` entry point)."""

from __future__ import annotations

from sluicegate.dialects.base import Dialect, DialectContext, Registration
from sluicegate.dialects.lmstudio.dialect import SPEC, LMStudioDialect

COMPILED = ("encoder",)  # read by the build without importing this module (`_compiled.py`)


def build(context: DialectContext) -> list[Dialect]:
    settings = context.settings
    return [LMStudioDialect(settings.lmstudio_events, settings.responses_retention_days)]


REGISTRATION = Registration(
    specs=(SPEC,),
    build=build,
    routes=("sluicegate.routes.lmstudio_routes:ROUTES",),
    compiled=COMPILED,
)
