"""The canonical event stream.

Engines yield *raw* events: progress, text deltas on a channel, tool-call deltas by index,
usage and a finish reason, in whatever order their backend produces them. The segmenter
(`core/segment.py`) turns those into the *canonical* stream every dialect encodes: items
(reasoning, message, refusal, tool call, tool result) that are added, take deltas and are done,
then usage, then exactly one terminal event, `Finished` or `Failed`.

These are plain slotted classes, not pydantic models: they are created once per token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from sluicegate.core.errors import ErrorInfo


class ItemKind(StrEnum):
    REASONING = "reasoning"
    MESSAGE = "message"
    REFUSAL = "refusal"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"


class FinishReason(StrEnum):
    STOP = "stop"
    LENGTH = "length"
    TOOL_CALLS = "tool_calls"
    CONTENT_FILTER = "content_filter"


@dataclass(slots=True)
class TopLogprob:
    token: str
    logprob: float
    bytes: list[int] | None


@dataclass(slots=True)
class TokenLogprob:
    token: str
    logprob: float
    bytes: list[int] | None
    top: list[TopLogprob] = field(default_factory=list)


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def usage_with_fallback(usage: Usage | None, deltas: int, reasoning_deltas: int) -> Usage | None:
    """The engine's count, or, when it never got to count output (cut off by a deadline, a
    failure or a cancel), what streamed: a delta is at least one token. Prompt and cached
    counts the engine did report are kept."""
    if not deltas or (usage is not None and usage.completion_tokens):
        return usage
    return Usage(
        prompt_tokens=usage.prompt_tokens if usage else 0,
        completion_tokens=deltas,
        cached_tokens=usage.cached_tokens if usage else 0,
        reasoning_tokens=reasoning_deltas,
    )


# --- raw events (engines yield these; the load/prompt/usage ones pass through unchanged) ----


@dataclass(slots=True)
class LoadStarted:
    instance_id: str


@dataclass(slots=True)
class LoadProgress:
    progress: float  # 0..1


@dataclass(slots=True)
class LoadFinished:
    seconds: float


@dataclass(slots=True)
class PromptStarted:
    pass


@dataclass(slots=True)
class PromptProgress:
    progress: float  # 0..1


@dataclass(slots=True)
class PromptFinished:
    pass


@dataclass(slots=True)
class Answered:
    """A remote engine's upstream accepted the request (see `Engine.answers_first`).

    `headers` are for the client's response (which replica serves it). Routes that wait for the
    answer consume this event; the segmenter drops it anywhere else.
    """

    headers: dict[str, str]


@dataclass(slots=True)
class TextDelta:
    """Text on one channel: reasoning, message or refusal."""

    channel: ItemKind
    text: str
    logprobs: list[TokenLogprob] | None = None


@dataclass(slots=True)
class ToolCallDelta:
    """A piece of the tool call at `index`; `call_id` and `name` may come once or never."""

    index: int
    arguments: str = ""
    call_id: str | None = None
    name: str | None = None


@dataclass(slots=True)
class UsageReport:
    usage: Usage


@dataclass(slots=True)
class Finished:
    reason: FinishReason


@dataclass(slots=True)
class Failed:
    error: ErrorInfo


# --- canonical item events (the segmenter yields these) -------------------------------------


@dataclass(slots=True)
class Item:
    """One output item; `text` is complete once the item is done (arguments for tool calls)."""

    index: int  # position in the output, 0.. in the order items were added
    kind: ItemKind
    id: str
    call_id: str | None = None  # tool call / tool result
    name: str | None = None  # tool name
    tool_index: int | None = None  # 0.. among this response's tool calls (Chat Completions index)
    text: str = ""
    logprobs: list[TokenLogprob] = field(default_factory=list)
    done: bool = False
    cut_short: bool = False  # closed by a limit, a filter or a failure, not finished by the model
    parts: list[str] = field(default_factory=list)  # deltas so far, joined into `text` at done

    @property
    def text_so_far(self) -> str:
        return self.text if self.done else "".join(self.parts)


@dataclass(slots=True)
class ItemAdded:
    item: Item


@dataclass(slots=True)
class ItemDelta:
    item: Item
    text: str
    logprobs: list[TokenLogprob] | None = None


@dataclass(slots=True)
class ItemDone:
    item: Item


ProgressEvent = LoadStarted | LoadProgress | LoadFinished | PromptStarted | PromptProgress | PromptFinished
RawEvent = ProgressEvent | Answered | TextDelta | ToolCallDelta | UsageReport | Finished | Failed
Event = ProgressEvent | ItemAdded | ItemDelta | ItemDone | UsageReport | Finished | Failed
