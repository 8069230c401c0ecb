"""llama-cpp-python's low-level ctypes bindings without its high-level package.

`import llama_cpp` runs the package's `__init__`, which imports the high-level `Llama`
(`llama.py`) and with it numpy, jinja2's bytecode cache, diskcache, multiprocessing and the chat
formats: ~20 MiB of RSS that a server driving llama.cpp through the bindings never uses
(bench/README.md, "Memory, round four"). `install()` puts the package into `sys.modules` as the
first line of its `__init__` leaves it (every name of the `llama_cpp.llama_cpp` bindings) and
runs the whole `__init__` the first time a name it lacks is asked for: `llama_cpp.Llama` and
`from llama_cpp import Llama` still work, they pay for their imports when first used. A
submodule asked for by name (`from llama_cpp import mtmd_cpp`) is imported alone.

The package `sluicegate.engines.llamacpp` calls `install()` before any of its modules imports
`llama_cpp`. An `__init__` of another shape (a future llama-cpp-python), or a `llama_cpp`
imported before, is left as it is: the ordinary import, heavier but the same names.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import types
from pathlib import Path
from typing import Any

_PACKAGE = "llama_cpp"
_FIRST_LINE = "from .llama_cpp import *"  # what __init__ starts with: the bindings' names
_EAGER_DUNDERS = frozenset({"__version__", "__all__"})  # set by the rest of __init__


def install() -> bool:
    """Make `import llama_cpp` load the bindings alone; whether it did (False: nothing changed)."""
    if _PACKAGE in sys.modules:
        return False
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or spec.origin is None or spec.submodule_search_locations is None:
        return False  # not installed: the import where it is used says so
    try:
        source = Path(spec.origin).read_text(encoding="utf-8")
    except OSError:
        return False
    lines = [line.strip() for line in source.splitlines()]
    statements = [line for line in lines if line and not line.startswith("#")]
    if not statements or statements[0] != _FIRST_LINE:
        return False
    package = importlib.util.module_from_spec(spec)
    sys.modules[_PACKAGE] = package
    try:
        bindings = _import(f"{_PACKAGE}.llama_cpp")
    except BaseException:
        sys.modules.pop(_PACKAGE, None)
        raise
    names = getattr(bindings, "__all__", None)
    if names is None:  # what `from .llama_cpp import *` takes
        names = [name for name in vars(bindings) if not name.startswith("_")]
    package.__dict__.update({name: getattr(bindings, name) for name in names})
    package.__dict__["__getattr__"] = _Completion(package, source, spec.origin)
    return True


def _import(name: str) -> types.ModuleType:
    """The `import` statement's way (importlib.import_module's bypasses `-X importtime`'s log)."""
    __import__(name)
    return sys.modules[name]


class _Completion:
    """The package's module `__getattr__` (PEP 562): a submodule by its name, else the rest of
    the real `__init__`, run once, then the name from it."""

    def __init__(self, package: types.ModuleType, source: str, origin: str) -> None:
        self._package, self._source, self._origin = package, source, origin
        self._lock = threading.Lock()

    def __call__(self, name: str) -> Any:
        package = self._package
        if name.startswith("__") and name.endswith("__") and name not in _EAGER_DUNDERS:
            raise AttributeError(f"module {_PACKAGE!r} has no attribute {name!r}")
        if name.isidentifier() and importlib.util.find_spec(f"{_PACKAGE}.{name}") is not None:
            return _import(f"{_PACKAGE}.{name}")
        if name.startswith("_") and name not in _EAGER_DUNDERS:  # no star import gives one
            raise AttributeError(f"module {_PACKAGE!r} has no attribute {name!r}")
        with self._lock:
            if package.__dict__.get("__getattr__") is self:
                del package.__dict__["__getattr__"]
                exec(compile(self._source, self._origin, "exec"), package.__dict__)
        try:
            return package.__dict__[name]
        except KeyError:
            raise AttributeError(f"module {_PACKAGE!r} has no attribute {name!r}") from None


def high_level_loaded() -> bool:
    """Whether the rest of `llama_cpp`'s `__init__` (the high-level package) has run."""
    package = sys.modules.get(_PACKAGE)
    return package is not None and not isinstance(package.__dict__.get("__getattr__"), _Completion)
