"""Anthropic Messages, as the server registers it (`sluicegate.dialects` entry point)."""

from __future__ import annotations

from sluicegate.core.sealing import load_key
from sluicegate.dialects.anthropic.dialect import SPEC, AnthropicDialect
from sluicegate.dialects.anthropic.signature import ThinkingSigner
from sluicegate.dialects.base import Dialect, DialectContext, Registration

COMPILED = ("encoder",)  # read by the build without importing this module (`_compiled.py`)


def build(context: DialectContext) -> list[Dialect]:
    # The server's sealing key signs thinking blocks.
    return [AnthropicDialect(ThinkingSigner(load_key(context.settings.data_dir)))]


REGISTRATION = Registration(
    specs=(SPEC,),
    build=build,
    routes=("sluicegate.routes.anthropic_routes:ROUTES",),
    compiled=COMPILED,
)
