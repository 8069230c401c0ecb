"""The dataclasses a stream makes once write their `__init__` out (mypyc compiles it; the one
`dataclasses` generates is Python: core/events.py). Each written-out `__init__` must say what
the fields say: the same parameters in the same order, the same defaults, a new empty list or
object where a field has a `default_factory` (not one shared between instances)."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from sluicegate.core.events import (
    Answered,
    Finished,
    Item,
    ItemAdded,
    ItemDone,
    PromptProgress,
    PromptStarted,
    Usage,
    UsageReport,
)
from sluicegate.core.request import (
    ChatRequest,
    ContentPart,
    FileChunk,
    Message,
    RawPrompt,
    RequestOptions,
    SamplingParams,
    ToolCall,
    ToolSpec,
)
from sluicegate.transport.answer_first import Opened
from sluicegate.transport.stream import StreamOutcome

WRITTEN_OUT: list[type[Any]] = [
    Usage,
    PromptStarted,
    PromptProgress,
    Answered,
    UsageReport,
    Finished,
    Item,
    ItemAdded,
    ItemDone,
    Opened,
    StreamOutcome,
    # what a request's parse makes (core/request.py, compiled)
    ContentPart,
    ToolCall,
    Message,
    ToolSpec,
    SamplingParams,
    RequestOptions,
    ChatRequest,
    RawPrompt,
    FileChunk,
]


def _own_init(cls: type[Any]) -> Any:
    init = cls.__dict__.get("__init__")
    if init is None or not hasattr(init, "__code__"):
        pytest.skip("compiled: the signature is not readable")
    return init


@pytest.mark.parametrize("cls", WRITTEN_OUT, ids=lambda c: c.__name__)
def test_the_init_is_the_classs_own(cls: type[Any]) -> None:
    # dataclasses' own is Python compiled from a string (`<string>`), in both builds; one written
    # in the class is not (pure: its file; compiled: a native method, no `__code__` at all)
    init = cls.__dict__.get("__init__")
    assert init is not None
    assert getattr(getattr(init, "__code__", None), "co_filename", None) != "<string>"


@pytest.mark.parametrize("cls", WRITTEN_OUT, ids=lambda c: c.__name__)
def test_the_init_says_what_the_fields_say(cls: type[Any]) -> None:
    params = list(inspect.signature(_own_init(cls)).parameters.values())[1:]
    fields = dataclasses.fields(cls)
    assert [p.name for p in params] == [f.name for f in fields]
    required: dict[str, Any] = {}
    for param, field in zip(params, fields, strict=True):
        if field.default is not dataclasses.MISSING:
            assert param.default == field.default, field.name
        elif field.default_factory is not dataclasses.MISSING:
            assert param.default is None, field.name  # a new one made in the body
        else:
            assert param.default is inspect.Parameter.empty, field.name
            required[field.name] = object()
    first, second = cls(**required), cls(**required)
    for field in fields:
        if field.default_factory is not dataclasses.MISSING:
            made = getattr(first, field.name)
            assert made == field.default_factory(), field.name
            assert made is not getattr(second, field.name), field.name
        elif field.default is not dataclasses.MISSING:
            assert getattr(first, field.name) == field.default, field.name
        else:
            assert getattr(first, field.name) is required[field.name]


def test_equality_and_repr_are_still_the_dataclasss() -> None:
    assert Usage(1, 2) == Usage(prompt_tokens=1, completion_tokens=2)
    assert repr(Usage(1)).startswith("Usage(prompt_tokens=1, completion_tokens=0, ")
