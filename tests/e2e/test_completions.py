"""Text completions end to end: OpenAI's `/v1/completions` through the official `openai` SDK
and llama-server's `/infill`, on the scripted engine, a real llama.cpp engine (the demo GGUF
with fill-in-the-middle tokens) and an `openai` upstream (the fake one)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
from e2e_support import SLOW_WORDS, Server, metric, parse_sse, poll, scripted
from fake_upstream import FakeUpstream, fake_upstream
from upstream_support import upstream_model

pytestmark = pytest.mark.e2e

CONTINUATION = " upon a time there was a model that wrote text."
PREFIX = "def add(a, b):\n    return"
SUFFIX = "\n\nprint(add(1, 2))\n"
FIM_HEAD = "<|repo_name|>myproject\n<|file_sep|>filename\n<|fim_prefix|>"


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with fake_upstream("up") as fake:
        yield fake


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from sluicegate.demo.model import make_demo_gguf

    folder = tmp_path_factory.mktemp("fim-gguf")
    fim = make_demo_gguf(folder / "fim.gguf", fim=True, ends_replies=False)
    return fim, make_demo_gguf(folder / "plain.gguf", ends_replies=False)


@pytest.fixture(scope="module")
def server(start_server: Any, gguf: tuple[Path, Path], upstream: FakeUpstream) -> Server:
    fim, plain = gguf
    common = {"engine": "llamacpp", "batch_size": 128, "context_length": 2048}
    return start_server(  # type: ignore[no-any-return]
        models=[
            {"id": "fim", "path": str(fim), **common},  # first: `/infill` without a model goes here
            {"id": "plain", "path": str(plain), **common},
            scripted("text", "completions.yaml"),
            scripted("text-slow", "slow.yaml"),
            upstream_model("relay", upstream, scenario="up-model"),
        ]
    )


@pytest.fixture
def sdk(server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.api_url, api_key="unused", max_retries=0, timeout=60.0) as client:
        yield client


def _tokens(path: Path, text: str) -> int:
    from sluicegate.engines.llamacpp.runtime import Vocabulary

    vocabulary = Vocabulary(path)
    try:
        return len(vocabulary.tokenize(text))
    finally:
        vocabulary.close()


# --- /v1/completions on the scripted engine ---------------------------------------------


def test_completion_non_streaming(sdk: openai.OpenAI) -> None:
    completion = sdk.completions.create(model="text", prompt="Once", max_tokens=64)
    assert completion.object == "text_completion" and completion.id.startswith("cmpl-")
    assert completion.model == "text"
    assert completion.system_fingerprint is not None and completion.system_fingerprint.startswith("b")
    choice = completion.choices[0]
    assert choice.index == 0 and choice.text == CONTINUATION and choice.finish_reason == "stop"
    assert completion.usage is not None and completion.usage.completion_tokens == len(CONTINUATION.split())


def test_completion_defaults_to_16_tokens_like_openai(sdk: openai.OpenAI) -> None:
    completion = sdk.completions.create(model="text-slow", prompt="go")
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens == 16


def test_completion_streaming_with_usage(sdk: openai.OpenAI) -> None:
    stream = sdk.completions.create(
        model="text", prompt="Once", max_tokens=64, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert all(c.object == "text_completion" for c in chunks)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == CONTINUATION
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert not chunks[-1].choices and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == len(CONTINUATION.split())


def test_completion_stream_wire_shape(server: Server) -> None:
    body = {"model": "text", "prompt": "Once", "max_tokens": 3, "stream": True}
    response = httpx.post(f"{server.api_url}/completions", json=body, timeout=30)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    frames = [f for f in parse_sse(response.text) if not f.is_heartbeat]
    assert frames[-1].is_done
    chunks = [f.json() for f in frames[:-1]]
    assert [c["choices"][0]["text"] for c in chunks] == [" upon", " a", " time", ""]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    for c in chunks:
        # No usage without include_usage; the build that answered, as in the body.
        assert set(c) == {"id", "object", "created", "model", "system_fingerprint", "choices"}
        assert set(c["choices"][0]) == {"index", "text", "logprobs", "finish_reason"}


def test_echo_stop_and_a_list_of_one_prompt(sdk: openai.OpenAI) -> None:
    echoed = sdk.completions.create(model="text", prompt=["Once"], echo=True, stop=[" there"], max_tokens=64)
    assert echoed.choices[0].text == "Once upon a time"
    assert echoed.choices[0].finish_reason == "stop"


def test_suffix_reaches_the_engine_in_the_fim_layout(sdk: openai.OpenAI) -> None:
    completion = sdk.completions.create(
        model="text", prompt="@layout " + PREFIX, suffix=SUFFIX, max_tokens=200
    )
    assert completion.choices[0].text == f"{FIM_HEAD}@layout {PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "text"}, "prompt"),
        ({"model": "text", "prompt": ["one", "two"]}, "prompt"),
        ({"model": "text", "prompt": []}, "prompt"),
        ({"model": "text", "prompt": [[]]}, "prompt"),
        ({"model": "text", "prompt": {"text": "x"}}, "prompt"),
        ({"model": "text", "prompt": "x", "n": 0}, "n"),
        ({"model": "text", "prompt": "x", "n": 129}, "n"),
        ({"model": "text", "prompt": "x", "n": 2, "best_of": 1}, "best_of"),
        ({"model": "text", "prompt": "x", "best_of": 3}, "best_of"),
        ({"model": "text", "prompt": "x", "max_tokens": 0}, "max_tokens"),
        ({"model": "text", "prompt": "x", "logprobs": 99}, "logprobs"),
        ({"model": "text", "prompt": "x", "stop": [1]}, "stop"),
        ({"model": "text", "prompt": "x", "suffix": 3}, "suffix"),
        ({"model": "text", "prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
        ({"model": "plain", "prompt": "x", "suffix": "y"}, "suffix"),  # no FIM tokens
    ],
)
def test_bad_requests_are_openai_400s(sdk: openai.OpenAI, body: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.post("/completions", cast_to=object, body=body)
    error = caught.value.body
    assert isinstance(error, dict) and error["param"] == param and error["type"] == "invalid_request_error"
    assert isinstance(error["message"], str) and error["message"]


def test_unknown_model_is_a_404(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        sdk.completions.create(model="nope", prompt="x")


def test_closing_a_stream_cancels_the_generation(server: Server) -> None:
    model = "text-slow"
    cancelled = metric(server.base_url, "sluicegate_generations_cancelled_total", model)
    with httpx.Client(base_url=server.base_url, timeout=30.0) as client:
        body = {"model": model, "prompt": "go", "max_tokens": SLOW_WORDS, "stream": True}
        with client.stream("POST", "/v1/completions", json=body) as response:
            lines = response.iter_lines()
            data = 0
            while data < 3:
                data += next(lines).startswith("data: ")
            assert metric(server.base_url, "sluicegate_generations_active", model) == 1
    assert poll(lambda: metric(server.base_url, "sluicegate_generations_active", model) == 0, timeout=10.0)
    assert poll(
        lambda: metric(server.base_url, "sluicegate_generations_cancelled_total", model) == cancelled + 1,
        timeout=10.0,
    )
    assert metric(server.base_url, "sluicegate_engine_deltas_total", model) < SLOW_WORDS / 2


# --- a real llama.cpp engine ----------------------------------------------------------------


def test_llamacpp_completion_streams_with_logprobs(sdk: openai.OpenAI) -> None:
    stream = sdk.completions.create(
        model="plain", prompt="The weather", max_tokens=8, logprobs=2, temperature=0, stream=True
    )
    chunks = [c for c in stream if c.choices]
    text = "".join(c.choices[0].text for c in chunks)
    logprobs = [c.choices[0].logprobs for c in chunks if c.choices[0].logprobs]
    tokens = [t for lp in logprobs for t in lp.tokens or []]
    assert len(tokens) == 8 and "".join(tokens) == text
    assert all(len(top) == 2 for lp in logprobs for top in lp.top_logprobs or [])
    assert chunks[-1].choices[0].finish_reason == "length"


def test_llamacpp_fim_prompt_is_the_fim_layout(sdk: openai.OpenAI, gguf: tuple[Path, Path]) -> None:
    fim_path = gguf[0]
    completion = sdk.completions.create(
        model="fim", prompt=PREFIX, suffix=SUFFIX, max_tokens=4, temperature=0
    )
    expected = _tokens(fim_path, f"{FIM_HEAD}{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>")
    assert completion.usage is not None and completion.usage.prompt_tokens == expected
    assert completion.usage.completion_tokens == 4 and completion.choices[0].finish_reason == "length"
    plain = sdk.completions.create(model="fim", prompt=PREFIX, max_tokens=4, temperature=0)
    assert plain.usage is not None and plain.usage.prompt_tokens == _tokens(fim_path, PREFIX)


# --- /infill (llama-server's shape) -------------------------------------------------------


def test_infill_non_streaming_shape(server: Server, gguf: tuple[Path, Path]) -> None:
    body = {
        "input_prefix": PREFIX,
        "input_suffix": SUFFIX,
        "input_extra": [{"filename": "util.py", "text": "X = 1\n"}],
        "prompt": " a",
        "n_predict": 5,
        "temperature": 0,
    }  # no model: the first that can fill in the middle
    response = httpx.post(f"{server.base_url}/infill", json=body, timeout=60)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["stop"] is True and answer["model"] == "fim" and answer["stop_type"] == "limit"
    assert answer["tokens_predicted"] == 5 and isinstance(answer["content"], str) and answer["content"]
    layout = (
        f"<|repo_name|>myproject\n<|file_sep|>util.py\nX = 1\n<|file_sep|>filename\n<|fim_prefix|>{PREFIX} a"
    )
    assert answer["tokens_evaluated"] == _tokens(gguf[0], f"{layout}<|fim_suffix|>{SUFFIX}<|fim_middle|>")
    assert {"timings", "generation_settings", "tokens_cached", "has_new_line", "truncated"} <= set(answer)


def test_infill_streaming_shape(server: Server) -> None:
    body = {"model": "fim", "input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 4, "stream": True}
    response = httpx.post(f"{server.base_url}/infill", json=body, timeout=60)
    assert response.status_code == 200
    frames = [f for f in parse_sse(response.text) if not f.is_heartbeat]
    assert not any(f.is_done for f in frames)  # llama-server sends no [DONE] here
    objects = [orjson.loads(f.data) for f in frames]
    assert [o["stop"] for o in objects] == [False] * 4 + [True]
    assert [o["tokens_predicted"] for o in objects[:-1]] == [1, 2, 3, 4]
    assert objects[-1]["tokens_predicted"] == 4 and objects[-1]["stop_type"] == "limit"
    assert all(len(o["tokens"]) == 1 for o in objects[:-1])  # each object's token id, as /completion's


def test_infill_objects_are_completions_objects(server: Server) -> None:
    """llama-server hands `/infill` to its `/completion` handler: the same fields, each object."""
    options = {"model": "fim", "n_predict": 3, "n_probs": 2, "temperature": 0}
    for stream in (False, True):
        infill = httpx.post(
            f"{server.base_url}/infill",
            json={"input_prefix": PREFIX, "input_suffix": SUFFIX, **options, "stream": stream},
            timeout=60,
        )
        completion = httpx.post(
            f"{server.base_url}/completion", json={"prompt": PREFIX, **options, "stream": stream}, timeout=60
        )
        assert infill.status_code == completion.status_code == 200, infill.text
        if stream:
            pairs = zip(_objects(infill.text), _objects(completion.text), strict=True)
        else:
            pairs = zip([infill.json()], [completion.json()], strict=True)
        for ours, theirs in pairs:
            assert set(ours) == set(theirs)
            for key in ("timings", "generation_settings"):
                assert set(ours.get(key, {})) == set(theirs.get(key, {}))
            probabilities = zip(
                ours.get("completion_probabilities", []),
                theirs.get("completion_probabilities", []),
                strict=True,
            )
            assert all(set(a) == set(b) and "id" in a for a, b in probabilities)


def _objects(text: str) -> list[dict[str, Any]]:
    return [orjson.loads(f.data) for f in parse_sse(text) if not f.is_heartbeat]


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"model": "fim", "input_prefix": "x"}, 400),
        ({"model": "fim", "input_prefix": "x", "input_suffix": "y", "input_extra": [{"filename": "a"}]}, 400),
        ({"model": "fim", "input_prefix": "x", "input_suffix": "y", "n_predict": "5"}, 400),
        ({"model": "fim", "input_prefix": "x", "input_suffix": "y", "input_extra": [{"text": 1}]}, 400),
        ({"model": "fim", "input_prefix": "x", "input_suffix": "y", "n_predict": 0}, 400),
        ({"model": "plain", "input_prefix": "x", "input_suffix": "y"}, 501),  # llama-server's not_supported
        ({"model": "nope", "input_prefix": "x", "input_suffix": "y"}, 404),
    ],
)
def test_infill_errors_are_llama_server_shaped(server: Server, body: dict[str, Any], status: int) -> None:
    response = httpx.post(f"{server.base_url}/infill", json=body, timeout=30)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == status and isinstance(error["message"], str) and isinstance(error["type"], str)


# --- an `openai` upstream: relayed to its /v1/completions ---------------------------------


def test_relay_to_upstream_completions(sdk: openai.OpenAI, upstream: FakeUpstream) -> None:
    completion = sdk.completions.create(model="relay", prompt="def f(", suffix=")\n", max_tokens=10, seed=7)
    assert completion.choices[0].text == " return a + b" and completion.model == "relay"
    sent = [r for r in upstream.requests if r.path == "/v1/completions"][-1].body
    assert sent["model"] == "up-model" and sent["prompt"] == "def f(" and sent["suffix"] == ")\n"
    assert sent["max_tokens"] == 10 and sent["seed"] == 7 and sent["stream"] is True

    stream = sdk.completions.create(
        model="relay", prompt="Once", echo=True, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "Once upon a time"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3
