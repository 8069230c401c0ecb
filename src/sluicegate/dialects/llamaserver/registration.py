"""llama-server's own API, as the server registers it (`sluicegate.dialects` entry point):
`/completion` (and `/completions`) served by the turn runner, and `/tokenize`, `/detokenize`,
`/apply-template`, `/props`, `/slots` beside it (`routes/llamaserver.py`)."""

from __future__ import annotations

from sluicegate.dialects.base import Dialect, DialectContext, Registration
from sluicegate.dialects.llamaserver.dialect import SPEC, LlamaServerDialect

COMPILED: tuple[str, ...] = ()  # read by the build without importing this module (`_compiled.py`)


def build(context: DialectContext) -> list[Dialect]:
    def served_name() -> str | None:
        """A request without `model` means the default model, else the first that completes
        text (llama-server serves one model; its clients name none)."""
        if context.settings.default_model is not None:
            return context.settings.default_model
        models = context.models().values()
        return next((m.id for m in models if m.engine.info().capabilities.completion), None)

    return [LlamaServerDialect(served_name)]


REGISTRATION = Registration(
    specs=(SPEC,), build=build, routes=("sluicegate.routes.llamaserver:ROUTES",), compiled=COMPILED
)
