"""ChatRequest: what every dialect parses into and every engine generates from.

Compiled (`sluicegate/_compiled.py`): a request start makes a `ChatRequest`, its
`SamplingParams`, `RequestOptions` and a `Message` per message from compiled code (the dialects'
parse), and the upstream engine reads ~30 fields back, which for an interpreted class were
generic attribute lookups. Each class the parse makes writes its `__init__` out, as
core/events.py's do: the one `dataclasses` generates is Python run through `tp_init` (an
argument tuple, a keyword dict, a frame), where a written-out one is native (a Chat Completions
parse 40.3 → 20.9 k instructions a start, the upstream body 15.5 → 6.9 k: bench/README.md,
gateway "Round sixteen"). tests/unit/core/test_dataclass_inits.py checks each against its
fields (default factories: None, a new one made in the body).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from sluicegate.core.audio import Sound
from sluicegate.core.images import Picture

Role = Literal["system", "developer", "user", "assistant", "tool"]


@dataclass(slots=True)
class ContentPart:
    type: Literal["text", "image", "audio"]
    text: str = ""
    image_url: str = ""  # an http(s) URL or a data: URL
    # Audio (Chat's `input_audio`): base64 data and its format ("wav", "mp3"). Only a model whose
    # projector has an audio encoder takes it (`Engine.check` refuses it for the others).
    audio_data: str = ""
    audio_format: str = ""
    # The image decoded, for an engine that reads pixels itself (filled in by the turn runner).
    picture: Picture | None = field(default=None, compare=False, repr=False)
    # The audio checked, for an engine that hears it (filled in by the turn runner).
    sound: Sound | None = field(default=None, compare=False, repr=False)

    def __init__(
        self,
        type: Literal["text", "image", "audio"],
        text: str = "",
        image_url: str = "",
        audio_data: str = "",
        audio_format: str = "",
        picture: Picture | None = None,
        sound: Sound | None = None,
    ) -> None:
        self.type = type
        self.text = text
        self.image_url = image_url
        self.audio_data = audio_data
        self.audio_format = audio_format
        self.picture = picture
        self.sound = sound


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, exactly as the model produced it

    def __init__(
        self,
        id: str,
        name: str,
        arguments: str,
    ) -> None:
        self.id = id
        self.name = name
        self.arguments = arguments


@dataclass(slots=True)
class Message:
    role: Role
    content: str | list[ContentPart] = ""
    name: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None  # on role == "tool": which call this answers
    reasoning: str | None = None  # reasoning text an assistant turn carried

    @property
    def text(self) -> str:
        """The message's text parts joined; images are left out."""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content if part.type == "text")

    def __init__(
        self,
        role: Role,
        content: str | list[ContentPart] = "",
        name: str | None = None,
        tool_calls: list[ToolCall] | None = None,
        tool_call_id: str | None = None,
        reasoning: str | None = None,
    ) -> None:
        self.role = role
        self.content = content
        self.name = name
        self.tool_calls = [] if tool_calls is None else tool_calls
        self.tool_call_id = tool_call_id
        self.reasoning = reasoning


@dataclass(slots=True)
class ToolSpec:
    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    strict: bool = False

    def __init__(
        self,
        name: str,
        description: str = "",
        parameters: dict[str, Any] | None = None,
        strict: bool = False,
    ) -> None:
        self.name = name
        self.description = description
        self.parameters = {} if parameters is None else parameters
        self.strict = strict


ProviderType = Literal["plugin", "ephemeral_mcp"]


@dataclass(slots=True, frozen=True)
class ProviderInfo:
    """Who runs a server-side tool: a plugin (configured MCP servers are the plugins
    `mcp/<name>`, as in LM Studio) or an MCP server given in the request itself."""

    type: ProviderType
    id: str  # plugin id ("mcp/<name>", "files") or the request's server_label
    server_label: str  # the Responses API's `server_label` for this provider

    def lmstudio(self) -> dict[str, str]:
        """LM Studio's `provider_info` object."""
        if self.type == "plugin":
            return {"type": "plugin", "plugin_id": self.id}
        return {"type": "ephemeral_mcp", "server_label": self.server_label}


@dataclass(slots=True)
class ServerTool:
    """A tool the server runs itself (MCP, plugin); the engine sees it as a plain function."""

    name: str
    description: str
    input_schema: dict[str, Any]
    provider: ProviderInfo
    annotations: dict[str, Any] = field(default_factory=dict)

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.input_schema)


@dataclass(slots=True)
class SamplingParams:
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    typical_p: float | None = None  # locally typical sampling; 1: off
    repeat_penalty: float | None = None
    repeat_last_n: int | None = None  # tokens the penalties look back over; -1: the whole context
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    # llama.cpp's further samplers (llama-server's names; None: off / llama.cpp's default):
    # DRY (penalises extending a repeated sequence), XTC (excludes the top choices), top-n-sigma,
    # and mirostat 1 or 2 (in place of the top-k/top-p/min-p chain).
    dry_multiplier: float | None = None  # 0: off
    dry_base: float | None = None
    dry_allowed_length: int | None = None
    dry_penalty_last_n: int | None = None  # -1: the whole context; 0: off
    dry_sequence_breakers: list[str] | None = None
    xtc_probability: float | None = None  # 0: off
    xtc_threshold: float | None = None
    top_n_sigma: float | None = None  # <= 0: off
    mirostat: int = 0  # 0: off, 1 or 2: that version
    mirostat_tau: float | None = None
    mirostat_eta: float | None = None
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    max_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    n: int = 1
    # Added to a token's logit before sampling (OpenAI's and llama-server's `logit_bias`);
    # -inf (llama-server's `false`) or -100 bans the token.
    logit_bias: dict[int, float] = field(default_factory=dict)
    # llama-server's text keys of `logit_bias`: the engine tokenizes each (no special tokens)
    # and biases every token of it.
    logit_bias_text: dict[str, float] = field(default_factory=dict)
    # The output's token ids wanted (llama-server's `tokens`): engines that have them put them
    # on the deltas' `TokenLogprob`s.
    token_ids: bool = False
    ignore_eos: bool = False  # llama-server's: end-of-generation tokens are banned (-inf)

    def __init__(
        self,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        min_p: float | None = None,
        typical_p: float | None = None,
        repeat_penalty: float | None = None,
        repeat_last_n: int | None = None,
        presence_penalty: float | None = None,
        frequency_penalty: float | None = None,
        dry_multiplier: float | None = None,
        dry_base: float | None = None,
        dry_allowed_length: int | None = None,
        dry_penalty_last_n: int | None = None,
        dry_sequence_breakers: list[str] | None = None,
        xtc_probability: float | None = None,
        xtc_threshold: float | None = None,
        top_n_sigma: float | None = None,
        mirostat: int = 0,
        mirostat_tau: float | None = None,
        mirostat_eta: float | None = None,
        seed: int | None = None,
        stop: list[str] | None = None,
        max_tokens: int | None = None,
        logprobs: bool = False,
        top_logprobs: int | None = None,
        n: int = 1,
        logit_bias: dict[int, float] | None = None,
        logit_bias_text: dict[str, float] | None = None,
        token_ids: bool = False,
        ignore_eos: bool = False,
    ) -> None:
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.min_p = min_p
        self.typical_p = typical_p
        self.repeat_penalty = repeat_penalty
        self.repeat_last_n = repeat_last_n
        self.presence_penalty = presence_penalty
        self.frequency_penalty = frequency_penalty
        self.dry_multiplier = dry_multiplier
        self.dry_base = dry_base
        self.dry_allowed_length = dry_allowed_length
        self.dry_penalty_last_n = dry_penalty_last_n
        self.dry_sequence_breakers = dry_sequence_breakers
        self.xtc_probability = xtc_probability
        self.xtc_threshold = xtc_threshold
        self.top_n_sigma = top_n_sigma
        self.mirostat = mirostat
        self.mirostat_tau = mirostat_tau
        self.mirostat_eta = mirostat_eta
        self.seed = seed
        self.stop = [] if stop is None else stop
        self.max_tokens = max_tokens
        self.logprobs = logprobs
        self.top_logprobs = top_logprobs
        self.n = n
        self.logit_bias = {} if logit_bias is None else logit_bias
        self.logit_bias_text = {} if logit_bias_text is None else logit_bias_text
        self.token_ids = token_ids
        self.ignore_eos = ignore_eos


@dataclass(slots=True)
class FileChunk:
    """Another file given as context to a fill-in-the-middle prompt (llama-server's
    `input_extra`): the FIM repo-level layout puts each before the prefix."""

    filename: str
    text: str

    def __init__(
        self,
        filename: str,
        text: str,
    ) -> None:
        self.filename = filename
        self.text = text


@dataclass(slots=True)
class RawPrompt:
    """A text completion's prompt: the model continues it as it is, with no chat template, and
    what it writes is text (never parsed into reasoning or tool calls).

    With `suffix` (or `extra`), it is fill-in-the-middle: the engine lays out prefix (`text`),
    suffix and extra files with its tokenizer's FIM tokens, and the model writes the middle.
    """

    # The text, or token ids as the client sent them; llama-server's mixed prompts are token
    # ids with texts among them (each text tokenized where it stands).
    text: str | list[int] | list[int | str]
    suffix: str | None = None
    extra: list[FileChunk] = field(default_factory=list)
    # llama-server's infill `prompt`: text after the prefix that starts the middle (special
    # tokens in it are read as such, unlike in prefix and suffix).
    middle: str = ""
    echo: bool = False  # the output starts with the prompt itself (OpenAI's `echo`)
    # llama-server's `multimodal_data`: image parts, one per media marker in `text` (a string),
    # in order; decoded by the turn runner like a message's images, for an engine that reads them.
    media: list[ContentPart] = field(default_factory=list)

    @property
    def fill_in_middle(self) -> bool:
        return self.suffix is not None or bool(self.extra)

    def __init__(
        self,
        text: str | list[int] | list[int | str],
        suffix: str | None = None,
        extra: list[FileChunk] | None = None,
        middle: str = "",
        echo: bool = False,
        media: list[ContentPart] | None = None,
    ) -> None:
        self.text = text
        self.suffix = suffix
        self.extra = [] if extra is None else extra
        self.middle = middle
        self.echo = echo
        self.media = [] if media is None else media


ToolChoice = Literal["auto", "none", "required"] | str  # a str other than the three: that tool


@dataclass(slots=True)
class RequestOptions:
    """How the server serves a request, as opposed to what the model generates: settings the
    registry and engines read themselves (never sent on to an upstream)."""

    # LM Studio's `ttl`: idle seconds before the instance this request used is unloaded.
    ttl: float | None = None
    # What an engine with a policy does with a prompt longer than its context: "error" (a 400,
    # the default), "rolling_window" or "truncate_middle" (llamacpp; None: the model's setting).
    context_overflow: str | None = None
    # LM Studio's per-request `context_length` (the dialect checked it against the model's
    # maximum). An instance this request loads just in time loads with it; an engine that
    # already runs also caps this request's context (prompt + output) at it (llamacpp).
    context_length: int | None = None

    def __init__(
        self,
        ttl: float | None = None,
        context_overflow: str | None = None,
        context_length: int | None = None,
    ) -> None:
        self.ttl = ttl
        self.context_overflow = context_overflow
        self.context_length = context_length


@dataclass(slots=True)
class ChatRequest:
    model: str
    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    tool_choice: ToolChoice = "auto"
    parallel_tool_calls: bool = True
    sampling: SamplingParams = field(default_factory=SamplingParams)
    reasoning_effort: str | None = None
    response_format: dict[str, Any] | None = None
    # The last message is the assistant's, left open: the reply continues it (llama-server's
    # and vLLM's `continue_final_message`, Anthropic's and Ollama's assistant prefill).
    continue_final: bool = False
    options: RequestOptions = field(default_factory=RequestOptions)
    # A text completion (`/v1/completions`, `/infill`, Ollama's raw generate): `messages` is
    # empty and the engine generates from this prompt instead (`Capabilities.completion`).
    prompt: RawPrompt | None = None
    # Pass-through only: a client's extension parameters sent on untouched to an upstream that
    # understands them (e.g. `chat_template_kwargs`, `cache_prompt` from an `extra_body`). The
    # server itself reads nothing here; what it reads is a typed field (`options`), and tasks
    # other than chat are requests of their own (`Engine.embed`, `Engine.rerank`).
    extra: dict[str, Any] = field(default_factory=dict)
    # OpenAI's Predicted Outputs (`prediction`): text most of the answer is expected to repeat.
    # llamacpp drafts from it; an OpenAI-compatible upstream gets it as `prediction`.
    prediction: str | None = None
    # Headers the engine adds to the response, set while it checks the request (e.g. how many
    # messages a context-overflow policy dropped).
    response_headers: dict[str, str] = field(default_factory=dict)

    @property
    def continues_reasoning(self) -> bool:
        """Whether the continued message is reasoning alone (its reasoning goes on)."""
        if not (self.continue_final and self.messages and self.messages[-1].role == "assistant"):
            return False
        last = self.messages[-1]
        return bool(last.reasoning) and not last.text

    @property
    def last_user_text(self) -> str:
        """The last user message's text; a completion's prompt text (what the user wrote)."""
        if self.prompt is not None and isinstance(self.prompt.text, str):
            return self.prompt.text
        for message in reversed(self.messages):
            if message.role == "user":
                return message.text
        return ""

    def __init__(
        self,
        model: str,
        messages: list[Message],
        tools: list[ToolSpec] | None = None,
        tool_choice: ToolChoice = "auto",
        parallel_tool_calls: bool = True,
        sampling: SamplingParams | None = None,
        reasoning_effort: str | None = None,
        response_format: dict[str, Any] | None = None,
        continue_final: bool = False,
        options: RequestOptions | None = None,
        prompt: RawPrompt | None = None,
        extra: dict[str, Any] | None = None,
        prediction: str | None = None,
        response_headers: dict[str, str] | None = None,
    ) -> None:
        self.model = model
        self.messages = messages
        self.tools = [] if tools is None else tools
        self.tool_choice = tool_choice
        self.parallel_tool_calls = parallel_tool_calls
        self.sampling = SamplingParams() if sampling is None else sampling
        self.reasoning_effort = reasoning_effort
        self.response_format = response_format
        self.continue_final = continue_final
        self.options = RequestOptions() if options is None else options
        self.prompt = prompt
        self.extra = {} if extra is None else extra
        self.prediction = prediction
        self.response_headers = {} if response_headers is None else response_headers
