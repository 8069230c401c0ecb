"""uvicorn's server without its command line.

`import uvicorn` (or any of its modules: the package's `__init__` runs first) imports
`uvicorn.main`, the `uvicorn` command: click, the reload and workers supervisors, and with them
multiprocessing and watchfiles (a Rust extension): ~2.4 MiB of RSS that a server which runs one
process never uses (bench/README.md, "Memory, round five"). `install()` puts the package into
`sys.modules` with what the rest of uvicorn asks of it (`Config`, and `Server`), and runs its
real `__init__` the first time another name is asked for (`uvicorn.run`, `uvicorn.main`): the
workers path (`serve_workers`) and any other user of the full package still get it.

An `__init__` of another shape (a uvicorn past the pin in pyproject.toml), or a uvicorn imported
before, is left as it is: the ordinary import, heavier but the same names.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import types
from pathlib import Path
from typing import Any

_PACKAGE = "uvicorn"
# What the package's `__init__` holds (0.54), comments and blank lines aside.
_INIT = (
    "from uvicorn.config import Config",
    "from uvicorn.main import Server, main, run",
)
_INIT_NAMES = ("__version__ = ", "__all__ = ")


def install() -> bool:
    """Make `import uvicorn.<module>` skip `uvicorn.main`; whether it did (False: nothing changed)."""
    if _PACKAGE in sys.modules:
        return False
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or spec.origin is None or spec.loader is None or spec.submodule_search_locations is None:
        return False
    try:
        source = Path(spec.origin).read_text(encoding="utf-8")
    except OSError:
        return False
    statements = [line.strip() for line in source.splitlines() if line.strip() and not line.startswith("#")]
    if tuple(statements[: len(_INIT)]) != _INIT or not all(
        line.startswith(_INIT_NAMES) for line in statements[len(_INIT) :]
    ):
        return False
    package = importlib.util.module_from_spec(spec)
    sys.modules[_PACKAGE] = package
    try:
        __import__("uvicorn.config")
        __import__("uvicorn.server")
    except BaseException:
        for name in [name for name in sys.modules if name == _PACKAGE or name.startswith(_PACKAGE + ".")]:
            del sys.modules[name]
        raise
    package.__dict__["Config"] = sys.modules["uvicorn.config"].Config
    package.__dict__["Server"] = sys.modules["uvicorn.server"].Server
    package.__dict__["__getattr__"] = _Completion(package, spec.loader)
    return True


def full_package_loaded() -> bool:
    """Whether uvicorn's whole `__init__` (with `uvicorn.main`) has run."""
    package = sys.modules.get(_PACKAGE)
    return package is not None and not isinstance(package.__dict__.get("__getattr__"), _Completion)


class _Completion:
    """The package's module `__getattr__` (PEP 562): the real `__init__`, run once, then the name."""

    def __init__(self, package: types.ModuleType, loader: Any) -> None:
        self._package, self._loader = package, loader
        self._lock = threading.Lock()

    def __call__(self, name: str) -> Any:
        package = self._package
        if name.startswith("__") and name.endswith("__") and name not in ("__version__", "__all__"):
            raise AttributeError(f"module {_PACKAGE!r} has no attribute {name!r}")
        with self._lock:
            if package.__dict__.get("__getattr__") is self:
                del package.__dict__["__getattr__"]
                self._loader.exec_module(package)
        try:
            return package.__dict__[name]
        except KeyError:
            raise AttributeError(f"module {_PACKAGE!r} has no attribute {name!r}") from None
