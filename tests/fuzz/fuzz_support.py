"""What the hostile-input suite shares: the server it attacks, a JSON writer that can say what
JSON libraries refuse to (NaN, duplicate keys, invalid UTF-8, nesting no recursive encoder
survives), body strategies per dialect and their mutations, and the error-shape checks.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from hypothesis import strategies as st

from sluicegate.dialects.registry import dialect_for

# The e2e helpers (a real server process, configs, the fake upstream's model tables), re-exported.
sys.path.insert(0, str(Path(__file__).parent.parent / "e2e"))
from e2e_support import Server, poll, run_server, scripted, write_config
from upstream_support import dead_url, upstream_model

__all__ = ["Server", "dead_url", "poll", "run_server", "scripted", "upstream_model", "write_config"]

API_KEY = "sk-fuzz-0123456789"
# An `openai` upstream (whose request body orjson re-encodes), scripted, unknown, empty.
MODELS = ("up", "chat", "up", "chat", "nope", "")
# Every parameter a dialect reads, for mutations that set one to a hostile value. Numbers first:
# Hypothesis draws early entries more often, and numbers are what broke the server most.
PARAMETERS = (
    "seed", "max_tokens", "top_k", "max_output_tokens", "max_completion_tokens", "n", "top_logprobs",
    "temperature", "top_p", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty", "ttl",
    "context_length", "max_tool_calls", "chat_template_kwargs", "tools", "stop", "messages", "input",
    "stream", "stream_options", "logprobs", "tool_choice", "parallel_tool_calls", "response_format",
    "reasoning_effort", "instructions", "previous_response_id", "store", "background", "metadata",
    "truncation", "text", "reasoning", "include", "system_prompt", "integrations", "instance_id",
    "quantization", "echo_load_config", "eval_batch_size", "num_experts", "model",
)  # fmt: skip


# --- a JSON writer for hostile bodies --------------------------------------------------------


@dataclass(frozen=True)
class Raw:
    """Bytes put into the body as they are: literals no JSON library writes."""

    data: bytes


@dataclass(frozen=True)
class Pairs:
    """An object written from its pairs, so a key may come twice."""

    pairs: tuple[tuple[str, Any], ...]


def deep(depth: int, inner: bytes = b"1") -> Raw:
    """`depth` nested arrays and objects, written without recursion."""
    opens = b"".join(b"[" if i % 2 else b'{"a":' for i in range(depth))
    closes = b"".join(b"]" if i % 2 else b"}" for i in reversed(range(depth)))
    return Raw(opens + inner + closes)


def dumps(value: Any) -> bytes:
    if isinstance(value, Raw):
        return value.data
    if isinstance(value, Pairs):
        return b"{" + b",".join(dumps(k) + b":" + dumps(v) for k, v in value.pairs) + b"}"
    if isinstance(value, dict):
        return b"{" + b",".join(dumps(str(k)) + b":" + dumps(v) for k, v in value.items()) + b"}"
    if isinstance(value, list | tuple):
        return b"[" + b",".join(dumps(v) for v in value) + b"]"
    if isinstance(value, float) and not math.isfinite(value):
        return b"NaN" if math.isnan(value) else (b"Infinity" if value > 0 else b"-Infinity")
    # ensure_ascii keeps lone surrogates as `\ud800` escapes, which is what a hostile client sends
    return json.dumps(value).encode()


# --- hostile values -------------------------------------------------------------------------

HOSTILE_NUMBERS = [
    2**64,
    2**64 + 1,
    2**63,
    2**63 - 1,
    -(2**63) - 1,
    2**31,
    2**32,
    10**30,
    -(10**30),
    -1,
    0,
    1e308,
    -1e308,
    1e-320,
    0.5,
    float("nan"),
    float("inf"),
    float("-inf"),
    Raw(b"1e400"),
    Raw(b"-1e400"),
    Raw(b"9" * 400),
    Raw(b"1" + b"0" * 5000),
]
HOSTILE_OTHERS = [
    True,
    False,
    None,
    "",
    "\x00",
    "\ud800",
    "x" * 100_000,
    "é" * 1000,
    [],
    {},
    [[]],
    {"": None},
    deep(63),
    deep(64),
    deep(65),
    deep(300),
    deep(3000),
    Raw(b'"\xff\xfe\xc3"'),  # invalid UTF-8 inside a string
    Raw(b"\xff"),
    Raw(b"[1,]"),
    Raw(b"nul"),
]


def hostile_values() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from(HOSTILE_NUMBERS),
        st.sampled_from(HOSTILE_OTHERS),
        st.sampled_from(HOSTILE_NUMBERS + HOSTILE_OTHERS),
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=50),
        st.lists(st.integers(), max_size=3),
    )


# --- valid bodies, per dialect --------------------------------------------------------------

TEXT = st.text(max_size=30)
MODEL = st.sampled_from(MODELS)
FUNCTION_TOOL_PARAMS = st.sampled_from(
    [
        {"type": "object", "properties": {"city": {"type": "string"}}},
        {},
        {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "array"}}}}},
    ]
)


def _optional(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


def chat_bodies() -> st.SearchStrategy[dict[str, Any]]:
    message = st.one_of(
        st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "developer"]), "content": TEXT}),
        st.fixed_dictionaries(
            {
                "role": st.just("user"),
                "content": st.lists(
                    st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}), max_size=2
                ),
            }
        ),
        st.fixed_dictionaries({"role": st.just("assistant"), "content": TEXT}),
        st.fixed_dictionaries(
            {
                "role": st.just("assistant"),
                "tool_calls": st.just(
                    [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
                ),
            }
        ),
        st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": st.just("call_1"), "content": TEXT}),
    )
    tool = st.builds(
        lambda params: {"type": "function", "function": {"name": "f", "parameters": params}},
        FUNCTION_TOOL_PARAMS,
    )
    required = st.fixed_dictionaries({"model": MODEL, "messages": st.lists(message, min_size=1, max_size=3)})
    optional = _optional(
        stream=st.booleans(),
        temperature=st.floats(0, 2),
        top_p=st.floats(0, 1),
        top_k=st.integers(-1, 100),
        max_tokens=st.integers(1, 50),
        max_completion_tokens=st.integers(1, 50),
        seed=st.integers(-(2**63), 2**63 - 1),
        n=st.integers(1, 3),
        stop=st.one_of(TEXT, st.lists(TEXT, max_size=4)),
        tools=st.lists(tool, max_size=2),
        tool_choice=st.sampled_from(["auto", "none", "required"]),
        response_format=st.just({"type": "text"}),
        logprobs=st.booleans(),
        presence_penalty=st.floats(-2, 2),
        repeat_penalty=st.floats(0, 2),
        chat_template_kwargs=st.dictionaries(TEXT, st.integers(), max_size=2),
        ttl=st.integers(1, 100),
    )
    return st.builds(lambda a, b: {**a, **b}, required, optional)


def completions_bodies(model: st.SearchStrategy[str] = MODEL) -> st.SearchStrategy[dict[str, Any]]:
    """OpenAI legacy completions: a prompt as text, token ids or a list of them."""
    tokens = st.lists(st.integers(0, 300), min_size=1, max_size=5)
    prompt = st.one_of(TEXT, tokens, st.lists(TEXT, min_size=1, max_size=2), st.lists(tokens, max_size=2))
    required = st.fixed_dictionaries({"model": model, "prompt": prompt})
    optional = _optional(
        suffix=TEXT,
        stream=st.booleans(),
        stream_options=st.just({"include_usage": True}),
        echo=st.booleans(),
        logprobs=st.integers(0, 5),
        max_tokens=st.integers(1, 50),
        n=st.integers(1, 2),
        best_of=st.integers(1, 2),
        seed=st.integers(-(2**63), 2**63 - 1),
        stop=st.one_of(TEXT, st.lists(TEXT, max_size=4)),
        temperature=st.floats(0, 2),
        top_p=st.floats(0, 1),
        user=TEXT,
    )
    return st.builds(lambda a, b: {**a, **b}, required, optional)


def infill_bodies(model: st.SearchStrategy[str] = MODEL) -> st.SearchStrategy[dict[str, Any]]:
    """llama-server's /infill (the model may be left out)."""
    extra = st.lists(_optional(filename=TEXT, text=TEXT), max_size=2)
    required = st.fixed_dictionaries({"input_prefix": TEXT, "input_suffix": TEXT})
    optional = _optional(
        model=model,
        input_extra=extra,
        prompt=TEXT,
        n_predict=st.integers(-1, 50),
        n_probs=st.integers(0, 5),
        stream=st.booleans(),
        stop=st.lists(TEXT, max_size=3),
        temperature=st.floats(0, 2),
        top_k=st.integers(-1, 100),
        seed=st.integers(-(2**63), 2**63 - 1),
    )
    return st.builds(lambda a, b: {**a, **b}, required, optional)


def anthropic_bodies() -> st.SearchStrategy[dict[str, Any]]:
    """Anthropic Messages bodies: what Claude Code sends, and the block types around it."""
    text_block = st.fixed_dictionaries({"type": st.just("text"), "text": TEXT})
    user_block = st.one_of(
        text_block,
        st.fixed_dictionaries(
            {
                "type": st.just("tool_result"),
                "tool_use_id": st.just("toolu_1"),
                "content": TEXT,
                "is_error": st.booleans(),
            }
        ),
        st.fixed_dictionaries(
            {
                "type": st.just("image"),
                "source": st.fixed_dictionaries(
                    {"type": st.just("base64"), "media_type": st.just("image/png"), "data": TEXT}
                ),
            }
        ),
    )
    assistant_block = st.one_of(
        text_block,
        st.fixed_dictionaries({"type": st.just("thinking"), "thinking": TEXT, "signature": TEXT}),
        st.fixed_dictionaries(
            {
                "type": st.just("tool_use"),
                "id": st.just("toolu_1"),
                "name": st.just("f"),
                "input": st.just({"a": 1}),
            }
        ),
    )
    message = st.one_of(
        st.fixed_dictionaries({"role": st.sampled_from(["user", "system"]), "content": TEXT}),
        st.fixed_dictionaries(
            {"role": st.just("user"), "content": st.lists(user_block, min_size=1, max_size=3)}
        ),
        st.fixed_dictionaries(
            {"role": st.just("assistant"), "content": st.lists(assistant_block, max_size=3)}
        ),
    )
    tool = st.builds(lambda params: {"name": "f", "input_schema": params}, FUNCTION_TOOL_PARAMS)
    required = st.fixed_dictionaries(
        {
            "model": MODEL,
            "max_tokens": st.integers(1, 200000),
            "messages": st.lists(message, min_size=1, max_size=3),
        }
    )
    optional = _optional(
        stream=st.booleans(),
        system=st.one_of(TEXT, st.lists(text_block, max_size=3)),
        temperature=st.floats(0, 1),
        top_p=st.floats(0, 1),
        top_k=st.integers(0, 100),
        stop_sequences=st.lists(TEXT, max_size=4),
        tools=st.lists(tool, max_size=2),
        tool_choice=st.sampled_from(
            [{"type": "auto"}, {"type": "any"}, {"type": "none"}, {"type": "tool", "name": "f"}]
        ),
        thinking=st.sampled_from(
            [
                {"type": "adaptive"},
                {"type": "adaptive", "display": "omitted"},
                {"type": "enabled", "budget_tokens": 1024},
                {"type": "disabled"},
            ]
        ),
        output_config=st.sampled_from(
            [
                {"effort": "high"},
                {"effort": "low"},
                {"format": {"type": "json_schema", "schema": {"type": "object"}}},
            ]
        ),
        metadata=st.fixed_dictionaries({"user_id": TEXT}),
        context_management=st.just({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}),
    )
    return st.builds(lambda a, b: {**a, **b}, required, optional)


def responses_bodies() -> st.SearchStrategy[dict[str, Any]]:
    item = st.one_of(
        st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "developer"]), "content": TEXT}),
        st.fixed_dictionaries(
            {
                "type": st.just("message"),
                "role": st.just("user"),
                "content": st.just([{"type": "input_text", "text": "hi"}]),
            }
        ),
        st.fixed_dictionaries(
            {
                "type": st.just("function_call"),
                "call_id": st.just("call_1"),
                "name": st.just("f"),
                "arguments": st.just("{}"),
            }
        ),
        st.fixed_dictionaries(
            {
                "type": st.just("function_call_output"),
                "call_id": st.just("call_1"),
                "output": st.one_of(
                    TEXT, st.just({"a": [1, 2]}), st.just([{"type": "input_text", "text": "x"}])
                ),
            }
        ),
        st.fixed_dictionaries({"type": st.just("item_reference"), "id": TEXT}),
        st.fixed_dictionaries(
            {"type": st.just("reasoning"), "summary": st.just([{"type": "summary_text", "text": "s"}])}
        ),
    )
    tool = st.builds(
        lambda params: {"type": "function", "name": "f", "parameters": params}, FUNCTION_TOOL_PARAMS
    )
    required = st.fixed_dictionaries(
        {"model": MODEL, "input": st.one_of(TEXT, st.lists(item, min_size=1, max_size=3))}
    )
    optional = _optional(
        instructions=TEXT,
        stream=st.booleans(),
        background=st.booleans(),
        store=st.booleans(),
        temperature=st.floats(0, 2),
        max_output_tokens=st.integers(1, 50),
        seed=st.integers(-(2**63), 2**63 - 1),
        top_logprobs=st.integers(0, 20),
        max_tool_calls=st.integers(1, 5),
        tools=st.lists(tool, max_size=2),
        metadata=st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
        text=st.just({"format": {"type": "text"}}),
        reasoning=st.just({"effort": "low"}),
        previous_response_id=TEXT,
        include=st.lists(
            st.sampled_from(["message.output_text.logprobs", "reasoning.encrypted_content"]), max_size=2
        ),
    )
    return st.builds(lambda a, b: {**a, **b}, required, optional)


def lmstudio_bodies() -> st.SearchStrategy[dict[str, Any]]:
    item = st.one_of(
        st.fixed_dictionaries({"type": st.just("text"), "content": TEXT}),
        st.fixed_dictionaries({"type": st.just("image"), "data_url": st.just("data:image/png;base64,AAAA")}),
    )
    required = st.fixed_dictionaries(
        {"model": MODEL, "input": st.one_of(TEXT, st.lists(item, min_size=1, max_size=2))}
    )
    optional = _optional(
        system_prompt=TEXT,
        stream=st.booleans(),
        temperature=st.floats(0, 1),
        top_p=st.floats(0, 1),
        top_k=st.integers(-1, 100),
        max_output_tokens=st.integers(1, 50),
        context_length=st.integers(1, 4096),
        repeat_penalty=st.floats(0, 2),
        store=st.booleans(),
        previous_response_id=st.sampled_from(["resp_missing", "nope"]),
        integrations=st.lists(st.sampled_from(["files", {"type": "plugin", "id": "x"}]), max_size=2),
    )
    return st.builds(lambda a, b: {**a, **b}, required, optional)


OLLAMA_NAMES = st.sampled_from(["chat", "chat:latest", "up", "nope:7b"])


def ollama_bodies(names: st.SearchStrategy[str] = OLLAMA_NAMES) -> st.SearchStrategy[dict[str, Any]]:
    """Ollama `/api/chat` and `/api/generate` bodies (one strategy: each route ignores the
    other's fields), as the `ollama` client libraries send them."""
    message = st.one_of(
        st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant"]), "content": TEXT}),
        st.fixed_dictionaries({"role": st.just("user"), "content": TEXT, "images": st.just(["AAAA"])}),
        st.fixed_dictionaries(
            {
                "role": st.just("assistant"),
                "content": st.just(""),
                "tool_calls": st.just([{"function": {"name": "f", "arguments": {"a": 1}}}]),
            }
        ),
        st.fixed_dictionaries({"role": st.just("tool"), "tool_name": st.just("f"), "content": TEXT}),
    )
    tool = st.builds(
        lambda params: {"type": "function", "function": {"name": "f", "parameters": params}},
        FUNCTION_TOOL_PARAMS,
    )
    options = _optional(
        temperature=st.floats(0, 2),
        top_k=st.integers(-1, 100),
        num_predict=st.integers(-2, 50),
        num_ctx=st.integers(1, 4096),
        seed=st.integers(-(2**63), 2**63 - 1),
        stop=st.lists(TEXT, max_size=3),
        mirostat=st.integers(0, 2),
    )
    required = st.fixed_dictionaries({"model": names})
    optional = _optional(
        messages=st.lists(message, max_size=3),
        prompt=TEXT,
        system=TEXT,
        stream=st.booleans(),
        think=st.sampled_from([True, False, "low", "high"]),
        format=st.sampled_from(["json", "", {"type": "object"}]),
        options=options,
        keep_alive=st.sampled_from([0, "5m", -1, "1h30m", 3.5]),
        tools=st.lists(tool, max_size=2),
        raw=st.booleans(),
        suffix=TEXT,
    )
    return st.builds(lambda a, b: {**a, **b}, required, optional)


def ollama_models_bodies() -> st.SearchStrategy[dict[str, Any]]:
    """The Ollama model endpoints' bodies: show, pull, embed, copy, delete."""
    name = st.sampled_from(["chat", "chat:latest", "nope", "", "hf.co/acme/x:Q4_K_M", "hf.co/x"])
    return _optional(
        model=name,
        name=name,
        input=st.one_of(TEXT, st.lists(TEXT, max_size=2)),
        prompt=TEXT,
        source=name,
        destination=st.sampled_from(["copy", "", "chat"]),
        stream=st.booleans(),
        verbose=st.booleans(),
        keep_alive=st.sampled_from([0, "5m"]),
    )


def models_api_bodies() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        _optional(model=MODEL, context_length=st.integers(1, 4096), echo_load_config=st.booleans()),
        _optional(instance_id=st.sampled_from(["chat", "chat:2", "nope", ""])),
        _optional(model=st.sampled_from(["", "nope", "https://example.invalid/x.gguf"]), quantization=TEXT),
    )


def embeddings_bodies() -> st.SearchStrategy[dict[str, Any]]:
    required = st.fixed_dictionaries(
        {
            "model": MODEL,
            "input": st.one_of(TEXT, st.lists(TEXT, max_size=3), st.lists(st.integers(0, 50), max_size=5)),
        }
    )
    optional = _optional(
        encoding_format=st.sampled_from(["float", "base64", "x"]), dimensions=st.integers(-1, 4096), user=TEXT
    )
    return st.builds(lambda a, b: {**a, **b}, required, optional)


def rerank_bodies(model: st.SearchStrategy[str] = MODEL) -> st.SearchStrategy[dict[str, Any]]:
    """`/v1/rerank` and `/rerank`: llama-server's, Jina's and Cohere's fields."""
    document = st.one_of(TEXT, st.fixed_dictionaries({"text": TEXT}))
    required = st.fixed_dictionaries(
        {"model": model, "query": TEXT, "documents": st.lists(document, min_size=1, max_size=4)}
    )
    optional = _optional(
        top_n=st.integers(-1, 6),
        return_documents=st.booleans(),
        max_chunks_per_doc=st.integers(0, 4),
        rank_fields=st.lists(TEXT, max_size=2),
        truncation=st.booleans(),
    )
    return st.builds(lambda a, b: {**a, **b}, required, optional)


def generic_bodies() -> st.SearchStrategy[dict[str, Any]]:
    """For a POST route no strategy names: any dialect's body (a new route is still attacked)."""
    return st.one_of(
        chat_bodies(),
        responses_bodies(),
        lmstudio_bodies(),
        anthropic_bodies(),
        models_api_bodies(),
        embeddings_bodies(),
    )


# --- mutations ------------------------------------------------------------------------------


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every location in a (generated, shallow) body, the root included."""
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _paths(child, (*prefix, index))
    return found


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replace(value[head], rest, new)}
    copy = list(value)
    copy[head] = _replace(copy[head], rest, new)
    return copy


ACTIONS = [
    "parameter",
    "parameter",
    "parameter",
    "replace",
    "replace",
    "drop",
    "duplicate",
    "unknown",
    "root",
]


@st.composite
def mutated(draw: st.DrawFn, bodies: st.SearchStrategy[dict[str, Any]]) -> bytes:
    """A valid body with a few hostile edits (a parameter set to a hostile value, a value deep
    inside replaced, a key dropped, duplicated or unknown, the whole body replaced), then
    written, possibly with garbage around it."""
    body: Any = draw(bodies)
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3, 0]))):
        action = draw(st.sampled_from(ACTIONS))
        inner = _paths(body)[1:]
        if action == "parameter" and isinstance(body, dict):
            body = {**body, draw(st.sampled_from(PARAMETERS)): draw(hostile_values())}
        elif action == "unknown" and isinstance(body, dict):
            body = {**body, draw(st.text(max_size=8)): draw(hostile_values())}
        elif action == "root":
            body = draw(hostile_values())
        elif action == "replace" and inner:
            body = _replace(body, draw(st.sampled_from(inner)), draw(hostile_values()))
        elif action == "drop" and inner:
            path = draw(st.sampled_from(inner))
            parent: Any = body
            for step in path[:-1]:
                parent = parent[step]
            key = path[-1]
            if isinstance(parent, dict):
                body = _replace(body, path[:-1], {k: v for k, v in parent.items() if k != key})
            else:
                body = _replace(body, path[:-1], [v for i, v in enumerate(parent) if i != key])
        elif action == "duplicate" and isinstance(body, dict) and body:
            key = draw(st.sampled_from(sorted(body)))
            body = Pairs((*body.items(), (key, draw(hostile_values()))))
            break  # a Pairs node cannot be walked into
    data = dumps(body)
    framing = draw(
        st.sampled_from(["plain", "plain", "plain", "plain", "truncated", "trailing", "bom", "spaces"])
    )
    if framing == "truncated":
        data = data[: draw(st.integers(0, max(0, len(data) - 1)))]
    elif framing == "trailing":
        data += b"}garbage"
    elif framing == "bom":
        data = b"\xef\xbb\xbf" + data
    elif framing == "spaces":
        data = b" \n\t" + data + b"\n"
    return data


CONTENT_TYPES = [
    "application/json",
    "application/json",
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/json; charset=latin-1",
    None,
]


# --- invariants -----------------------------------------------------------------------------


# The dialects whose error shape is not OpenAI's, by their registry name.
SHAPES = {"infill": "llama_server", "llamaserver": "llama_server", "lmstudio": "lmstudio"}
SHAPES |= {"ollama": "ollama", "anthropic": "anthropic"}


def shape_of(path: str) -> str:
    """The error shape of the API a path belongs to, as the server's dialect registry says."""
    if path.startswith("/api/v0/"):  # LM Studio's older API: the same shape, no dialect of its own
        return "lmstudio"
    return SHAPES.get(dialect_for(path).name, "openai")


def check_answer(method: str, path: str, response: httpx.Response) -> None:
    """No 5xx; an error has a JSON body in the error shape of the path's API."""
    where = f"{method} {path} -> {response.status_code}: {response.text[:300]!r}"
    # The shape of the path the server got: httpx folds dot segments (`/slots/..` is `/`).
    path = response.request.url.path
    # llama-server's one 5xx that is no failure: 501 for what this model cannot do (a tokenizer).
    not_supported = response.status_code == 501 and shape_of(path) == "llama_server"
    if not_supported:
        assert response.json()["error"]["type"] == "not_supported_error", where
    assert response.status_code < 500 or not_supported, where
    if response.status_code < 400:
        return
    assert response.headers.get("content-type", "").startswith("application/json"), where
    body = response.json()
    assert isinstance(body, dict), where
    kind = shape_of(path)
    if kind == "anthropic" and body.get("type") == "error":
        assert set(body["error"]) >= {"type", "message"}, where
        return
    assert set(body) == {"error"}, where
    error = body["error"]
    if kind == "ollama":  # Ollama's error is a string
        assert isinstance(error, str) and error and "Traceback" not in error, where
        return
    assert isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"], where
    assert "Traceback" not in error["message"], where
    if kind == "llama_server":  # {"code": <status>, "message", "type"}
        assert set(error) == {"code", "message", "type"} and error["code"] == response.status_code, where
    elif kind == "lmstudio":
        assert isinstance(error.get("type"), str), where
        assert set(error) <= {"type", "message", "code", "param"}, where
    else:
        assert set(error) == {"message", "type", "param", "code"}, where


def metric_totals(text: str) -> dict[str, float]:
    """Every sample of a /metrics page summed by name, labels ignored."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            key = name.split("{")[0]
            totals[key] = totals.get(key, 0.0) + float(value)
    return totals
