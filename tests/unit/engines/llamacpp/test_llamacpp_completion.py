"""Text completion on a real llama.cpp engine: the prompt as it is, and fill-in-the-middle in
llama-server's layout (`format_prompt_infill`), on the demo GGUF with FIM tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sluicegate.core.errors import SluicegateError
from sluicegate.core.events import Finished, FinishReason, RawBatch, TextDelta, UsageReport
from sluicegate.core.request import ChatRequest, FileChunk, RawPrompt, SamplingParams
from sluicegate.demo.model import make_demo_gguf
from sluicegate.engines.llamacpp import engine as engine_module
from sluicegate.engines.llamacpp.engine import LlamaCppEngine
from sluicegate.engines.llamacpp.runtime import Job
from sluicegate.parsing import PlainText

PREFIX = "def add(a, b):\n    return"
SUFFIX = "\n\nprint(add(1, 2))\n"


@pytest.fixture(scope="module")
def fim_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo_gguf(tmp_path_factory.mktemp("fim") / "fim.gguf", fim=True, ends_replies=False)


@pytest.fixture(scope="module")
def plain_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo_gguf(tmp_path_factory.mktemp("plain") / "plain.gguf")


def _engine(path: Path, **extra: Any) -> LlamaCppEngine:
    return LlamaCppEngine.from_config(
        {"id": "m", "path": str(path), "context_length": 512, "batch_size": 128, **extra}, Path(".")
    )


def _request(prompt: RawPrompt, **sampling: Any) -> ChatRequest:
    sampling.setdefault("max_tokens", 8)
    sampling.setdefault("temperature", 0.0)
    return ChatRequest(model="m", messages=[], prompt=prompt, sampling=SamplingParams(**sampling))


def _decoded(engine: LlamaCppEngine, request: ChatRequest) -> str:
    engine.check(request)
    prepared = engine._take_prepared(request)
    assert prepared is not None and prepared.request is request and prepared.tokens is not None
    text: bytes = engine._tokenizer().detokenize(prepared.tokens, special=True)
    return text.decode()


def test_fim_prompt_is_llama_servers_layout(fim_gguf: Path) -> None:
    engine = _engine(fim_gguf)
    assert engine.info().capabilities.fill_in_middle
    decoded = _decoded(engine, _request(RawPrompt(PREFIX, suffix=SUFFIX)))
    assert decoded == (
        "<|repo_name|>myproject\n<|file_sep|>filename\n"
        f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>"
    )


def test_fim_extra_files_and_middle_go_where_llama_server_puts_them(fim_gguf: Path) -> None:
    prompt = RawPrompt(PREFIX, suffix=SUFFIX, extra=[FileChunk("util.py", "X = 1\n")], middle=" a")
    decoded = _decoded(_engine(fim_gguf), _request(prompt))
    assert decoded == (
        "<|repo_name|>myproject\n<|file_sep|>util.py\nX = 1\n<|file_sep|>filename\n"
        f"<|fim_prefix|>{PREFIX} a<|fim_suffix|>{SUFFIX}<|fim_middle|>"
    )


def test_fim_keeps_the_end_of_a_long_prefix_within_three_quarters_of_a_batch(fim_gguf: Path) -> None:
    engine = _engine(fim_gguf, batch_size=64)
    decoded = _decoded(engine, _request(RawPrompt("x = 1\n" * 200 + "y =", suffix="")))
    prefix = decoded.split("<|fim_prefix|>")[1].split("<|fim_suffix|>")[0]
    assert prefix.endswith("x = 1\ny =") and len(engine._tokenize(prefix)) == 48


def test_plain_prompt_is_tokenized_as_it_is(plain_gguf: Path) -> None:
    engine = _engine(plain_gguf)
    assert engine.info().capabilities.completion
    assert _decoded(engine, _request(RawPrompt("<|im_start|>Once upon"))) == "<|im_start|>Once upon"


def test_fim_on_a_model_without_fim_tokens_is_a_400(plain_gguf: Path) -> None:
    engine = _engine(plain_gguf)
    assert not engine.info().capabilities.fill_in_middle
    with pytest.raises(SluicegateError) as caught:
        engine.check(_request(RawPrompt(PREFIX, suffix=SUFFIX)))
    assert caught.value.info.status == 400 and caught.value.info.param == "suffix"


@pytest.mark.parametrize(
    ("prompt", "sampling", "param"),
    [
        (RawPrompt(PREFIX, suffix=SUFFIX, echo=True), {}, "echo"),
        (RawPrompt(PREFIX, echo=True), {"logprobs": True}, "logprobs"),
        (RawPrompt([1, 10**6]), {}, "prompt"),
        (RawPrompt(PREFIX), {"n": 2}, "n"),
    ],
)
def test_what_the_engine_cannot_do_is_a_400(
    fim_gguf: Path, prompt: RawPrompt, sampling: dict[str, Any], param: str
) -> None:
    with pytest.raises(SluicegateError) as caught:
        _engine(fim_gguf).check(_request(prompt, **sampling))
    assert caught.value.info.status == 400 and caught.value.info.param == param


def test_embedding_model_refuses_completion(tmp_path: Path) -> None:
    engine = _engine(make_demo_gguf(tmp_path / "e.gguf", embedding=True))
    with pytest.raises(SluicegateError) as caught:
        engine.check(_request(RawPrompt("hi")))
    assert caught.value.info.code == "model_not_supported"


@pytest.mark.parametrize("batching", [False, True])
async def test_completion_generates_text_with_echo(
    fim_gguf: Path, batching: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs: list[Job] = []

    def job(**fields: Any) -> Job:
        jobs.append(Job(**fields))
        return jobs[-1]

    monkeypatch.setattr(engine_module, "Job", job)
    engine = _engine(fim_gguf, batching=batching, parallel=2)
    await engine.load(lambda _p: None)
    try:
        request = _request(RawPrompt("<think> Once", echo=True), max_tokens=6)
        engine.check(request)
        text, usage, finish = "", None, None
        async for received in engine.generate(request):
            for event in received.events if isinstance(received, RawBatch) else [received]:
                if isinstance(event, TextDelta):
                    text += event.text
                elif isinstance(event, UsageReport):
                    usage = event.usage
                elif isinstance(event, Finished):
                    finish = event.reason
        # Echoed as it was, and `<think>` in a completion is text, not a reasoning block.
        assert text.startswith("<think> Once") and len(text) > len("<think> Once")
        assert usage is not None and usage.completion_tokens == 6 and usage.reasoning_tokens == 0
        assert finish is FinishReason.LENGTH
        # Nothing is parsed out of a completion (the chat parser would hold whitespace back).
        assert [type(j.parser) for j in jobs] == [PlainText] and jobs[0].reasoning is None
    finally:
        await engine.aclose()


def test_requests_checked_together_each_keep_what_their_check_prepared(fim_gguf: Path) -> None:
    """Checks run in worker threads now, so two requests' checks can both come before either
    generates: the second must not throw away what the first prepared (its tokens would then
    be counted again, on the event loop)."""
    engine = _engine(fim_gguf, batching=True, parallel=2)
    first, second = _request(RawPrompt("one")), _request(RawPrompt("two"))
    engine.check(first)
    engine.check(second)
    assert engine._take_prepared(first) is not None and engine._take_prepared(second) is not None
    assert engine._take_prepared(first) is None  # taken once


def test_token_and_mixed_prompts_are_laid_out_as_llama_server_does(plain_gguf: Path) -> None:
    """Ids are taken as they are (no BOS added); in a mixed prompt each text is tokenized where
    it stands, so [ids of "Once", " upon"] is the prompt "Once upon"."""
    engine = _engine(plain_gguf)
    once = engine.tokenize("Once", add_special=False, parse_special=False)
    upon = engine.tokenize(" upon", add_special=False, parse_special=False)
    assert once and upon
    for prompt in (RawPrompt([*once, *upon]), RawPrompt([*once, " upon"])):
        request = _request(prompt)
        engine.check(request)
        prepared = engine._take_prepared(request)
        assert prepared is not None and prepared.tokens == [*once, *upon]


def test_logit_bias_by_text_biases_every_token_of_it(plain_gguf: Path) -> None:
    engine = _engine(plain_gguf)
    ids = engine.tokenize(" the end", add_special=False, parse_special=False)
    assert ids
    request = _request(RawPrompt("x"), logit_bias={3: 1.0}, logit_bias_text={" the end": -100.0})
    engine.check(request)
    assert request.sampling.logit_bias == {3: 1.0, **dict.fromkeys(ids, -100.0)}
    assert request.sampling.logit_bias_text == {}  # resolved once: a second check keeps it


@pytest.mark.parametrize("batching", [False, True])
async def test_token_ids_come_with_the_output(plain_gguf: Path, batching: bool) -> None:
    """`token_ids` (llama-server's `tokens`): each delta's tokens carry their ids, and the ids
    are the output's tokens."""
    engine = _engine(plain_gguf, batching=batching, parallel=2)
    await engine.load(lambda _p: None)
    try:
        request = _request(RawPrompt("Once upon a time"), max_tokens=6, token_ids=True)
        engine.check(request)
        text, ids = "", []
        async for received in engine.generate(request):
            for event in received.events if isinstance(received, RawBatch) else [received]:
                if isinstance(event, TextDelta):
                    text += event.text
                    ids += [lp.id for lp in event.logprobs or []]
        assert len(ids) == 6 and all(isinstance(i, int) for i in ids)
        assert engine._tokenizer().detokenize(ids).decode() == text
    finally:
        await engine.aclose()


async def test_ignore_eos_generates_to_the_limit(plain_gguf: Path) -> None:
    """llama-server's `ignore_eos`: the end-of-generation tokens are banned, so a model that
    ends its reply writes on to `max_tokens`."""
    engine = _engine(plain_gguf)
    await engine.load(lambda _p: None)
    try:
        counts = []
        for ignore in (False, True):
            request = _request(
                RawPrompt("Once upon a time"), max_tokens=200, ignore_eos=ignore, temperature=1.0, seed=3
            )
            engine.check(request)
            assert not request.sampling.ignore_eos  # resolved into the bias
            finish: FinishReason | None = None
            async for received in engine.generate(request):
                for event in received.events if isinstance(received, RawBatch) else [received]:
                    if isinstance(event, UsageReport):
                        counts.append(event.usage.completion_tokens)
                    elif isinstance(event, Finished):
                        finish = event.reason
            assert finish is (FinishReason.LENGTH if ignore else FinishReason.STOP)
        assert counts[-1] == 200
    finally:
        await engine.aclose()
