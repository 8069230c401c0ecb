"""The scripted engine: deterministic replies from a YAML or JSON script, for client testing.

A script has optional pacing and a list of replies; the first reply whose `when` matches the
conversation is used. Text streams one word per delta (a word keeps its leading space),
reasoning before content, then tool calls. Token counts are deterministic: a delta is a token,
and a prompt costs its words plus four per message. The script is re-read when its file
changes, so a tester can edit it while the server runs.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from sluicegate.core.embeddings import EmbedRequest, EmbedResult
from sluicegate.core.errors import EngineFailure, ErrorKind, SluicegateError, invalid
from sluicegate.core.events import (
    Finished,
    FinishReason,
    ItemKind,
    PromptFinished,
    PromptProgress,
    PromptStarted,
    RawEvent,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    TopLogprob,
    Usage,
    UsageReport,
)
from sluicegate.core.request import ChatRequest, RawPrompt
from sluicegate.core.rerank import RerankRequest, RerankResult
from sluicegate.core.speech import SpeechRequest, TranscriptEvent, TranscriptionRequest, Voice, Voiced
from sluicegate.engines.base import (
    CHAT_ONLY,
    Capabilities,
    ConfigError,
    Engine,
    ModelInfo,
    ProgressCallback,
    Task,
    not_served,
)
from sluicegate.engines.scripted_speech import ScriptedReply, as_chat, scripted_transcript, scripted_voice

WORD = re.compile(r"\s*\S+|\s+$")
PROMPT_PROGRESS_STEPS = 4
LOAD_PROGRESS_STEPS = 5

_PACING_KEYS = {"token_delay_ms", "first_token_delay_ms"}
_WHEN_KEYS = {"last_role", "user_contains", "user_matches", "has_tools", "tool_contains"}
_REPLY_KEYS = _PACING_KEYS | {
    "when",
    "reasoning",
    "content",
    "refusal",
    "tool_calls",
    "finish_reason",
    "usage",
    "error_after_deltas",
    "error_message",
    "error_code",
    "echo_prompt",
}
_TOP_KEYS = _PACING_KEYS | {"load_seconds", "replies"}
_USAGE_KEYS = {"prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens"}
KEYS = frozenset({"id", "engine", "script", "tasks"})  # a `[[models]]` table of this engine
TASKS: tuple[Task, ...] = ("chat", "embeddings", "rerank", "transcription", "speech")
EMBEDDING_SIZE = 16  # the scripted embeddings' dimensions
_ROLES = ("system", "developer", "user", "assistant", "tool")


def words(text: str) -> list[str]:
    """Split text into deltas whose concatenation is exactly the text."""
    return WORD.findall(text)


@dataclass(slots=True)
class ScriptedToolCall:
    name: str
    arguments: str
    id: str | None = None


@dataclass(slots=True)
class Reply:
    when: dict[str, Any] = field(default_factory=dict)
    reasoning: str = ""
    content: str = ""
    refusal: str = ""
    tool_calls: list[ScriptedToolCall] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    usage: dict[str, int] = field(default_factory=dict)
    error_after_deltas: int | None = None
    error_message: str | None = None
    error_code: str | None = None  # e.g. context_length_exceeded, to test how clients react
    token_delay_ms: float | None = None
    first_token_delay_ms: float | None = None
    echo_prompt: bool = False  # answer with the whole prompt, tool calls included (what reached it)

    def matches(self, request: ChatRequest) -> bool:
        when = self.when
        if "last_role" in when and (not request.messages or request.messages[-1].role != when["last_role"]):
            return False
        user = request.last_user_text
        if "user_contains" in when and when["user_contains"].lower() not in user.lower():
            return False
        if "user_matches" in when and not re.search(when["user_matches"], user):
            return False
        if "tool_contains" in when and when["tool_contains"].lower() not in _tool_results(request).lower():
            return False
        return not ("has_tools" in when and bool(request.tools) != when["has_tools"])


def _tool_results(request: ChatRequest) -> str:
    """The tool results since the last user message (what a tool loop fed back), joined."""
    texts: list[str] = []
    for message in reversed(request.messages):
        if message.role == "user":
            break
        if message.role == "tool":
            texts.append(message.text)
    return "\n".join(reversed(texts))


@dataclass(slots=True)
class Script:
    replies: list[Reply]
    token_delay_ms: float = 0.0
    first_token_delay_ms: float = 0.0
    load_seconds: float = 0.0

    def pick(self, request: ChatRequest) -> Reply:
        for reply in self.replies:
            if reply.matches(request):
                return reply
        return Reply(content="")  # a script without a default answers with an empty message


def _number(where: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"{where}: `{key}` must be a non-negative number, got {value!r}")
    return float(value)


def _text(where: str, key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where}: `{key}` must be a string, got {type(value).__name__}")
    return value


def _parse_tool_call(where: str, raw: Any) -> ScriptedToolCall:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise ConfigError(f"{where}: each tool call needs a string `name`")
    unknown = set(raw) - {"name", "arguments", "id"}
    if unknown:
        raise ConfigError(f"{where}: unknown tool call keys {sorted(unknown)}")
    arguments = raw.get("arguments", {})
    # Default separators keep spaces in the JSON, so arguments stream in several pieces.
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    call_id = raw.get("id")
    return ScriptedToolCall(raw["name"], text, _text(where, "id", call_id) if call_id else None)


def _parse_reply(where: str, raw: Any) -> Reply:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: a reply must be a mapping")
    unknown = set(raw) - _REPLY_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown reply keys {sorted(unknown)}")
    reply = Reply()
    when = raw.get("when", {})
    if not isinstance(when, dict) or set(when) - _WHEN_KEYS:
        raise ConfigError(f"{where}: `when` takes only {sorted(_WHEN_KEYS)}")
    for key, value in when.items():
        if key == "has_tools":
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: `when.has_tools` must be true or false, got {value!r}")
        elif not isinstance(value, str):
            raise ConfigError(f"{where}: `when.{key}` must be a string, got {type(value).__name__}")
    if when.get("last_role", "user") not in _ROLES:
        raise ConfigError(f"{where}: `when.last_role` must be one of {', '.join(_ROLES)}")
    if "user_matches" in when:
        try:
            re.compile(when["user_matches"])
        except (re.error, TypeError) as exc:
            raise ConfigError(f"{where}: `user_matches` is not a valid regex: {exc}") from exc
    reply.when = when
    for key in ("reasoning", "content", "refusal", "error_message", "error_code"):
        if key in raw:
            setattr(reply, key, _text(where, key, raw[key]))
    calls = raw.get("tool_calls", [])
    if not isinstance(calls, list):
        raise ConfigError(f"{where}: `tool_calls` must be a list")
    reply.tool_calls = [_parse_tool_call(where, call) for call in calls]
    if "finish_reason" in raw:
        try:
            reply.finish_reason = FinishReason(raw["finish_reason"])
        except ValueError as exc:
            allowed = ", ".join(r.value for r in FinishReason)
            raise ConfigError(f"{where}: `finish_reason` must be one of {allowed}") from exc
    usage = raw.get("usage", {})
    if not isinstance(usage, dict) or set(usage) - _USAGE_KEYS:
        raise ConfigError(f"{where}: `usage` takes only {sorted(_USAGE_KEYS)}")
    reply.usage = {key: int(_number(where, key, value)) for key, value in usage.items()}
    if "error_after_deltas" in raw:
        reply.error_after_deltas = int(_number(where, "error_after_deltas", raw["error_after_deltas"]))
    for key in _PACING_KEYS & set(raw):
        setattr(reply, key, _number(where, key, raw[key]))
    if "echo_prompt" in raw:
        if not isinstance(raw["echo_prompt"], bool):
            raise ConfigError(f"{where}: `echo_prompt` must be true or false")
        reply.echo_prompt = raw["echo_prompt"]
    return reply


def parse_script(data: Any, source: str) -> Script:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a script must be a mapping with `replies`")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ConfigError(f"{source}: unknown script keys {sorted(unknown)}")
    replies = data.get("replies", [])
    if not isinstance(replies, list):
        raise ConfigError(f"{source}: `replies` must be a list")
    script = Script([_parse_reply(f"{source}: replies[{i}]", r) for i, r in enumerate(replies)])
    for key in ("token_delay_ms", "first_token_delay_ms", "load_seconds"):
        if key in data:
            setattr(script, key, _number(source, key, data[key]))
    return script


def load_script(path: Path) -> Script:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read script {path}: {exc.strerror}") from exc
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}") from exc
    return parse_script(data, str(path))


def demo_script() -> Script:
    text = resources.files("sluicegate.engines").joinpath("scripted_demo.yaml").read_text("utf-8")
    return parse_script(yaml.safe_load(text), "built-in demo script")


def raw_prompt_text(prompt: RawPrompt) -> str:
    """A completion's prompt as one text: fill-in-the-middle in the repo-level FIM layout with
    Qwen2.5-Coder's token names (what llama.cpp decodes), token ids as `<id>`s."""
    text = prompt.text if isinstance(prompt.text, str) else "".join(f"<{t}>" for t in prompt.text)
    if not prompt.fill_in_middle:
        return text
    files = "".join(f"<|file_sep|>{chunk.filename}\n{chunk.text}" for chunk in prompt.extra)
    return (
        f"<|repo_name|>myproject\n{files}<|file_sep|>filename\n"
        f"<|fim_prefix|>{text}{prompt.middle}<|fim_suffix|>{prompt.suffix or ''}<|fim_middle|>"
    )


def rendered_prompt(request: ChatRequest) -> str:
    """Every message of the prompt as text, images as `[image data:image/png;base…]` markers,
    tool calls with their arguments: what tests read to tell what reached the model (e.g. that
    no other API key's stored text did, or that an image came through). A completion's prompt
    as the model would read it (`raw_prompt_text`)."""
    if request.prompt is not None:
        return raw_prompt_text(request.prompt)
    lines = []
    for m in request.messages:
        calls = " ".join(f"{c.name}({c.arguments})" for c in m.tool_calls)
        parts = [] if isinstance(m.content, str) else m.content
        images = " ".join(f"[image {p.image_url[:22]}]" for p in parts if p.type == "image")
        lines.append(" ".join(x for x in (f"{m.role}: {m.text}", images, calls) if x).rstrip())
    return "\n".join(lines)


def prompt_tokens(request: ChatRequest) -> int:
    if request.prompt is not None:  # a word a token, the FIM markup one each
        raw = request.prompt
        if isinstance(raw.text, list) and not raw.fill_in_middle:
            return len(raw.text)
        return len(words(raw_prompt_text(raw).replace("<|", " <|").replace("|>", "|> ")))
    count = sum(len(words(m.text)) + 4 for m in request.messages)
    return count + sum(len(words(json.dumps(t.parameters))) + 8 for t in request.tools)


class ScriptedEngine(Engine):
    kind = "scripted"
    needs_load = True

    def __init__(
        self, model_id: str, script: Script, path: Path | None = None, tasks: frozenset[Task] = CHAT_ONLY
    ) -> None:
        super().__init__(model_id)
        self.script = script
        self.path = path
        self._mtime = path.stat().st_mtime_ns if path else 0
        self._tasks = tasks

    @classmethod
    def from_config(cls, table: dict[str, Any], base_dir: Path) -> ScriptedEngine:
        unknown = set(table) - KEYS
        if unknown:
            raise ConfigError(f"model {table['id']!r}: unknown keys {sorted(unknown)} for engine scripted")
        tasks = _tasks(table["id"], table.get("tasks", ["chat"]))
        if "script" not in table:
            return cls(table["id"], demo_script(), tasks=tasks)
        path = Path(_text(f"model {table['id']!r}", "script", table["script"])).expanduser()
        path = path if path.is_absolute() else base_dir / path
        return cls(table["id"], load_script(path), path, tasks)

    def tasks(self) -> frozenset[Task]:
        return self._tasks

    async def embed(self, request: EmbedRequest) -> EmbedResult:
        """A vector of each input's SHA-256, normalised (the same input, the same vector), one
        input per `token_delay_ms` (a slow job, to cancel)."""
        if "embeddings" not in self._tasks:
            return await super().embed(request)
        if request.dimensions is not None and request.dimensions > EMBEDDING_SIZE:
            raise invalid(
                f"Model {self.model_id!r} makes embeddings of {EMBEDDING_SIZE} dimensions; "
                f"'dimensions' cannot be {request.dimensions}.",
                param="dimensions",
            )
        vectors, tokens = [], 0
        for value in request.inputs:
            await asyncio.sleep(self.script.token_delay_ms / 1000)
            text = value if isinstance(value, str) else " ".join(map(str, value))
            tokens += len(words(text))
            digest = hashlib.sha256(text.encode()).digest()
            vector = [byte - 127.5 for byte in digest[: request.dimensions or EMBEDDING_SIZE]]
            norm = sum(x * x for x in vector) ** 0.5
            vectors.append([x / norm for x in vector])
        return EmbedResult(vectors, tokens)

    def transcribe(self, request: TranscriptionRequest) -> AsyncIterator[TranscriptEvent]:
        """The reply picked for the `prompt`, a word a segment (engines/scripted_speech.py)."""
        if "transcription" not in self._tasks:
            return super().transcribe(request)
        return scripted_transcript(self._speech_reply(request.prompt or ""), request)

    def synthesize(self, request: SpeechRequest) -> AsyncIterator[Voiced]:
        """The reply picked for the `input`, a word a sentence of tone."""
        if "speech" not in self._tasks:
            return super().synthesize(request)
        return scripted_voice(self._speech_reply(request.input), request)

    def voices(self) -> list[Voice]:
        return [Voice("scripted", "Scripted tone")] if "speech" in self._tasks else []

    def _speech_reply(self, text: str) -> ScriptedReply:
        self._refresh()
        reply = self.script.pick(as_chat(self.model_id, text))
        return ScriptedReply(
            words(reply.content),
            _pick(reply.token_delay_ms, self.script.token_delay_ms) / 1000,
            reply.error_after_deltas,
            reply.error_message,
            reply.error_code,
        )

    async def rerank(self, request: RerankRequest) -> RerankResult:
        """Each document's score: the share of the query's words it contains, one document per
        `token_delay_ms`."""
        if "rerank" not in self._tasks:
            return await super().rerank(request)
        query = {w.strip().lower() for w in words(request.query)}
        scores, tokens = [], len(query)
        for document in request.documents:
            await asyncio.sleep(self.script.token_delay_ms / 1000)
            seen = {w.strip().lower() for w in words(document)}
            tokens += len(seen)
            scores.append(len(query & seen) / len(query) if query else 0.0)
        return RerankResult(scores, tokens)

    def info(self) -> ModelInfo:
        return ModelInfo(
            id=self.model_id,
            engine=self.kind,
            created=self.created,
            display_name=f"{self.model_id} (scripted)",
            context_length=32768,
            capabilities=Capabilities(
                completion=True,
                fill_in_middle=True,
                tool_use=True,
                reasoning=True,
                vision=True,  # accepts images (and ignores them), so clients can test image input
                logprobs=True,
                reasoning_options=["off", "on"],
                reasoning_default="on",
            ),
            details={"architecture": "scripted", "format": None, "size_bytes": 0},
        )

    def _refresh(self) -> None:
        """Re-read the script if its file changed; a broken edit fails the request clearly."""
        if self.path is None:
            return
        try:
            mtime = self.path.stat().st_mtime_ns
        except OSError as exc:
            raise SluicegateError(ErrorKind.ENGINE, f"script {self.path} is gone: {exc.strerror}") from exc
        if mtime != self._mtime:
            try:
                self.script = load_script(self.path)
            except ConfigError as exc:
                raise SluicegateError(ErrorKind.ENGINE, f"script error: {exc}", code="script_error") from exc
            self._mtime = mtime

    def check(self, request: ChatRequest) -> None:
        if "chat" not in self._tasks:
            raise not_served(self.model_id, "chat")
        super().check(request)
        self._refresh()

    def count_tokens(self, request: ChatRequest) -> int | None:
        return prompt_tokens(request)  # the same count its usage reports

    async def load(self, on_progress: ProgressCallback) -> None:
        seconds = self.script.load_seconds
        for step in range(1, LOAD_PROGRESS_STEPS + 1):
            await asyncio.sleep(seconds / LOAD_PROGRESS_STEPS)
            on_progress(step / LOAD_PROGRESS_STEPS)

    async def generate(self, request: ChatRequest) -> AsyncIterator[RawEvent]:
        script = self.script
        reply = script.pick(request)
        if reply.echo_prompt:
            reply = replace(reply, content=rendered_prompt(request))
        if request.prompt is not None:  # a text completion writes text: no reasoning, no calls
            reply = replace(reply, reasoning="", refusal="", tool_calls=[])
        if not request.parallel_tool_calls and len(reply.tool_calls) > 1:
            reply = replace(reply, tool_calls=reply.tool_calls[:1])
        if request.tool_choice == "none" and reply.tool_calls:
            reply = replace(reply, tool_calls=[])  # keeps pacing, usage, refusal and errors
        if request.reasoning_effort in ("off", "none") and reply.reasoning:
            reply = _without_reasoning(reply)
        first_delay = _pick(reply.first_token_delay_ms, script.first_token_delay_ms) / 1000
        token_delay = _pick(reply.token_delay_ms, script.token_delay_ms) / 1000

        yield PromptStarted()
        for step in range(1, PROMPT_PROGRESS_STEPS + 1):
            if first_delay:
                await asyncio.sleep(first_delay / PROMPT_PROGRESS_STEPS)
            yield PromptProgress(step / PROMPT_PROGRESS_STEPS)
        yield PromptFinished()

        deltas, finish = _plan(reply, request)
        sampling = request.sampling
        usage = Usage(prompt_tokens=prompt_tokens(request))
        yield UsageReport(_override(usage, reply))  # the prompt's cost is known from here on
        raw = request.prompt
        if raw is not None and raw.echo and (echoed := raw_prompt_text(raw)):
            yield TextDelta(ItemKind.MESSAGE, echoed)  # OpenAI's `echo`: the prompt, then the rest
        for count, delta in enumerate(deltas):
            if reply.error_after_deltas is not None and count >= reply.error_after_deltas:
                yield UsageReport(_override(usage, reply))
                raise EngineFailure(
                    reply.error_message or f"scripted failure after {count} deltas",
                    code=reply.error_code or "scripted_failure",
                )
            if count:
                # Even with no delay, give the loop a turn per token, as a real model does: the
                # first token reaches the client at once, and heartbeats and disconnects still work.
                await asyncio.sleep(token_delay)
            if type(delta) is TextDelta and sampling.logprobs:
                delta.logprobs = [_certain(delta.text, sampling.top_logprobs)]
            usage.completion_tokens += 1
            if type(delta) is TextDelta and delta.channel is ItemKind.REASONING:
                usage.reasoning_tokens += 1
            yield delta
        yield UsageReport(_override(usage, reply))
        yield Finished(finish)

    async def unload(self) -> None:
        return None


def _tasks(model_id: str, value: Any) -> frozenset[Task]:
    if not isinstance(value, list) or not value or any(task not in TASKS for task in value):
        raise ConfigError(f"model {model_id!r}: 'tasks' must be a list of {', '.join(TASKS)}")
    return frozenset(task for task in TASKS if task in value)


def _without_reasoning(reply: Reply) -> Reply:
    """The same reply with reasoning turned off (LM Studio `reasoning: "off"`)."""
    return replace(reply, reasoning="")


def _pick(value: float | None, default: float) -> float:
    return default if value is None else value


def _certain(token: str, top: int | None) -> TokenLogprob:
    """A scripted token is certain: probability 1, and no alternative has any chance."""
    raw = list(token.encode())
    return TokenLogprob(token, 0.0, raw, [TopLogprob(token, 0.0, raw)] if top else [])


def _override(usage: Usage, reply: Reply) -> Usage:
    out = Usage(usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, usage.reasoning_tokens)
    for key, value in reply.usage.items():
        setattr(out, key, value)
    return out


def _plan(reply: Reply, request: ChatRequest) -> tuple[list[TextDelta | ToolCallDelta], FinishReason]:
    """Every delta the reply streams, cut by `stop` and `max_tokens`, and its finish reason."""
    finish = reply.finish_reason or (FinishReason.TOOL_CALLS if reply.tool_calls else FinishReason.STOP)
    content = reply.content
    stopped = False
    for stop in request.sampling.stop:
        at = content.find(stop)
        if at >= 0:
            content, stopped = content[:at], True
    deltas: list[TextDelta | ToolCallDelta] = [
        TextDelta(ItemKind.REASONING, w) for w in words(reply.reasoning)
    ]
    deltas += [TextDelta(ItemKind.MESSAGE, w) for w in words(content)]
    deltas += [TextDelta(ItemKind.REFUSAL, w) for w in words(reply.refusal)]
    if stopped:
        finish = FinishReason.STOP
    else:
        for index, call in enumerate(reply.tool_calls):
            first, *rest = words(call.arguments) or [""]
            deltas.append(ToolCallDelta(index, first, call.id or None, call.name))
            deltas += [ToolCallDelta(index, piece) for piece in rest]
    limit = request.sampling.max_tokens
    if limit is not None and len(deltas) > limit:
        deltas, finish = deltas[:limit], FinishReason.LENGTH
    return deltas, finish
