"""Builds the compiled hot path: the modules `src/sluicegate/_compiled.py` lists, with mypyc.

Everything else about the package is in pyproject.toml. `pip install -e .` compiles them in
place beside their sources; `python setup.py build_ext --inplace` rebuilds them without
reinstalling. With SLUICEGATE_PURE_PYTHON=1 set at build time nothing is compiled.
See docs/compiled.md.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("_sluicegate_compiled", HERE / "src/sluicegate/_compiled.py")
assert _spec is not None and _spec.loader is not None
compiled = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compiled)


# Stands for the compiled modules until build_ext runs: mypyc type-checks and writes C when
# called, which pip's other steps (requirements, metadata) need not wait for.
HOT_PATH = Extension("sluicegate._hot_path", sources=[])


class BuildWithRecord(build_ext):
    """build_ext of mypyc's extensions, then the record of which sources they were compiled from."""

    compiled_from: dict[str, str] | None = None  # the sources' hashes as mypyc read them

    def finalize_options(self) -> None:
        if self.distribution.ext_modules == [HOT_PATH]:
            self.compiled_from = compiled.source_hashes(HERE / "src/sluicegate")
            self.distribution.ext_modules = mypyc_extensions()
        super().finalize_options()

    def run(self) -> None:
        super().run()
        if not self.extensions:
            return
        # In place (editable installs, `build_ext --inplace`) the binaries sit beside the
        # sources; for a wheel, in the build directory that becomes the wheel.
        root = HERE / "src" if self.inplace else Path(self.build_lib)
        compiled.write_manifest(root / "sluicegate", HERE / "src/sluicegate", self.compiled_from)
        if self.inplace:  # a module taken off the list: its old binary would shadow its source
            for module, path in compiled.orphans(root / "sluicegate").items():
                self.warn(f"removing {path}: {module} is no longer compiled")
                path.unlink()


def fix_bytes_concat_leak() -> None:
    """mypyc before mypy PR 21469 (mypyc issue 1192) declares that `bytes + bytes` steals its
    left operand, which `CPyBytes_Concat` does not: every owned left operand leaks, so a chain
    like `head + orjson.dumps(text) + tail` leaked one frame per token. The upstream fix, applied
    to the mypyc that builds here; a no-op on a mypyc that has it."""
    import mypyc.primitives.bytes_ops  # noqa: F401 - registers the primitive
    from mypyc.primitives.registry import binary_ops

    for op in binary_ops.get("+", []):
        if op.c_function_name == "CPyBytes_Concat" and op.steals == [True, False]:
            op.steals = False


def fix_stop_async_iteration() -> None:
    """mypyc before mypy PR 21406 loads the name `StopAsyncIteration` (a `raise`, an `except`)
    as the address of CPython's `PyExc_StopAsyncIteration` variable, not the exception class it
    points to: a compiled `raise StopAsyncIteration` crashes the process. Without its entry in
    the table of builtins loaded by address, mypyc loads the name as any other builtin (`async
    for` reads the variable itself, correctly). A no-op on a mypyc that has the fix."""
    import mypyc.primitives.misc_ops  # noqa: F401 - registers the entry
    from mypyc.primitives.registry import builtin_names

    if builtin_names.get("builtins.StopAsyncIteration", (None, ""))[1] == "PyExc_StopAsyncIteration":
        del builtin_names["builtins.StopAsyncIteration"]


def mypyc_extensions() -> list[Any]:
    from mypyc.build import mypycify

    fix_bytes_concat_leak()
    fix_stop_async_iteration()

    sources = [str(compiled.source_path(m, Path("src/sluicegate"))) for m in compiled.COMPILED]
    # The build environment pip makes has only the build requirements (mypy, and orjson and
    # starlette for their types): the other libraries the modules import are Any to mypyc
    # there, which only asks for checks that strict mode would otherwise refuse on Any.
    relaxed = [
        "--ignore-missing-imports",
        "--no-warn-return-any",
        "--no-warn-unused-ignores",
        "--allow-subclassing-any",
        "--allow-untyped-decorators",
        "--allow-untyped-calls",
    ]
    return mypycify([*relaxed, *sources], opt_level="3", verbose=False)


pure = os.environ.get(compiled.PURE_SWITCH, "") not in ("", "0")
setup(ext_modules=[] if pure else [HOT_PATH], cmdclass={"build_ext": BuildWithRecord})
