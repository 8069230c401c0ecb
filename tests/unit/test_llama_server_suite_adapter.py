"""The llama-server suite's adapter (tests/llama_server_suite/): the flags it maps to a
Sluicegate config, and the text stand-in it builds. The suite itself runs in
tests/e2e/test_llama_server_suite.py; these check the mapping without starting a server."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

SUITE = Path(__file__).resolve().parents[1] / "llama_server_suite"
sys.path.insert(0, str(SUITE))
import fake_llama_server  # noqa: E402
import models  # noqa: E402


def _table(argv: list[str], tmp_path: Path) -> dict[str, Any]:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    options, _ = fake_llama_server.parser().parse_known_args(["-m", str(gguf), *argv])
    table, _ = fake_llama_server.model_table(options, {})
    assert table is not None
    return table


def test_context_shift_is_off_unless_asked(tmp_path: Path) -> None:
    assert "context_shift" not in _table([], tmp_path)  # Sluicegate's default: off, as llama-server's
    assert _table(["--context-shift"], tmp_path)["context_shift"] is True
    assert _table(["--no-context-shift"], tmp_path)["context_shift"] is False


def test_a_draft_model_drafts_as_llama_servers_does(tmp_path: Path) -> None:
    draft = ["--model-draft", "d.gguf", "--spec-draft-n-max", "8", "--spec-draft-n-min", "4"]
    table = _table(draft, tmp_path)
    assert table["draft_max"] == 8 and table["draft_min"] == 4
    # llama-server keeps every drafted token (its p-min defaults to 0) and drafts at every step.
    assert table["draft_p_min"] == 0.0 and table["draft_adaptive"] is False
    assert _table([*draft, "--spec-draft-p-min", "0.5"], tmp_path)["draft_p_min"] == 0.5
    assert "draft_p_min" not in _table(["--spec-type", "ngram-simple"], tmp_path)


def test_the_text_stand_in_does_not_end_its_replies(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Like stories260K, it writes until `n_predict` or the context stops it; the other stand-ins
    are the demo writer's usual models."""
    built: dict[str, dict[str, bool]] = {}

    def make(path: Path, **options: bool) -> Path:
        built[Path(path).name] = options
        Path(path).write_bytes(b"GGUF")
        return Path(path)

    monkeypatch.setenv("SLUICEGATE_TEST_CACHE", str(tmp_path))
    monkeypatch.setattr("sluicegate.demo.model.make_demo_gguf", make)
    monkeypatch.setattr("sluicegate.demo.vision.make_demo_vision", lambda path, **_: path)
    monkeypatch.setattr(models, "_image", lambda path, *_: path)
    paths = models.build()
    text = Path(paths["text"]).name
    assert built[text] == {"ends_replies": False}
    assert all("ends_replies" not in options for name, options in built.items() if name != text)
