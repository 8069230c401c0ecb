"""The canonical event stream.

Engines yield *raw* events: progress, text deltas on a channel, tool-call deltas by index,
usage and a finish reason, in whatever order their backend produces them. The segmenter
(`core/segment.py`) turns those into the *canonical* stream every dialect encodes: items
(reasoning, message, refusal, tool call, tool result) that are added, take deltas and are done,
then usage, then exactly one terminal event, `Finished` or `Failed`.

These are plain slotted classes, not pydantic models: they are created once per token.

Each writes its `__init__` out: mypyc compiles a class's own methods, while the `__init__` that
`dataclasses` generates stays Python run through `tp_init` (~1.3 k instructions a per-token
object, ~3-7 k a stream's once-made ones, against ~0.2-1 k compiled: bench/README.md, gateway
"Round fourteen"). Those made per token (`TextDelta`, `ToolCallDelta`, `UsageReport`,
`ItemDelta`, `RawBatch`) say `init=False`; the others keep the decorator's default, which leaves
a class's own `__init__` in place. tests/unit/core/test_dataclass_inits.py and
test_event_inits.py check them against their fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from sluicegate.core.errors import ErrorInfo
from sluicegate.core.request import ProviderInfo, ServerTool


class ItemKind(StrEnum):
    REASONING = "reasoning"
    MESSAGE = "message"
    REFUSAL = "refusal"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    TOOL_LIST = "tool_list"  # a server-side provider's tools, listed (Responses mcp_list_tools)
    APPROVAL_REQUEST = "approval_request"  # a server-side call waiting for the client's approval


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
    id: int | None = None  # the token id, where the engine has one (llama-server shows it)


@dataclass(slots=True)
class TokenLogprob:
    token: str
    logprob: float
    bytes: list[int] | None
    top: list[TopLogprob] = field(default_factory=list)
    id: int | None = None  # the token id, where the engine has one (llama-server shows it)


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    audio_tokens: int = 0  # of the prompt's, those that audio input took
    # Speculative decoding's draft tokens (OpenAI's Predicted Outputs counts): those the model
    # wrote as drafted, and those it did not. Not part of `completion_tokens`.
    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0
    # Tokens a context shift dropped from the context while generating (llama-server's
    # `--context-shift`; its `truncated`): 0 when the context never filled.
    shifted_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __init__(
        self,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        cached_tokens: int = 0,
        reasoning_tokens: int = 0,
        audio_tokens: int = 0,
        accepted_prediction_tokens: int = 0,
        rejected_prediction_tokens: int = 0,
        shifted_tokens: int = 0,
    ) -> None:
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.cached_tokens = cached_tokens
        self.reasoning_tokens = reasoning_tokens
        self.audio_tokens = audio_tokens
        self.accepted_prediction_tokens = accepted_prediction_tokens
        self.rejected_prediction_tokens = rejected_prediction_tokens
        self.shifted_tokens = shifted_tokens


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
        audio_tokens=usage.audio_tokens if usage else 0,
        accepted_prediction_tokens=usage.accepted_prediction_tokens if usage else 0,
        rejected_prediction_tokens=usage.rejected_prediction_tokens if usage else 0,
        shifted_tokens=usage.shifted_tokens if usage else 0,
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
    # The prompt's tokens and how many of them the cache holds, where the engine counts them.
    total: int = 0
    cached: int = 0

    def __init__(self, total: int = 0, cached: int = 0) -> None:
        self.total = total
        self.cached = cached


@dataclass(slots=True)
class PromptProgress:
    progress: float  # 0..1
    # In tokens, where the engine counts them (llama-server's `prompt_progress`): decoded so
    # far of `total`, `cached` of which came from the cache; 0 where it does not.
    processed: int = 0
    total: int = 0
    cached: int = 0

    def __init__(self, progress: float, processed: int = 0, total: int = 0, cached: int = 0) -> None:
        self.progress = progress
        self.processed = processed
        self.total = total
        self.cached = cached


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

    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers


@dataclass(slots=True, init=False)
class TextDelta:
    """Text on one channel: reasoning, message or refusal."""

    channel: ItemKind
    text: str
    logprobs: list[TokenLogprob] | None = None

    def __init__(self, channel: ItemKind, text: str, logprobs: list[TokenLogprob] | None = None) -> None:
        self.channel = channel
        self.text = text
        self.logprobs = logprobs


@dataclass(slots=True, init=False)
class ToolCallDelta:
    """A piece of the tool call at `index`; `call_id` and `name` may come once or never."""

    index: int
    arguments: str = ""
    call_id: str | None = None
    name: str | None = None
    provider: ProviderInfo | None = None  # set by the tool loop on calls the server runs itself

    def __init__(
        self,
        index: int,
        arguments: str = "",
        call_id: str | None = None,
        name: str | None = None,
        provider: ProviderInfo | None = None,
    ) -> None:
        self.index = index
        self.arguments = arguments
        self.call_id = call_id
        self.name = name
        self.provider = provider


# Server-side tools: the tool loop yields these; each becomes one item, added and done at once.


@dataclass(slots=True)
class ToolResult:
    """The outcome of a server-side call (`call_id` names the TOOL_CALL item it answers)."""

    call_id: str
    name: str
    output: str
    provider: ProviderInfo
    error: str | None = None


@dataclass(slots=True)
class ToolsListed:
    """A provider's tools as offered to the model, or why they could not be listed."""

    provider: ProviderInfo
    tools: list[ServerTool]
    error: str | None = None


@dataclass(slots=True)
class ApprovalRequested:
    """A server-side call the client must approve first; the turn ends after it."""

    name: str
    arguments: str
    provider: ProviderInfo


@dataclass(slots=True, init=False)
class UsageReport:
    usage: Usage

    def __init__(self, usage: Usage) -> None:
        self.usage = usage


@dataclass(slots=True)
class Finished:
    reason: FinishReason
    # The stop string that ended the output (a request's `stop`), or None: llama-server's
    # `stop_type: "word"` and `stopping_word`, vLLM's `stop_reason`.
    stop_word: str | None = None

    def __init__(self, reason: FinishReason, stop_word: str | None = None) -> None:
        self.reason = reason
        self.stop_word = stop_word


@dataclass(slots=True)
class Failed:
    error: ErrorInfo
    # The turn's record could not be written: nothing may name it as retrievable (an id is
    # only announced once it is durable).
    unstored: bool = False


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
    provider: ProviderInfo | None = None  # server-side tool call / result / list: who runs it
    error: str | None = None  # a failed server-side call (TOOL_RESULT) or listing (TOOL_LIST)
    tools: list[ServerTool] = field(default_factory=list)  # TOOL_LIST
    parts: list[str] = field(default_factory=list)  # deltas so far, joined into `text` at done
    runs: int = 0  # parts[:runs] are deltas already joined in runs (`segmenter.COMPACT_PARTS`)

    @property
    def text_so_far(self) -> str:
        return self.text if self.done else "".join(self.parts)

    def __init__(
        self,
        index: int,
        kind: ItemKind,
        id: str,
        call_id: str | None = None,
        name: str | None = None,
        tool_index: int | None = None,
        text: str = "",
        logprobs: list[TokenLogprob] | None = None,
        done: bool = False,
        cut_short: bool = False,
        provider: ProviderInfo | None = None,
        error: str | None = None,
        tools: list[ServerTool] | None = None,
        parts: list[str] | None = None,
        runs: int = 0,
    ) -> None:
        """(The lists default to new empty ones, as their fields' `default_factory` says.)"""
        self.index = index
        self.kind = kind
        self.id = id
        self.call_id = call_id
        self.name = name
        self.tool_index = tool_index
        self.text = text
        self.logprobs = [] if logprobs is None else logprobs
        self.done = done
        self.cut_short = cut_short
        self.provider = provider
        self.error = error
        self.tools = [] if tools is None else tools
        self.parts = [] if parts is None else parts
        self.runs = runs


@dataclass(slots=True)
class ItemAdded:
    item: Item

    def __init__(self, item: Item) -> None:
        self.item = item


@dataclass(slots=True, init=False)
class ItemDelta:
    item: Item
    text: str
    logprobs: list[TokenLogprob] | None = None

    def __init__(self, item: Item, text: str, logprobs: list[TokenLogprob] | None = None) -> None:
        self.item = item
        self.text = text
        self.logprobs = logprobs


@dataclass(slots=True)
class ItemDone:
    item: Item

    def __init__(self, item: Item) -> None:
        self.item = item


# --- batches: what arrived together travels together ------------------------------------------


@dataclass(slots=True, init=False)
class RawBatch:
    """Raw events that arrived together (one read from an upstream's socket, or one wake-up from
    the llamacpp engine's worker thread), passed down as one so every layer between the engine
    and the client takes one step per read, not per token. Never empty and never nested; only
    engines make them (`engines/upstream/base.py`, `engines/llamacpp/engine.py`)."""

    events: list[RawEvent]

    def __init__(self, events: list[RawEvent]) -> None:
        self.events = events


@dataclass(slots=True)
class EventBatch:
    """The canonical events of one `RawBatch`, in order. Never holds `Finished` or `Failed`: the
    segmenter yields those alone, at the end."""

    events: list[Event]


ProgressEvent = LoadStarted | LoadProgress | LoadFinished | PromptStarted | PromptProgress | PromptFinished
ServerToolEvent = ToolResult | ToolsListed | ApprovalRequested
RawEvent = (
    ProgressEvent
    | Answered
    | TextDelta
    | ToolCallDelta
    | ServerToolEvent
    | UsageReport
    | Finished
    | Failed
    | RawBatch
)
Event = ProgressEvent | ItemAdded | ItemDelta | ItemDone | UsageReport | Finished | Failed | EventBatch


class ReadyEvents:
    """An engine's stream (an async iterator of raw events) that can hand out its next event
    without a step when it needs no wait: `ready()` returns it, or None (then `__anext__`).
    What drives a stream by hand (`transport/answer_first.py`) asks first: a step driven by hand
    ends by raising StopIteration, which compiled costs a traceback entry, a catch and the
    exception's value (~4 k instructions a step); a request's start hands out two events
    (`PromptStarted`, its progress) before the one that waits (engines/upstream/relay.py)."""

    __slots__ = ()

    def ready(self) -> RawEvent | None:
        return None
