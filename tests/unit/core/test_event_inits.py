"""The classes made per token write their `__init__` out (core/events.py, core/frames.py): the one
the `dataclass` decorator generates is exec'd source, interpreted even in the compiled build —
an interpreted frame per object, several per paced token (bench/README.md, gateway "Round
fourteen"). Written out, it is compiled with its class; the dataclass's fields, equality,
repr and `replace` stay as they were."""

from __future__ import annotations

import dataclasses

import pytest

from sluicegate.core.events import (
    Item,
    ItemDelta,
    ItemKind,
    RawBatch,
    TextDelta,
    ToolCallDelta,
    Usage,
    UsageReport,
)
from sluicegate.core.frames import Frame

PER_TOKEN = [TextDelta, ToolCallDelta, UsageReport, ItemDelta, RawBatch, Frame]


@pytest.mark.parametrize("cls", PER_TOKEN, ids=lambda c: c.__name__)
def test_the_init_is_the_class_own_not_the_dataclass_one(cls: type) -> None:
    code = getattr(cls.__init__, "__code__", None)  # none when compiled: a native slot
    # The generated one is compiled from a string: its file is "<string>".
    assert code is None or code.co_filename != "<string>", f"{cls.__name__}.__init__ is generated"


def test_fields_defaults_and_value_semantics_are_the_dataclass_ones() -> None:
    item = Item(0, ItemKind.MESSAGE, "msg_1")
    made = [
        (TextDelta(ItemKind.MESSAGE, "hi"), TextDelta(channel=ItemKind.MESSAGE, text="hi", logprobs=None)),
        (ToolCallDelta(0), ToolCallDelta(index=0, arguments="", call_id=None, name=None, provider=None)),
        (UsageReport(Usage(1, 2)), UsageReport(usage=Usage(1, 2))),
        (ItemDelta(item, "x"), ItemDelta(item=item, text="x", logprobs=None)),
        (RawBatch([TextDelta(ItemKind.MESSAGE, "a")]), RawBatch(events=[TextDelta(ItemKind.MESSAGE, "a")])),
        (Frame(b"{}"), Frame(data=b"{}", event=None)),
    ]
    for positional, keywords in made:
        assert positional == keywords
        assert repr(positional) == repr(keywords)
    assert [f.name for f in dataclasses.fields(ToolCallDelta)] == [
        "index", "arguments", "call_id", "name", "provider"
    ]  # fmt: skip
    assert dataclasses.replace(TextDelta(ItemKind.MESSAGE, "a"), text="b") == TextDelta(ItemKind.MESSAGE, "b")
    assert hash(Frame(b"a", "e")) == hash(Frame(b"a", "e"))
    match ItemDelta(item, "t"):
        case ItemDelta(item=found, text=text):
            assert (found, text) == (item, "t")
    with pytest.raises(TypeError):
        TextDelta(ItemKind.MESSAGE)  # type: ignore[call-arg]
