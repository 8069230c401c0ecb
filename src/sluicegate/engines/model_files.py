"""The models directory: every GGUF file under it is a model, and a fresh machine gets a demo.

Ids follow LM Studio's layout (`models/<publisher>/<repo>/<file>.gguf`): a file in a subfolder
is `<publisher>/<file name>`, a file at the top is its name. Vision projectors (`mmproj*`) and
the later parts of split GGUFs are not models of their own.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from sluicegate.config import Settings, models_dir

log = logging.getLogger(__name__)

DEMO_ID = "sluicegate/demo-nonsense"
_LATER_PART = re.compile(r"-(\d{5})-of-\d{5}$")
_DEMO_MARKER = "demo-model-written"


def _is_model(path: Path) -> bool:
    part = _LATER_PART.search(path.stem)
    return not path.name.lower().startswith("mmproj") and (part is None or part.group(1) == "00001")


def discover(folder: Path) -> list[dict[str, Any]]:
    """`[[models]]` tables for the GGUF files under `folder` (none if it does not exist)."""
    if not folder.is_dir():
        return []
    files = sorted(p for p in folder.rglob("*.gguf") if p.is_file() and _is_model(p))
    tables: list[dict[str, Any]] = []
    seen: set[str] = set()
    for path in files:
        relative = path.relative_to(folder)
        stem = _LATER_PART.sub("", path.stem)
        model_id = stem if len(relative.parts) == 1 else f"{relative.parts[0]}/{stem}"
        if model_id in seen:  # two files of one name under one publisher: the whole path
            model_id = relative.with_suffix("").as_posix()
        seen.add(model_id)
        tables.append({"id": model_id, "engine": "llamacpp", "path": str(path)})
    return tables


def ensure_demo_model(settings: Settings) -> Path | None:
    """On a fresh machine (no models declared, no GGUF in the models directory) write the demo
    model, once: a user who deletes it does not get it back. Returns its path when written."""
    folder = models_dir(settings)
    marker = settings.data_dir / _DEMO_MARKER
    if settings.models or marker.exists() or discover(folder):
        return None
    from sluicegate.demo.model import make_demo_gguf  # numpy and gguf: only when needed

    path = make_demo_gguf(folder / f"{DEMO_ID}.gguf")
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(f"{path}\n", encoding="utf-8")
    log.info("wrote the demo model (random weights: it talks nonsense) to %s", path)
    return path
