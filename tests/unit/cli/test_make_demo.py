"""`sluicegate models make-demo --vision / --audio / --rerank` write what the engine then finds and serves."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluicegate.cli import main
from sluicegate.engines.llamacpp.engine import LlamaCppEngine
from sluicegate.engines.llamacpp.gguf_info import POOLING_RANK, read_gguf_info


def test_vision_writes_a_projector_the_engine_finds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["models", "make-demo", "--vision", str(tmp_path / "eye.gguf")]) == 0
    assert (tmp_path / "mmproj-eye.gguf").is_file() and "projector" in capsys.readouterr().out
    engine = LlamaCppEngine.from_config({"id": "eye", "engine": "llamacpp", "path": "eye.gguf"}, tmp_path)
    assert engine.mmproj == tmp_path / "mmproj-eye.gguf" and engine.info().capabilities.vision
    assert not engine.info().capabilities.audio
    assert engine.tasks() == {"chat"}


def test_audio_writes_a_projector_the_engine_finds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["models", "make-demo", "--audio", str(tmp_path / "ear.gguf")]) == 0
    assert (tmp_path / "mmproj-ear.gguf").is_file() and "audio projector" in capsys.readouterr().out
    engine = LlamaCppEngine.from_config({"id": "ear", "engine": "llamacpp", "path": "ear.gguf"}, tmp_path)
    capabilities = engine.info().capabilities
    assert engine.mmproj == tmp_path / "mmproj-ear.gguf" and capabilities.audio and not capabilities.vision


def test_rerank_writes_a_reranker(tmp_path: Path) -> None:
    assert main(["models", "make-demo", "--rerank", str(tmp_path / "rank.gguf")]) == 0
    info = read_gguf_info(tmp_path / "rank.gguf")
    assert info.pooling == POOLING_RANK and info.rerank_template and "{document}" in info.rerank_template
    engine = LlamaCppEngine.from_config({"id": "rank", "engine": "llamacpp", "path": "rank.gguf"}, tmp_path)
    assert engine.tasks() == {"rerank"} and not engine.info().capabilities.vision
    plain = LlamaCppEngine.from_config(
        {"id": "rank", "engine": "llamacpp", "path": "rank.gguf", "rerank": False}, tmp_path
    )
    assert plain.tasks() == {"chat"}  # the config says otherwise
