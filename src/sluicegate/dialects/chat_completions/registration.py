"""OpenAI Chat Completions, as the server registers it (`sluicegate.dialects` entry point)."""

from __future__ import annotations

from typing import cast

from sluicegate.dialects.base import Dialect, DialectContext, Registration
from sluicegate.dialects.chat_completions.dialect import SPEC, ChatCompletionsDialect
from sluicegate.dialects.chat_completions.encoder import ReasoningField

COMPILED = ("encoder", "request")  # read by the build without importing this module (`_compiled.py`)


def build(context: DialectContext) -> list[Dialect]:
    # `config.py` accepts only the values `ReasoningField` names.
    settings = context.settings
    return [
        ChatCompletionsDialect(
            cast(ReasoningField, settings.reasoning_field),
            prefill_assistant=settings.prefill_assistant,
            verbose=settings.verbose,
        )
    ]


REGISTRATION = Registration(
    specs=(SPEC,),
    build=build,
    routes=("sluicegate.routes.input_tokens:CHAT_ROUTES",),  # llama-server's input_tokens
    compiled=COMPILED,
)
