"""What a speech model (Whisper, Piper) is to the rest of the server: an engine with weights,
one request at a time, listed with its kind, and a clear 400 for a chat request (it has tasks,
not a chat)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import ClassVar

from sluicegate.core.errors import invalid
from sluicegate.core.events import RawEvent
from sluicegate.core.request import ChatRequest
from sluicegate.engines.base import Capabilities, Engine, ModelInfo, Task


class SpeechEngine(Engine):
    needs_load: ClassVar[bool] = True
    holds_weights: ClassVar[bool] = True
    default_max_concurrency: ClassVar[int] = 1  # one decoder or voice; more requests queue
    speech_tasks: ClassVar[frozenset[Task]]
    description: ClassVar[str]  # "a text-to-speech model"
    route: ClassVar[str]  # where its requests go: "POST /v1/audio/speech"
    details: ClassVar[dict[str, str]]  # the model list's `details`: type, format, architecture

    def tasks(self) -> frozenset[Task]:
        return self.speech_tasks

    def info(self) -> ModelInfo:
        return ModelInfo(
            id=self.model_id,
            engine=self.kind,
            created=self.created,
            owned_by="local",
            capabilities=Capabilities(tool_use=False),
            details=dict(self.details),
        )

    def check(self, request: ChatRequest) -> None:
        raise invalid(
            f"Model {self.model_id!r} is {self.description}; use {self.route}.",
            param="model",
            code="model_not_supported",
        )

    def generate(self, request: ChatRequest) -> AsyncIterator[RawEvent]:
        self.check(request)  # always refuses (and `Model.open` calls it first)
        raise AssertionError("unreachable")
