"""The demo GGUF: llama.cpp loads it and generates; its header says what it is; it is reproducible."""

from __future__ import annotations

from pathlib import Path

import llama_cpp
import pytest

from sluicegate.demo.model import DEMO_NAME, SPECIAL_TOKENS, make_demo_gguf
from sluicegate.engines.llamacpp.gguf_info import read_gguf_info


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo_gguf(tmp_path_factory.mktemp("demo") / "demo.gguf", ends_replies=False)


def test_header_facts(demo: Path) -> None:
    info = read_gguf_info(demo)
    assert info.architecture == "llama"
    assert info.quantization == "Q5_0" and info.bits_per_weight == 5
    assert info.size_bytes == demo.stat().st_size > 1_000_000
    assert info.context_length == 4096
    assert info.name == DEMO_NAME and "nonsense" in (info.description or "")
    assert info.supports_tools and info.supports_reasoning
    assert (info.bos_token, info.eos_token) == ("<|endoftext|>", "<|im_end|>")
    assert info.params_string is not None and info.params_string.endswith("M")


def test_same_seed_same_bytes(demo: Path, tmp_path: Path) -> None:
    again = make_demo_gguf(tmp_path / "again.gguf", ends_replies=False)
    other = make_demo_gguf(tmp_path / "other.gguf", ends_replies=False, seed=1)
    assert again.read_bytes() == demo.read_bytes()
    assert other.read_bytes() != demo.read_bytes()


def test_llama_cpp_loads_it_and_generates(demo: Path) -> None:
    llm = llama_cpp.Llama(model_path=str(demo), n_ctx=256, verbose=False)
    try:
        text = "Hello world, what is the weather?"
        tokens = llm.tokenize(text.encode(), add_bos=False)
        assert len(tokens) < len(text)  # real merges, not one token per byte
        assert llm.detokenize(tokens).decode() == text
        for marker in SPECIAL_TOKENS:  # each special token is one token
            assert len(llm.tokenize(marker.encode(), add_bos=False, special=True)) == 1
        first = llm.create_completion("Hello", max_tokens=12, seed=7, temperature=0.8)
        second = llm.create_completion("Hello", max_tokens=12, seed=7, temperature=0.8)
        assert first["choices"][0]["text"] == second["choices"][0]["text"] != ""
        assert first["choices"][0]["finish_reason"] == "length"
    finally:
        llm.close()


def test_make_demo_fim_gives_the_tokenizer_fim_tokens(tmp_path: Path) -> None:
    from sluicegate.cli.main import main
    from sluicegate.engines.llamacpp.completion import fim_tokens
    from sluicegate.engines.llamacpp.runtime import Vocabulary

    assert main(["models", "make-demo", str(tmp_path / "fim.gguf"), "--fim"]) == 0
    assert read_gguf_info(tmp_path / "fim.gguf").has_fim
    vocabulary = Vocabulary(tmp_path / "fim.gguf")
    try:
        fim, missing = fim_tokens(vocabulary.model.vocab)
        assert fim is not None and missing == ""
        assert -1 not in (fim.pre, fim.suf, fim.mid, fim.rep, fim.sep)
    finally:
        vocabulary.close()
    plain = make_demo_gguf(tmp_path / "plain.gguf")
    assert not read_gguf_info(plain).has_fim
