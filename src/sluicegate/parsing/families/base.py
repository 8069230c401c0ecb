"""What a family module declares, once: how to recognise its chat template, its reasoning
tags, the parser for its output, how a forced call and the markup around an answer are written
(parsing/forced.py), what its template wants done to a conversation (parsing/quirks.py), and
the template for a GGUF of its architecture that carries none. registry.py lists the
declarations; everything else reads them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from sluicegate.core.events import RawEvent, TokenLogprob
from sluicegate.parsing.forced import PLAIN_ANSWER, AnswerMarkup, CallShape
from sluicegate.parsing.formats import ReasoningStyle
from sluicegate.parsing.markup import Markup, OutputParser, Tools
from sluicegate.parsing.quirks import NO_QUIRKS, Quirks


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
class Fallback:
    """A chat template for a GGUF of one of `architectures` that carries none: llama.cpp's
    built-in template `name` (src/llama-chat.cpp), written in Jinja."""

    name: str
    source: str
    architectures: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Family:
    """`name` is the `tool_call_format` config value; `fingerprint` reads a chat template;
    `reasoning` are the tags its models think in (None: `<think>` when the template knows it);
    `call`: how a forced call is written (None: calls cannot be forced); `answer`: the markup
    around an answer under a grammar; `quirks`: what its template wants done to a conversation;
    `architectures`: models of these architectures write this markup even without a template;
    `fallback`: the template for its architectures' GGUFs that carry none."""

    name: str
    fingerprint: Callable[[str], bool]
    build: Callable[[ParserArgs], StreamParser]
    reasoning: ReasoningStyle | None = None
    templates: tuple[str, ...] = ()  # llama.cpp's corpus files of this family (docs, tests)
    # The template writes `reasoning`'s tags through macros, not as literals (Kimi K3).
    reasoning_built: bool = False
    call: CallShape | None = None
    answer: AnswerMarkup = PLAIN_ANSWER
    quirks: Quirks = NO_QUIRKS
    architectures: tuple[str, ...] = ()
    fallback: Fallback | None = None


def markup_family(markup: Markup) -> Callable[[ParserArgs], StreamParser]:
    def build(args: ParserArgs) -> StreamParser:
        return OutputParser(
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
