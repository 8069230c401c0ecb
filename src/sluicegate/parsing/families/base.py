"""What a family module declares: how to recognise its chat template, its reasoning tags, and
the parser for its output."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from sluicegate.core.events import RawEvent, TokenLogprob
from sluicegate.parsing.formats import ReasoningStyle
from sluicegate.parsing.markup import Markup, MarkupParser, Tools


class StreamParser(Protocol):
    """Model text in arbitrary chunks → raw events (reasoning, message text, tool calls)."""

    saw_tool_calls: bool

    def feed(self, text: str, logprobs: list[TokenLogprob] | None = None) -> list[RawEvent]: ...

    def finish(self) -> list[RawEvent]: ...


@dataclass(frozen=True, slots=True)
class ParserArgs:
    reasoning: ReasoningStyle | None
    starts_in_reasoning: bool
    tools: Tools
    new_call_id: Callable[[], str]
    continues: bool = False  # the prompt ends inside a continued message: its text goes on as is


@dataclass(frozen=True, slots=True)
class Family:
    """`name` is the `tool_call_format` config value; `fingerprint` reads a chat template;
    `reasoning` are the tags its models think in (None: `<think>` when the template knows it)."""

    name: str
    fingerprint: Callable[[str], bool]
    build: Callable[[ParserArgs], StreamParser]
    reasoning: ReasoningStyle | None = None
    templates: tuple[str, ...] = ()  # llama.cpp's corpus files of this family (docs, tests)
    # The template writes `reasoning`'s tags through macros, not as literals (Kimi K3).
    reasoning_built: bool = False


def markup_family(markup: Markup) -> Callable[[ParserArgs], StreamParser]:
    def build(args: ParserArgs) -> StreamParser:
        return MarkupParser(
            markup,
            reasoning=args.reasoning,
            starts_in_reasoning=args.starts_in_reasoning,
            continues=args.continues,
            tools=args.tools,
            new_call_id=args.new_call_id,
        )

    return build


def has(*needles: str) -> Callable[[str], bool]:
    """A fingerprint: the template contains every one of `needles`."""
    return lambda source: all(n in source for n in needles)
