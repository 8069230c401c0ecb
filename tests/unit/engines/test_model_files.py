"""The models directory: GGUF files become models with LM Studio-style ids; a fresh machine
gets the demo model once."""

from __future__ import annotations

import shutil
from pathlib import Path

from sluicegate.app.factory import add_model_files, build_registry
from sluicegate.config import Settings, load_settings
from sluicegate.demo.model import make_demo_gguf
from sluicegate.engines.model_files import DEMO_ID, discover, ensure_demo_model


def test_ids_from_the_layout(tmp_path: Path) -> None:
    for name in [
        "plain.gguf",
        "acme/repo/Model-Q4_K_M.gguf",
        "acme/repo/mmproj-Model-F16.gguf",
        "big/repo/Big-00001-of-00002.gguf",
        "big/repo/Big-00002-of-00002.gguf",
        "acme/other/Model-Q4_K_M.gguf",
        "notes.txt",
    ]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    ids = [t["id"] for t in discover(tmp_path)]
    assert ids == ["acme/Model-Q4_K_M", "acme/repo/Model-Q4_K_M", "big/Big", "plain"]
    assert discover(tmp_path / "missing") == []


def test_fresh_machine_gets_the_demo_once(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    path = ensure_demo_model(settings)
    assert path == tmp_path / "models" / f"{DEMO_ID}.gguf" and path.is_file()
    registry = build_registry(settings)
    assert list(registry.models) == ["scripted-demo", DEMO_ID]
    info = registry.models[DEMO_ID].engine.info()
    assert "nonsense" in (info.display_name or "") and info.details["format"] == "gguf"
    path.unlink()
    assert ensure_demo_model(settings) is None  # deleted by the user: not written again
    assert (
        ensure_demo_model(Settings(data_dir=tmp_path / "other", models=[{"id": "x", "engine": "scripted"}]))
        is None
    )


def test_models_dir_setting_and_declared_files_are_not_listed_twice(tmp_path: Path) -> None:
    demo = ensure_demo_model(Settings(data_dir=tmp_path / "seed"))
    assert demo is not None
    library = tmp_path / "library"
    library.mkdir()
    shutil.copy(demo, library / "mine.gguf")
    config = library / "sluicegate.toml"
    config.write_text(
        '[server]\nmodels_dir = "."\n\n[[models]]\nid = "declared"\nengine = "llamacpp"\npath = "mine.gguf"\n'
    )
    settings = load_settings(config, env={})
    assert settings.models_dir == library
    assert list(build_registry(settings).models) == ["declared"]  # mine.gguf is declared
    env_settings = load_settings(None, env={"SLUICEGATE_MODELS_DIR": str(library)})
    assert list(build_registry(env_settings).models) == ["scripted-demo", "mine"]


def test_a_broken_file_is_skipped_and_a_new_one_is_served_without_a_restart(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    folder = tmp_path / "models"
    (folder / "acme" / "repo").mkdir(parents=True)
    (folder / "acme" / "repo" / "half-copied.gguf").write_bytes(b"GGUF\x03\x00")  # not a model
    registry = build_registry(settings)
    assert list(registry.models) == ["scripted-demo"]  # skipped, not fatal
    assert ensure_demo_model(settings) is None  # a file is there: no demo over the user's folder
    demo = make_demo_gguf(folder / "acme" / "repo" / "Fresh-Q5_0.gguf")
    assert add_model_files(registry, settings) == ["acme/Fresh-Q5_0"]  # what a download triggers
    assert registry.models["acme/Fresh-Q5_0"].engine.info().details["path"] == str(demo)
    assert add_model_files(registry, settings) == []  # served once
