"""The compiled hot path: which modules mypyc compiles, and whether their binaries may be used.

`setup.py` compiles `COMPILED` with mypyc and writes `MANIFEST` beside them: the SHA-256 of each
module's source at build time. At import, `choose()` (run by `sluicegate/__init__.py`, before
any of these modules loads) compares that record with the sources as they are now:

- they match: Python's import system picks the extension modules (it tries them before `.py`);
- `SLUICEGATE_PURE_PYTHON=1`, or a source edited since the build (one warning names it), or a
  binary missing: an import hook loads every module of `COMPILED` from its `.py` instead.

It is all or nothing: mypyc compiles the modules as one group whose code calls across modules
natively, so a compiled module beside a pure copy of a group member would still run the old one.

A binary of a module `COMPILED` no longer lists (left in a developer's tree by an older build)
would shadow its `.py` in either mode: `choose()` warns naming it, and the import hook loads its
`.py` instead (`orphans()`); `setup.py`'s in-place build deletes such binaries.

Standard library only: `setup.py` loads this file before the project's dependencies exist. So a
dialect package's modules are not listed here: each built-in dialect declares its own in the
`COMPILED` constant of its `registration.py`, read from the source (`ast`), never imported.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

MANIFEST = "_compiled_build.json"
PURE_SWITCH = "SLUICEGATE_PURE_PYTHON"
PACKAGE_DIR = Path(__file__).resolve().parent


def declared_by_dialects(package_dir: Path = PACKAGE_DIR) -> tuple[str, ...]:
    """The modules each built-in dialect package compiles: the `COMPILED` tuple of module names
    (relative to the package) in `dialects/<name>/registration.py`, read without importing it."""
    found: list[str] = []
    for path in sorted((package_dir / "dialects").glob("*/registration.py")):
        for node in ast.parse(path.read_bytes(), str(path)).body:
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            if any(isinstance(t, ast.Name) and t.id == "COMPILED" for t in targets):
                found += [f"sluicegate.dialects.{path.parent.name}.{m}" for m in ast.literal_eval(value)]
    return tuple(found)


# What the profile of a relayed token names (bench/README.md, "compiled hot path"): the upstream
# chunk parser, the segmenter, the output parser, the accumulator, the framing, the stream core
# that composes them per read; and the dialects' encoders, which their packages declare.
COMPILED: tuple[str, ...] = (
    "sluicegate.core.events",
    "sluicegate.core.frames",  # every encoder makes one per token
    "sluicegate.core.segmenter",  # and `Segments`, the per-read step over it
    "sluicegate.core.accumulate",
    "sluicegate.core.validation",  # per request: the dialects' typed field access
    "sluicegate.core.request",  # what the parse makes and the engine reads: native fields
    "sluicegate.engines.upstream.wire",
    "sluicegate.engines.upstream.completions",  # extends wire's classes: compiled with them
    "sluicegate.engines.upstream.anthropic_wire",
    "sluicegate.parsing.scan",
    "sluicegate.parsing.markup",
    "sluicegate.transport.sse",
    "sluicegate.turn.stream_core",  # the per-read steps, composed once: both drivers call it
    "sluicegate.observe.requests",  # its tap sees every event the core encodes (a native call)
    "sluicegate.observe.series",  # the request's metric series: what the tap and observer update
    "sluicegate.core.ids",  # three ids a request, the segmenter's item ids among them
    # Plain functions the runner's interpreted start calls once a request: the body's length
    # and message, its JSON checks, the response headers' (bench/README.md, gateway "Round sixteen").
    "sluicegate.core.body",
    "sluicegate.core.json_limits",
    "sluicegate.core.headers",
    # The loop's one timer heap: a stream's clocks arm and cancel three alarms a request start,
    # called from compiled code (the transport, the upstream clocks) and the deadline
    # (bench/README.md, gateway "Round fifteen").
    "sluicegate.core.alarms",
    # A stream's deadline: made, armed and disarmed once a request, and its clock read on every
    # read by the compiled segmenter (native attributes, not a Python object's).
    "sluicegate.core.deadlines",
    # The request path after the runner (bench/README.md, "Round twelve"), each measured in
    # callgrind's instructions per request start: the upstream client (its connection's
    # callbacks run per read), its clocks and the engine's request body and decoder; the answer
    # wait and the stream transport (its lane's `emit` per read). Not the runner: compiled, a
    # start cost 5% more instructions — its coroutines sit between interpreted ones, and a
    # compiled coroutine awaited by and awaiting interpreted code costs more than an
    # interpreted one. The engine's relay (`relay.py`) and the turn's frames (`pipeline.py`,
    # and `Reads` in segmenter.py) are async iterator objects, not async generators (which
    # mypyc does not compile), so that the chain from the stream's transport to the upstream
    # client is compiled end to end (bench/README.md, "Round thirteen").
    "sluicegate.engines.upstream.http",
    "sluicegate.engines.upstream.timeouts",
    "sluicegate.engines.upstream.engine",
    "sluicegate.engines.upstream.request_body",  # the upstream's body, field by field, per start
    "sluicegate.engines.upstream.relay",
    "sluicegate.engines.carrier",  # the relay's `carrier.carry` per carried read: a native call
    "sluicegate.engines.upstream.sending",  # the replicas asked in turn: between relay and pool
    "sluicegate.turn.pipeline",
    "sluicegate.transport.answer_first",
    "sluicegate.transport.stream",
    "sluicegate.transport.answer_send",  # the runner's `send`: a stream's head passes through it
    "sluicegate.app.response_head",  # a head's lines in one pass (the protocol's `_send_head`)
    # The llamacpp worker's per-token path between two decodes (bench/README.md, batching's
    # "round fourteen"): on one core beside the decode, with the GIL held, so every call there
    # is paid in full. Plain calls on one thread, which mypyc does well.
    "sluicegate.engines.llamacpp.sequence",
    "sluicegate.engines.llamacpp.stops",
    "sluicegate.engines.llamacpp.utf8",
    "sluicegate.engines.llamacpp.server_stats",
    *declared_by_dialects(),
)

# The outcome of `choose()`: "compiled", "pure (why)" or "not built".
mode = "not built"


def source_path(module: str, package_dir: Path = PACKAGE_DIR) -> Path:
    """`sluicegate.core.segment` → `<package_dir>/core/segment.py`."""
    return package_dir.joinpath(*module.split(".")[1:]).with_suffix(".py")


def source_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def binary_path(module: str, package_dir: Path = PACKAGE_DIR) -> Path | None:
    """The extension module built for this interpreter beside the source, if any."""
    source = source_path(module, package_dir)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = source.with_suffix(suffix)
        if candidate.exists():
            return candidate
    return None


def orphans(package_dir: Path = PACKAGE_DIR) -> dict[str, Path]:
    """The extension modules in `package_dir` that `COMPILED` does not list, by module name:
    Python's import system tries them before the `.py` beside them, so each would run the code
    of the build that left it (one walk of the package: well under a millisecond)."""
    listed = set(COMPILED)
    found: dict[str, Path] = {}
    for root, dirs, files in os.walk(package_dir):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            suffix = next((s for s in importlib.machinery.EXTENSION_SUFFIXES if name.endswith(s)), None)
            if suffix is None:
                continue
            parts = Path(root, name[: -len(suffix)]).relative_to(package_dir).parts
            module = ".".join((package_dir.name, *parts))
            if module not in listed:
                found[module] = Path(root, name)
    return found


def source_hashes(sources: Path) -> dict[str, str]:
    """Each module of `COMPILED` by the SHA-256 of its source in `sources` (a package dir)."""
    return {m: source_hash(source_path(m, sources)) for m in COMPILED}


def write_manifest(
    package_dir: Path, sources: Path | None = None, record: dict[str, str] | None = None
) -> None:
    """Record in `package_dir` the sources (in `sources`, by default the same dir) its binaries
    were compiled from (`setup.py`): `record`, their hashes when mypyc read them, so that a
    source edited while the build ran shows as changed; else their hashes now."""
    if record is None:
        record = source_hashes(sources or package_dir)
    (package_dir / MANIFEST).write_text(json.dumps({"modules": record}, indent=1) + "\n")


def stale(package_dir: Path = PACKAGE_DIR) -> str | None:
    """Why the binaries in `package_dir` must not be used, or None when they match the sources.
    Also None when nothing was built (no binaries, no record): then there is nothing to shadow."""
    binaries = {m: binary_path(m, package_dir) for m in COMPILED}
    try:
        recorded: dict[str, str] = json.loads((package_dir / MANIFEST).read_text())["modules"]
    except (OSError, ValueError, KeyError, TypeError):
        found = [m for m, b in binaries.items() if b is not None]
        return f"{found[0]} is compiled but no build record ({MANIFEST}) says from what" if found else None
    if set(recorded) != set(COMPILED):
        return "the build compiled another list of modules"
    for module in COMPILED:
        if binaries[module] is None:
            return f"{module} has no compiled binary"
        if recorded[module] != source_hash(source_path(module, package_dir)):
            return f"{source_path(module, package_dir).name} ({module}) changed since it was compiled"
    return None


_pure: set[str] = set()  # the modules the import hook loads from their `.py`


class _PureFinder:
    """Finds the modules in `_pure` as their `.py` source, ahead of the extension modules."""

    @staticmethod
    def find_spec(
        name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name not in _pure:
            return None
        source = source_path(name)
        return importlib.util.spec_from_file_location(name, source) if source.is_file() else None


def use_pure(modules: Sequence[str] = COMPILED) -> None:
    _pure.update(modules)
    if not any(isinstance(f, _PureFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PureFinder())


def _shadow_guard() -> None:
    """Binaries of modules `COMPILED` does not list: loaded from their `.py`, with one warning
    naming them (one without a `.py` would run old code: it is named to be deleted)."""
    left = orphans()
    if not left:
        return
    use_pure(list(left))
    named = ", ".join(f"{m} ({p})" for m, p in sorted(left.items()))
    warnings.warn(
        f"Sluicegate found compiled binaries of modules it does not compile: {named}. An older "
        "build left them; their .py is loaded instead. Delete them (or rebuild with "
        "`python setup.py build_ext --inplace`, which removes them).",
        RuntimeWarning,
        stacklevel=3,
    )


def choose() -> str:
    """Pick compiled or pure for this process, once, before any module of `COMPILED` loads."""
    global mode
    _shadow_guard()
    if os.environ.get(PURE_SWITCH, "") not in ("", "0"):
        use_pure()
        mode = f"pure ({PURE_SWITCH} is set)"
        return mode
    why = stale()
    if why is not None:
        use_pure()
        mode = f"pure ({why})"
        warnings.warn(
            f"Sluicegate runs its hot path uncompiled: {why}. Rebuild with "
            "`python setup.py build_ext --inplace` (or `pip install -e .`), "
            f"or set {PURE_SWITCH}=1 to say you mean it.",
            RuntimeWarning,
            stacklevel=2,
        )
        return mode
    mode = "compiled" if (PACKAGE_DIR / MANIFEST).exists() else "not built"
    return mode


def loaded() -> dict[str, bool]:
    """For each module of `COMPILED` imported so far: is it the extension module?"""
    return {
        name: isinstance(getattr(module, "__loader__", None), importlib.machinery.ExtensionFileLoader)
        for name in COMPILED
        if (module := sys.modules.get(name)) is not None
    }
