"""Helpers for the llama.cpp case tests. llama.cpp's chat-template corpus (`models/templates/` of the llama.cpp sources vendored in
llama-cpp-python's sdist), found or fetched once with pip into a cache directory."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from sluicegate.core.events import ItemKind, RawEvent, TextDelta, ToolCallDelta

VERSION = "0.3.36"  # the llama-cpp-python whose sdist holds the corpus the cases come from
CACHE = Path(os.environ.get("SLUICEGATE_TEST_CACHE", Path.home() / ".cache" / "sluicegate-tests"))


def _version() -> str:
    try:
        return metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        return VERSION


@lru_cache(maxsize=1)
def templates_dir() -> Path | None:
    """The corpus directory, or None when it cannot be had (no network, no pip)."""
    given = os.environ.get("LLAMA_CPP_TEMPLATES")
    if given:
        return Path(given)
    version = _version()
    target = CACHE / f"llama-cpp-python-{version}"
    found = target / "templates"
    if found.is_dir():
        return found
    target.mkdir(parents=True, exist_ok=True)
    archive = target / f"llama_cpp_python-{version}.tar.gz"
    if not archive.exists():
        cmd = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-q"]
        done = subprocess.run(
            [*cmd, f"llama-cpp-python=={version}", "-d", str(target)], capture_output=True, check=False
        )
        archives = list(target.glob("*.tar.gz"))
        if done.returncode != 0 or not archives:
            return None
        archive = archives[0]
    tmp = target / "templates.partial"
    tmp.mkdir(exist_ok=True)
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if "/vendor/llama.cpp/models/templates/" in member.name and member.name.endswith(".jinja"):
                member.name = Path(member.name).name
                tar.extract(member, tmp, filter="data")
    tmp.rename(found)
    return found


def fold(events: list[RawEvent]) -> dict[str, Any]:
    text = {ItemKind.MESSAGE: "", ItemKind.REASONING: ""}
    calls: list[dict[str, str]] = []
    for event in events:
        if isinstance(event, TextDelta):
            text[event.channel] += event.text
        elif isinstance(event, ToolCallDelta):
            while len(calls) <= event.index:
                calls.append({"name": "", "arguments": ""})
            if event.name is not None:
                calls[event.index]["name"] = event.name
            calls[event.index]["arguments"] += event.arguments
    return {"content": text[ItemKind.MESSAGE], "reasoning": text[ItemKind.REASONING], "tool_calls": calls}
