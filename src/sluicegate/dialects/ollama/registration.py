"""Ollama's native API, as the server registers it (`sluicegate.dialects` entry point): two chat
routes that also load and unload models (their hooks), and the model routes beside them."""

from __future__ import annotations

from sluicegate.dialects.base import Dialect, DialectContext, Registration
from sluicegate.dialects.ollama.dialect import SPEC, OllamaChatDialect, OllamaGenerateDialect

COMPILED = ("encoder",)  # read by the build without importing this module (`_compiled.py`)


def build(context: DialectContext) -> list[Dialect]:
    return [OllamaChatDialect(), OllamaGenerateDialect()]


REGISTRATION = Registration(
    specs=(SPEC,),
    build=build,
    routes=("sluicegate.routes.ollama_routes:ROUTES",),
    hooks="sluicegate.routes.ollama_turns:HOOKS",
    compiled=COMPILED,
)
