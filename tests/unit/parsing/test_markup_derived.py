"""What a parser derives from its markup is derived once per markup object (`_derive`), not
per stream — and only ever for that object: a stale entry under a reused id is not taken."""

from __future__ import annotations

from unittest import mock

from sluicegate.parsing import markup as markup_module
from sluicegate.parsing.formats import ReasoningStyle
from sluicegate.parsing.markup import Markup, OutputParser


def test_parsers_of_one_markup_share_what_is_derived_from_it() -> None:
    family = Markup(drop=("<|end|>",))
    first, second = OutputParser(family), OutputParser(family)
    assert first._openers is second._openers and first._drop is second._drop
    text = "".join(e.text for e in first.feed("x<|end|>y") + first.finish())  # type: ignore[union-attr]
    assert text == "xy"


def test_an_entry_under_a_reused_id_is_not_taken() -> None:
    family, other = Markup(drop=("<|end|>",)), Markup(drop=("<|eot|>",))
    with mock.patch.dict(markup_module._derived, clear=True):
        markup_module._derived[id(family)] = markup_module._derive(other)  # as if `other` had that id
        parser = OutputParser(family, reasoning=ReasoningStyle())
        assert parser._drop == frozenset({"<|end|>"})
        assert "<|end|>" in parser._markers and "<|eot|>" not in parser._markers


def test_the_table_is_bounded() -> None:
    with mock.patch.dict(markup_module._derived, clear=True):
        kept = [Markup(drop=(f"<{n}>",)) for n in range(markup_module._MAX_DERIVED + 10)]
        for family in kept:
            OutputParser(family)
        assert len(markup_module._derived) <= markup_module._MAX_DERIVED
