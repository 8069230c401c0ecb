"""Streamed Chat Completions, as real upstreams send them, → raw canonical events.

Two pure pieces, no I/O: `SSEReader` splits body bytes into SSE frames (only the lines, nothing
else is parsed), and `ChunkDecoder` turns each frame's JSON into raw events. They understand
what vLLM, SGLang, llama-server, Ollama, LM Studio and OpenAI send (see
`specs/notes-openai-wire-and-sdk.md` sections 3-5): reasoning as `reasoning_content` or `reasoning`,
tool-call deltas by `index` (id and name once, repeated or never), the legacy `function_call`,
`refusal`, per-chunk `logprobs`, usage on the finish chunk, on a `choices: []` chunk or on every
chunk (the last one counts), llama-server's `prompt_progress`, error frames in every shape, and a
stream that ends without `[DONE]`.

Usage is reported once, at the end: the segmenter would pass every intermediate count on.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, Protocol

import orjson

from sluicegate.core.errors import ErrorInfo, ErrorKind
from sluicegate.core.events import (
    Failed,
    Finished,
    FinishReason,
    ItemKind,
    PromptProgress,
    RawEvent,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    TopLogprob,
    Usage,
    UsageReport,
)
from sluicegate.engines.upstream.errors import stream_error

FINISH_REASONS = {
    "stop": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
    "content_filter": FinishReason.CONTENT_FILTER,
}
LEGACY_CALL_INDEX = 0  # the one call a legacy `function_call` delta describes
CLOSED_EARLY = "The upstream closed the stream before it finished (no finish_reason, no [DONE])."
# Module constants read per token, `Final`: compiled, each a C static, where a module global is
# a dict lookup (and `orjson.loads` an attribute lookup on the module) per read.
_MESSAGE: Final = ItemKind.MESSAGE  # (an enum member lookup costs ~100 ns in 3.11)
_loads: Final = orjson.loads


class SSEReader:
    """Bytes → (event name, data) frames, per the SSE rules the upstreams follow: `data:` lines
    of one frame are joined with newlines, a blank line ends the frame, comments are skipped.
    Very old llama-server versions wrote `error: {...}` lines; those become `error` frames."""

    __slots__ = ("_data", "_event", "_tail")

    def __init__(self) -> None:
        self._tail = b""
        self._event: str | None = None
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[tuple[str | None, bytes]]:
        # `partition` and `find`, not `in`: bytes' `in` first tries its operand as an int,
        # raising and clearing a TypeError (~2 k instructions a read). `partition` before
        # `find`: it takes its one argument as is, where `find` parses an argument tuple
        # (~1.2 k instructions a call, compiled) — and it copies nothing when the separator
        # is absent. `startswith`/`endswith` of one argument, not a slice compared: compiled,
        # those two are native and make no bytes object.
        if not self._tail and not self._data and chunk.endswith(b"\n\n"):
            # What upstreams send per read: whole `data: ` frames of one line each. Anything
            # else (comments, `event:` lines, frames split across reads) takes the general path.
            line, _, rest = chunk.partition(b"\n")
            if len(rest) == 1:  # one frame of one line, a paced token's read
                if line.startswith(b"data: ") and not line.partition(b"\r")[1]:
                    return [(None, line[6:])]
            elif not chunk.partition(b"\r")[1]:
                # Several: split once at every line break, each frame a `data: ` line and a
                # blank one (`a\n\nb\n\n` → a, "", b, "", ""). One pass over the read, where
                # splitting at blank lines and then counting line breaks made two.
                lines = chunk.split(b"\n")
                whole: list[tuple[str | None, bytes]] = []
                for i in range(0, len(lines) - 1, 2):
                    part = lines[i]
                    if part[:6] != b"data: " or lines[i + 1]:
                        break
                    whole.append((None, part[6:]))
                else:
                    return whole
        if self._tail:
            chunk = self._tail + chunk
        lines = chunk.split(b"\n")
        self._tail = lines.pop()
        frames: list[tuple[str | None, bytes]] = []
        data = self._data
        for line in lines:
            if line[-1:] == b"\r":
                line = line[:-1]
            if not line:
                if data:
                    frames.append((self._event, data[0] if len(data) == 1 else b"\n".join(data)))
                    data = self._data = []
                self._event = None
            elif line[:5] == b"data:":
                data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif line[:6] == b"event:":
                self._event = line[6:].strip().decode("utf-8", "replace")
            elif line[:6] == b"error:":
                self._event = "error"
                data.append(line[6:].strip())
            # comments (":"), `id:`, `retry:` and unknown fields are ignored
        return frames

    def close(self) -> list[tuple[str | None, bytes]]:
        """A last frame the upstream did not end with a blank line."""
        frames = self.feed(b"\n\n") if self._tail or self._data else []
        return frames


class ContentParser(Protocol):
    """Splits content text further, e.g. `<think>` tags into reasoning (parsing/)."""

    def feed(self, text: str, logprobs: list[TokenLogprob] | None) -> list[RawEvent]: ...

    def finish(self) -> list[RawEvent]: ...


def _logprobs(entries: Any) -> list[TokenLogprob] | None:
    if not entries:
        return None
    return [
        TokenLogprob(
            e.get("token", ""),
            e.get("logprob", 0.0),
            e.get("bytes"),
            [
                TopLogprob(t.get("token", ""), t.get("logprob", 0.0), t.get("bytes"))
                for t in e.get("top_logprobs") or ()
            ],
        )
        for e in entries
    ]


def usage_from(body: dict[str, Any]) -> Usage:
    prompt = body.get("prompt_tokens_details") or {}
    completion = body.get("completion_tokens_details") or {}
    return Usage(
        prompt_tokens=body.get("prompt_tokens") or 0,
        completion_tokens=body.get("completion_tokens") or 0,
        cached_tokens=prompt.get("cached_tokens") or 0,
        reasoning_tokens=completion.get("reasoning_tokens") or 0,
        accepted_prediction_tokens=completion.get("accepted_prediction_tokens") or 0,
        rejected_prediction_tokens=completion.get("rejected_prediction_tokens") or 0,
    )


# The per-token chunk as vLLM and OpenAI-compatible servers write it: `{...,"choices":[{"index":0,
# "delta":{"content":"…"},…}]}`. Recognised from its bytes, so a token costs one small orjson
# call on its string instead of parsing the whole chunk.
_CONTENT_AT = b'"choices":[{"index":0,"delta":{"content":"'
_PLAIN_TAILS = (
    b'},"logprobs":null,"finish_reason":null}]}',
    b'},"logprobs":null,"finish_reason":null}],"usage":null}',
    b'},"logprobs":null,"finish_reason":null,"stop_reason":null}]}',
    b'},"finish_reason":null}]}',
)
# The chunk that opens a stream as vLLM writes it: the role, an empty content, then a tail.
_ROLE_AT = b'"choices":[{"index":0,"delta":{"role":"assistant","content":""'
# A stream's last chunks as vLLM writes them: the finish (an empty text, then a token's tail
# with the reason where the token's has `null`), and usage in a chunk of no choices.
_REASON_AT = b'"finish_reason":"'
_NO_REASON = b'"finish_reason":null'
_FINISH_BYTES = {name.encode(): reason for name, reason in FINISH_REASONS.items()}
_USAGE_AT = b'"choices":[],"usage":{'
# In the part before `choices`, any of these means the chunk says more than a token.
_NOT_PLAIN = (b'"usage":{', b'"error"', b'"prompt_progress"', b'"choices"')


def _plain_head(head: bytes) -> bool:
    """The part before `choices` says nothing more than a token's chunk would."""
    # `partition`, not `in` or `find` (see `SSEReader.feed`): `in` raises and clears a
    # TypeError, `find` parses an argument tuple (~1.5 k instructions a call, compiled).
    # (mypyc makes `all` over a generator expression a loop.)
    return all(not head.partition(mark)[1] for mark in _NOT_PLAIN)


class _PlainChunks:
    """Recognises one stream's per-token chunks from their bytes. A stream's chunks share one
    head (id, created, model) and one tail: both are checked once, then matched as they are.

    Safe by construction: inside a JSON string every `"` is escaped, so `_CONTENT_AT` can only
    match the real key; the part after it must be one JSON string (orjson checks it) followed by
    exactly a known tail; and the head must say nothing more than a token would."""

    __slots__ = ("_content_at", "_head", "_tail")
    content_at: ClassVar[bytes] = _CONTENT_AT
    tails: ClassVar[tuple[bytes, ...]] = _PLAIN_TAILS
    role_at: ClassVar[bytes] = _ROLE_AT  # (b"": a wire with no role chunk)

    def __init__(self) -> None:
        self._head = b""
        self._tail = b""
        self._content_at = self.content_at  # (a slot: the class attribute is a generic lookup)

    def text(self, data: bytes) -> str | None:
        """The text of a chunk that carries nothing but one content delta, else None."""
        head, tail, content_at = self._head, self._tail, self._content_at
        if not head and (role := self._role(data)) is not None:
            # A stream's first chunk is its role chunk: looked for first, not after a search
            # for a token's content that it does not have (~1.5 k instructions a stream).
            return role
        # (a slice compared, not `startswith` at an offset: compiled, only the one-argument
        # form is native; the other parses an argument tuple, ~1 k instructions a token)
        if not (
            head and data.startswith(head) and data[len(head) : len(head) + len(content_at)] == content_at
        ):
            if head and data.startswith(head):
                return None  # the stream's head, then no content: its finish or usage, say
            head, found, _ = data.partition(content_at)  # (`partition`: see `_plain_head`)
            if not found or not head:
                return self._role(data) if self._head else None  # (no head: tried above)
            if not _plain_head(head):
                return None
            self._head = head
        if not (tail and data.endswith(tail)):
            for tail in self.tails:
                if data.endswith(tail):
                    self._tail = tail
                    break
            else:
                return None
        try:
            text = _loads(data[len(head) + len(content_at) - 1 : len(data) - len(tail)])
        except orjson.JSONDecodeError:
            return None
        return text if type(text) is str else None

    def _role(self, data: bytes) -> str | None:
        """An empty text for a stream's opening chunk with the role, an empty content and
        nothing more (what parsing it would come to: no event), its head and tail learnt for
        the tokens after it; else None. A stream's first chunk, parsed whole, cost ~10 k instructions."""
        role_at = self.role_at
        if not role_at:
            return None
        head, found, rest = data.partition(role_at)
        if not found or not head:
            return None
        if rest not in self.tails or not _plain_head(head):
            return None
        self._head, self._tail = head, rest
        return ""

    def finish(self, data: bytes) -> FinishReason | None:
        """The reason of a chunk that says nothing but it: this stream's head, an empty text and
        a known tail with a known reason where a token's has `null` (what parsing it would come
        to); else None. Parsed whole, a stream's finish chunk cost ~7 k instructions."""
        head, content_at = self._head, self._content_at
        if not (head and data.startswith(head)):
            return None
        start = len(head) + len(content_at)
        if data[len(head) : start] != content_at or data[start : start + 1] != b'"':
            return None
        before, mark, after = data[start + 1 :].partition(_REASON_AT)
        if not mark:
            return None
        name, quote, rest = after.partition(b'"')
        if not quote or before + _NO_REASON + rest not in self.tails:
            return None
        return _FINISH_BYTES.get(name)

    def usage(self, data: bytes) -> dict[str, Any] | None:
        """The usage of a chunk of no choices that says nothing else: this stream's head, then
        `"choices":[],"usage":{...}}` (the object parsed alone); else None."""
        head = self._head
        if not (head and data.startswith(head)) or data[-1:] != b"}":
            return None
        start = len(head) + len(_USAGE_AT)
        if data[len(head) : start] != _USAGE_AT:
            return None
        try:
            usage = orjson.loads(data[start - 1 : -1])
        except orjson.JSONDecodeError:
            return None
        return usage if type(usage) is dict else None


class StreamEnding:
    """An upstream stream's decoder, in either wire format (the relay's `StreamDecoder`): SSE
    frames in (`frame`), raw events out, and how the stream ends: its end marker (`done`: the
    body's end can be drained so the connection is reused), an error frame (`failed`), or the
    body closing (`end`) — fine once a finish reason came, else a failure. A decoder sets those
    three, and says what a stream ends with (`_tail`, `_fail`)."""

    __slots__ = ("done", "failed", "finish")
    closed_early: ClassVar[str]  # the failure when the body closes before the stream finished

    def __init__(self) -> None:
        self.finish: FinishReason | None = None
        self.done = False  # the end marker was seen
        self.failed = False  # an error frame ended the stream

    @property
    def over(self) -> bool:
        """The stream ended (its end marker, or an error frame): nothing more is read."""
        return self.done or self.failed

    def frame(self, event: str | None, data: bytes) -> list[RawEvent]:
        """One SSE frame (its event name, its data) → raw events."""
        raise NotImplementedError

    def _tail(self) -> list[RawEvent]:
        raise NotImplementedError

    def _fail(self, error: ErrorInfo) -> list[RawEvent]:
        raise NotImplementedError

    def end(self) -> list[RawEvent]:
        """The body ended: fine after a finish reason, else a failure."""
        if self.over:
            return []
        if self.finish is not None:
            self.done = True
            return self._tail()
        return self._fail(ErrorInfo(ErrorKind.UPSTREAM, self.closed_early, code="upstream_closed_early"))

    def cut(self, error: ErrorInfo) -> list[RawEvent]:
        """The stream is ending with `error` (a timeout): report what usage we have, then fail."""
        if self.over:
            return []
        return self._fail(error)


class ChunkDecoder(StreamEnding):
    """One upstream stream's state: feed it SSE frames, then `end()` when the body ends."""

    __slots__ = ("_call_ids", "_content", "_last_index", "_plain", "usage")
    closed_early = CLOSED_EARLY  # no finish_reason, no [DONE]
    plain_chunks: ClassVar[type[_PlainChunks]] = _PlainChunks  # its per-token chunks

    def __init__(self, content_parser: ContentParser | None = None) -> None:
        super().__init__()
        self._content = content_parser
        self.usage: dict[str, Any] | None = None
        self._call_ids: dict[str, int] = {}  # for tool-call deltas without an `index`
        self._last_index = -1
        self._plain = self.plain_chunks()

    def frame(self, event: str | None, data: bytes) -> list[RawEvent]:
        if self.over:
            return []
        if data == b"[DONE]":  # first: matched as a token's chunk, it was looked for as a role chunk too
            self.done = True
            return self._tail()
        if event is None and (text := self._plain.text(data)) is not None:
            if not text:
                return []
            if self._content is not None:
                return self._content.feed(text, None)
            return [TextDelta(_MESSAGE, text)]
        if event is None:  # the stream's last chunks in vLLM's shape, read as its tokens are
            plain = self._plain
            finish = plain.finish(data)
            if finish is not None:
                self.finish = finish
                ending: list[RawEvent] = []
                if self._content is not None:
                    ending.extend(self._content.finish())
                ending.append(Finished(finish))
                return ending
            usage = plain.usage(data)
            if usage is not None:
                if usage:
                    self.usage = usage
                return []
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            if event == "error":
                return self._fail(stream_error({"message": data.decode("utf-8", "replace")}))
            preview = data[:200].decode("utf-8", "replace")
            return self._fail(
                ErrorInfo(ErrorKind.UPSTREAM, f"The upstream sent a chunk that is not JSON: {preview}")
            )
        if not isinstance(chunk, dict):
            return []
        if event == "error" or chunk.get("error") or chunk.get("object") == "error":
            return self._fail(stream_error(chunk))
        out: list[RawEvent] = []
        usage = chunk.get("usage")
        if usage:
            self.usage = usage
        choices = chunk.get("choices")
        if choices:
            choice = choices[0]
            self._choice(choice, out)
            reason = choice.get("finish_reason")
            if reason:
                self.finish = FINISH_REASONS.get(reason, FinishReason.STOP)
                if self._content is not None:
                    out.extend(self._content.finish())
                out.append(Finished(self.finish))
        progress = chunk.get("prompt_progress")
        if progress:
            total = _count(progress.get("total"))
            cache, processed = _count(progress.get("cache")), _count(progress.get("processed"))
            fraction = min(1.0, processed / total) if total else 0.0
            out.append(PromptProgress(fraction, processed=processed, total=total, cached=cache))
        return out

    def _choice(self, choice: dict[str, Any], out: list[RawEvent]) -> None:
        """What a choice carries besides its finish reason."""
        delta = choice.get("delta")
        if delta:
            self._delta(delta, choice.get("logprobs"), out)

    def _delta(self, delta: dict[str, Any], logprobs: dict[str, Any] | None, out: list[RawEvent]) -> None:
        if len(delta) == 1 and not logprobs:  # per token, almost always `{"content": "..."}`
            content = delta.get("content")
            if content and isinstance(content, str):
                if self._content is not None:
                    out.extend(self._content.feed(content, None))
                else:
                    out.append(TextDelta(ItemKind.MESSAGE, content))
                return
        content_lp = refusal_lp = None
        if logprobs:
            content_lp = _logprobs(logprobs.get("content"))
            refusal_lp = _logprobs(logprobs.get("refusal"))
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        content = delta.get("content")
        if reasoning:
            # Logprobs of a reasoning-only chunk belong to its reasoning tokens.
            out.append(TextDelta(ItemKind.REASONING, reasoning, None if content else content_lp))
        if content:
            if self._content is not None:
                out.extend(self._content.feed(content, content_lp))
            else:
                out.append(TextDelta(ItemKind.MESSAGE, content, content_lp))
        refusal = delta.get("refusal")
        if refusal:
            out.append(TextDelta(ItemKind.REFUSAL, refusal, refusal_lp))
        calls = delta.get("tool_calls")
        if calls:
            for call in calls:
                self._tool_call(call, out)
        legacy = delta.get("function_call")
        if legacy:
            out.append(
                ToolCallDelta(
                    LEGACY_CALL_INDEX, legacy.get("arguments") or "", name=legacy.get("name") or None
                )
            )

    def _tool_call(self, call: dict[str, Any], out: list[RawEvent]) -> None:
        function = call.get("function") or {}
        call_id = call.get("id") or None
        index = call.get("index")
        if not isinstance(index, int):
            # No index (some Ollama versions): a new id starts a new call, else it continues.
            if call_id is not None and call_id not in self._call_ids:
                self._call_ids[call_id] = self._last_index + 1
            index = self._call_ids[call_id] if call_id is not None else max(self._last_index, 0)
        self._last_index = max(self._last_index, index)
        name = function.get("name") or None
        arguments = function.get("arguments") or ""
        if not isinstance(arguments, str):  # a few servers send the arguments as an object
            arguments = orjson.dumps(arguments).decode()
        if arguments or name or call_id:
            out.append(ToolCallDelta(index, arguments, call_id, name))

    def _tail(self) -> list[RawEvent]:
        out: list[RawEvent] = []
        if self._content is not None and self.finish is None:
            out.extend(self._content.finish())
        if self.usage is not None:
            out.append(UsageReport(usage_from(self.usage)))
        return out

    def _fail(self, error: ErrorInfo) -> list[RawEvent]:
        self.failed = True
        return [*self._tail(), Failed(error)]


def _count(value: Any) -> int:
    """A token count from an upstream's `prompt_progress` (anything else: 0, not given)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
