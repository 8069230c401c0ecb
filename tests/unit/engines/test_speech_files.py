"""Speech models shipped as Python packages, split files joined once (issue 45)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sluicegate.engines.base import ConfigError
from sluicegate.engines.lookup import engine_class
from sluicegate.engines.speech_files import model_dir


def _package(root: Path, name: str, files: dict[str, bytes]) -> None:
    data = root / name / "data"
    data.mkdir(parents=True)
    (root / name / "__init__.py").write_text("")
    for file, content in files.items():
        (data / file).write_bytes(content)


def test_parts_joined_once_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _package(tmp_path, "fake_model_p1", {"model.bin.part1": b"abc", "config.json": b"{}"})
    _package(tmp_path, "fake_model_p2", {"model.bin.part2": b"def"})
    monkeypatch.syspath_prepend(str(tmp_path))
    folder = model_dir(["fake-model-p1", "fake-model-p2"], tmp_path / "cache")
    assert (folder / "model.bin").read_bytes() == b"abcdef" and (folder / "config.json").read_bytes() == b"{}"
    mtime = (folder / "model.bin").stat().st_mtime_ns
    assert model_dir(["fake-model-p1", "fake-model-p2"], tmp_path / "cache") == folder
    assert (folder / "model.bin").stat().st_mtime_ns == mtime  # not joined again
    with pytest.raises(ConfigError, match="numbered"):
        model_dir(["fake-model-p2"], tmp_path / "cache2")
    sys.modules.pop("fake_model_p1", None)


def test_a_missing_package_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="pip install no-such-voice-package"):
        model_dir(["no-such-voice-package"])


def test_built_in_speech_engines_are_found_without_their_entry_points() -> None:
    assert engine_class("whisper").__name__ == "WhisperEngine"
    assert engine_class("piper").__name__ == "PiperEngine"
