"""A stand-in for the `wget` package the suite's utils.py imports: `download(url, out)` copies
the local stand-in for the file (models.URLS), and refuses anything else (no network here)."""

from __future__ import annotations

import os
import shutil

from models import URLS, read_map


def download(url: str, out: str | None = None, bar: object = None) -> str:
    name = url.rsplit("/", 1)[-1]
    kind = URLS.get(name)
    if kind is None:
        raise RuntimeError(f"the llama-server suite adapter has no local stand-in for {url} (no downloads)")
    target = out or name
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    shutil.copyfile(read_map(os.environ["SUITE_MODELS"])[kind], target)
    return target
