"""OpenAI's legacy text completions, as the server registers them (`sluicegate.dialects` entry
point): `/v1/completions`. (llama-server's `/infill` is `dialects/llamaserver`'s.)"""

from __future__ import annotations

from sluicegate.dialects.base import Dialect, DialectContext, Registration
from sluicegate.dialects.completions.dialect import SPEC, CompletionsDialect

COMPILED = ("encoder",)  # read by the build without importing this module (`_compiled.py`)


def build(context: DialectContext) -> list[Dialect]:
    return [CompletionsDialect()]


REGISTRATION = Registration(specs=(SPEC,), build=build, compiled=COMPILED)
