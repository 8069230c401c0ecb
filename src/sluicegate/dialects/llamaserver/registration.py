"""llama-server's own API, as the server registers it (`sluicegate.dialects` entry point):
`/completion` (and `/completions`) and `/infill` served by the turn runner, and `/tokenize`,
`/detokenize`, `/apply-template`, `/props`, `/slots` beside it (`routes/llamaserver.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sluicegate.dialects.base import Dialect, DialectContext, Registration
from sluicegate.dialects.llamaserver.dialect import INFILL_SPEC, SPEC, InfillDialect, LlamaServerDialect

COMPILED: tuple[str, ...] = ()  # read by the build without importing this module (`_compiled.py`)


def fill_in_middle_model(models: Mapping[str, Any]) -> str | None:
    """The model an `/infill` request without `model` goes to: the first that can fill in the
    middle (llama-server serves one model; its clients often name none)."""
    return next((m.id for m in models.values() if m.engine.info().capabilities.fill_in_middle), None)


def build(context: DialectContext) -> list[Dialect]:
    def served_name() -> str | None:
        """A request without `model` means the default model, else the first that completes
        text (llama-server serves one model; its clients name none)."""
        if context.settings.default_model is not None:
            return context.settings.default_model
        models = context.models().values()
        return next((m.id for m in models if m.engine.info().capabilities.completion), None)

    return [
        LlamaServerDialect(served_name),
        InfillDialect(lambda: fill_in_middle_model(context.models())),
    ]


REGISTRATION = Registration(
    specs=(SPEC, INFILL_SPEC),
    build=build,
    routes=("sluicegate.routes.llamaserver:ROUTES",),
    compiled=COMPILED,
)
