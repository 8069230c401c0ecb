"""Text completions, as the server registers them (`sluicegate.dialects` entry point): OpenAI's
`/v1/completions` and llama-server's `/infill`, two APIs with error shapes of their own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sluicegate.dialects.base import Dialect, DialectContext, Registration
from sluicegate.dialects.completions.dialect import INFILL_SPEC, SPEC, CompletionsDialect, InfillDialect

COMPILED = ("encoder",)  # read by the build without importing this module (`_compiled.py`)


def fill_in_middle_model(models: Mapping[str, Any]) -> str | None:
    """The model an `/infill` request without `model` goes to: the first that can fill in the
    middle (llama-server serves one model; its clients often name none)."""
    return next((m.id for m in models.values() if m.engine.info().capabilities.fill_in_middle), None)


def build(context: DialectContext) -> list[Dialect]:
    return [CompletionsDialect(), InfillDialect(lambda: fill_in_middle_model(context.models()))]


REGISTRATION = Registration(specs=(SPEC, INFILL_SPEC), build=build, compiled=COMPILED)
