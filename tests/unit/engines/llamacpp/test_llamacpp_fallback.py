"""A GGUF without a chat template: its architecture's format, or a transcript for a base model;
and the GGUF header read straight from the bytes says what gguf's own reader says."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from sluicegate.core.request import ChatRequest, Message
from sluicegate.demo.model import make_demo_gguf
from sluicegate.engines.base import ConfigError
from sluicegate.engines.llamacpp import LlamaCppEngine
from sluicegate.engines.llamacpp.fallback_templates import TRANSCRIPT_STOPS, fallback_template
from sluicegate.engines.llamacpp.gguf_header import read_gguf_header
from sluicegate.engines.llamacpp.gguf_info import read_gguf_info
from sluicegate.engines.llamacpp.template import render_chat


@pytest.mark.parametrize(
    ("architecture", "name"),
    [
        ("gemma3", "gemma"),
        ("llama", "llama3"),
        ("qwen3", "chatml"),
        ("phi3", "phi3"),
        ("mistral3", "mistral-v7"),
    ],
)
def test_a_fine_tuned_model_gets_its_architectures_format(architecture: str, name: str) -> None:
    assert fallback_template(architecture).name == name


def test_gemma_turns() -> None:
    source = fallback_template("gemma3").source
    prompt = render_chat(
        source,
        [Message("system", "Be brief."), Message("user", "Hi")],
        [],
        bos_token="<bos>",
        eos_token="<eos>",
    )
    assert prompt == "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"


def test_a_base_model_gets_a_transcript_that_stops_at_the_next_question() -> None:
    fallback = fallback_template("gemma3", base_model=True)
    messages = [
        Message("user", "What is the capital of France?"),
        Message("assistant", "Paris."),
        Message("user", "And of Italy?"),
    ]
    prompt = render_chat(fallback.source, messages, [], bos_token="<bos>", eos_token="<eos>")
    assert (
        prompt == "Question: What is the capital of France?\nAnswer: Paris.\nQuestion: And of Italy?\nAnswer:"
    )
    assert fallback.stops == TRANSCRIPT_STOPS and "\nQuestion:" in fallback.stops


def _write(path: Path, *, finetune: str | None) -> Path:
    writer = gguf.GGUFWriter(str(path), "gemma3")
    writer.add_name("no template")
    if finetune:
        writer.add_string("general.finetune", finetune)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(["<pad>", "<eos>", "<bos>", "a"])
    writer.add_bos_token_id(2)
    writer.add_eos_token_id(1)
    writer.add_add_bos_token(True)
    writer.add_tensor("w", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize(
    ("finetune", "expected"),
    [("it", "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"), (None, "Question: Hi\nAnswer:")],
)
def test_the_engine_renders_the_fallback(tmp_path: Path, finetune: str | None, expected: str) -> None:
    path = _write(tmp_path / "model.gguf", finetune=finetune)
    engine = LlamaCppEngine.from_config({"id": "m", "engine": "llamacpp", "path": str(path)}, tmp_path)
    request = ChatRequest(model="m", messages=[Message("user", "Hi")])
    assert engine.render_prompt(request) == expected


def test_the_header_reader_agrees_with_gguf(tmp_path: Path) -> None:
    path = make_demo_gguf(tmp_path / "tiny.gguf")
    ours, theirs = read_gguf_header(path), gguf.GGUFReader(path, "r")
    keys = {key for key in theirs.fields if not key.startswith("GGUF.")}  # the reader's own counts
    assert set(ours.fields) == keys
    for key in keys:
        field = theirs.fields[key]
        value = field.contents()
        assert ours.fields[key] == (pytest.approx(value) if isinstance(value, float) else value), key
    assert [(t.name, t.n_elements, t.type) for t in ours.tensors] == [
        (t.name, int(t.n_elements), int(t.tensor_type)) for t in theirs.tensors
    ]
    info = read_gguf_info(path)
    assert (
        info.bos_token
        and info.chat_template
        and info.vocab_size == len(theirs.fields["tokenizer.ggml.tokens"].data)
    )


def test_a_cut_gguf_is_a_configuration_error(tmp_path: Path) -> None:
    path = make_demo_gguf(tmp_path / "tiny.gguf")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:2000])
    with pytest.raises(ConfigError, match="not a readable GGUF"):
        read_gguf_info(cut)
