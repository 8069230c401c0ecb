"""The toy dialect's one registration."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from sluicegate.core.accumulate import ChatResult
from sluicegate.core.errors import ErrorInfo, invalid
from sluicegate.core.events import Event, Failed, Finished, ItemDelta, ItemKind
from sluicegate.core.frames import Frame
from sluicegate.core.request import ChatRequest, Message
from sluicegate.dialects.base import Dialect, DialectContext, DialectSpec, EncoderContext, Registration, Turn

Json = dict[str, Any]
COMPILED: tuple[str, ...] = ()  # nothing compiled: a third party's modules are not in the build


def toy_error(info: ErrorInfo) -> Json:
    return {"oops": info.message, "what": info.param}


SPEC = DialectSpec("toy", ("/toy/",), toy_error, transport="ndjson")


class ToyEncoder:
    def opening(self) -> list[Frame]:
        return []

    def encode(self, event: Event) -> list[Frame]:
        if type(event) is ItemDelta and event.item.kind is ItemKind.MESSAGE:
            return [Frame(orjson.dumps({"bit": event.text}))]
        if isinstance(event, Finished):
            reason = event.reason.value if event.reason is not None else None
            return [Frame(orjson.dumps({"done": reason}))]
        if isinstance(event, Failed):
            return [Frame(orjson.dumps(toy_error(event.error)))]
        return []

    def cancelled(self, reason: str) -> list[Frame]:
        return []

    def closing(self) -> list[Frame]:
        return []

    def body(self, result: ChatResult) -> Json:
        return {"said": result.text_of(ItemKind.MESSAGE) or ""}

    def response_object(self) -> Json | None:
        return None


class ToyDialect(Dialect):
    spec = SPEC
    path = "/toy/say"

    def parse(self, body: Any, query: Mapping[str, str], headers: Mapping[str, str]) -> Turn:
        if not isinstance(body, dict):
            raise invalid("the body must be an object")
        model, say = body.get("model"), body.get("say")
        if not isinstance(model, str) or not model:
            raise invalid("`model` must be a string", "model")
        if not isinstance(say, str) or not say:
            raise invalid("`say` must be a non-empty string", "say")
        chat = ChatRequest(model=model, messages=[Message(role="user", content=say)])
        return Turn(request=None, chat=chat, stream=body.get("stream") is True, id_prefix="toy_")

    def encoder(self, turn: Turn, context: EncoderContext) -> ToyEncoder:
        return ToyEncoder()


def build(context: DialectContext) -> list[Dialect]:
    return [ToyDialect()]


REGISTRATION = Registration(
    specs=(SPEC,),
    build=build,
    routes=("toy_dialect.routes:ROUTES",),
    hooks="toy_dialect.routes:HOOKS",
    compiled=COMPILED,
)
