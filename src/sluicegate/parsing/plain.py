"""The parser of a text completion: the model's text is the answer, as it is.

A raw prompt has no chat template, so there is no reasoning block or tool-call markup to find
in the output; every chunk is message text, whitespace included (`OutputParser` holds leading
whitespace back for a possible tool call, which a completion must not lose).
"""

from __future__ import annotations

from sluicegate.core.events import ItemKind, RawEvent, TextDelta, TokenLogprob

_MESSAGE = ItemKind.MESSAGE


class PlainText:
    """`OutputParser`'s interface, with nothing parsed."""

    __slots__ = ()
    saw_tool_calls = False

    def feed(self, text: str, logprobs: list[TokenLogprob] | None = None) -> list[RawEvent]:
        return [TextDelta(_MESSAGE, text, logprobs)] if text else []

    def finish(self) -> list[RawEvent]:
        return []
