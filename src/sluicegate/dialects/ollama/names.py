"""Ollama model names (`name:tag`, `:latest`, `hf.co/owner/repo:QUANT`) → the served model ids.

Ollama names carry a tag (`llama3.2` is `llama3.2:latest`); models here are served under ids
without one, so `:latest` names the model itself and any name that is an id is taken as it is.
A Hugging Face name, as `ollama pull` accepts it, names the file the downloader put under
`<models>/<owner>/<repo>/`, picked by its quantization when the tag gives one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

_QUANT = re.compile(r"(?i)[.-](I?Q\d[\w]*|F16|BF16|F32)(?:-\d{5}-of-\d{5})?\.gguf$")
HF_PREFIXES = ("hf.co/", "huggingface.co/")
# Ollama's name parts (`[host/][namespace/]model[:tag]`, types/model/name.go `isValidPart`): ASCII
# letters, digits and `_` first, then also `-` and `.` (not in a namespace), `:` in a host only.
_NAME_PARTS = (
    re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,349}"),  # host (a port may follow its `:`)
    re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,79}"),  # namespace
    re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,79}"),  # model
)
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,79}")


def is_valid_name(name: str) -> bool:
    """A name Ollama itself accepts for a model (`ParseNameBare` + `IsValid`)."""
    rest, tag = name, None
    if name.rfind(":") > name.rfind("/"):
        rest, _, tag = name.rpartition(":")
    parts = rest.split("/")
    if len(parts) > len(_NAME_PARTS) or (tag is not None and _TAG.fullmatch(tag) is None):
        return False
    rules = _NAME_PARTS[len(_NAME_PARTS) - len(parts) :]
    return all(rule.fullmatch(part) is not None for rule, part in zip(rules, parts, strict=True))


def tagged(model_id: str) -> str:
    """The name Ollama clients see: with a tag (`:latest` when the id has none)."""
    tail = model_id.rsplit("/", 1)[-1]
    return model_id if ":" in tail else f"{model_id}:latest"


def hf_ref(name: str) -> tuple[str, str | None] | None:
    """`hf.co/owner/repo[:QUANT]` → (`owner/repo`, QUANT or None); None for other names."""
    lowered = name.lower()
    for prefix in HF_PREFIXES:
        if lowered.startswith(prefix):
            rest = name[len(prefix) :]
            repo, _, tag = rest.partition(":")
            if repo.count("/") != 1:
                return None
            return repo, (tag if tag and tag.lower() != "latest" else None)
    return None


def hf_name(relative: str) -> str | None:
    """The `hf.co/owner/repo:QUANT` name of a file at `owner/repo/file.gguf` in the models
    directory (where a pull puts it), or None for a file laid out otherwise."""
    parts = relative.replace("\\", "/").split("/")
    if len(parts) != 3:
        return None
    match = _QUANT.search(parts[2])
    return f"{HF_PREFIXES[0]}{parts[0]}/{parts[1]}:{match[1].upper() if match else 'latest'}"


def resolve_name(name: str, ids: Iterable[str], path_of: Callable[[str], str | None]) -> str | None:
    """The served id an Ollama name means, or None when nothing is served under it."""
    known = list(ids)
    if name in known:
        return name
    base, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "")
    if tag.lower() == "latest" and base in known:
        return base
    ref = hf_ref(name)
    if ref is None:
        lowered = {k.lower(): k for k in known}
        return lowered.get(name.lower()) or (lowered.get(base.lower()) if tag.lower() == "latest" else None)
    repo, quant = ref
    folder = "/" + repo.lower() + "/"
    for model_id in known:
        path = (path_of(model_id) or "").replace("\\", "/")
        if folder not in path.lower():
            continue
        match = _QUANT.search(path)
        if quant is None or (match is not None and match[1].upper() == quant.upper()):
            return model_id
    return None
