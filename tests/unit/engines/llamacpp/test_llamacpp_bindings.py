"""llama-cpp-python's bindings without its high-level package (engines/llamacpp/bindings.py).

Each check runs in a fresh interpreter: what is imported is the point, and a process can import
a module only once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sluicegate.engines.llamacpp import bindings


def _run(code: str, *, path: Path | None = None, prelude: str = "") -> dict[str, object]:
    """Run `code` (which sets `out`) in a fresh interpreter; `path` goes first on sys.path."""
    script = "import json, sys\n" + prelude
    if path is not None:
        script += f"sys.path.insert(0, {str(path)!r})\n"
    script += textwrap.dedent(code) + "\nprint(json.dumps(out))\n"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    answer: dict[str, object] = json.loads(result.stdout.splitlines()[-1])
    return answer


def test_the_engine_imports_the_bindings_without_numpy_or_the_high_level_package() -> None:
    out = _run(
        """
        import sluicegate.engines.llamacpp
        import llama_cpp
        out = {
            "numpy": "numpy" in sys.modules,
            "llama": "llama_cpp.llama" in sys.modules,
            "internals": "llama_cpp._internals" in sys.modules,
            "decode": callable(llama_cpp.llama_decode),
            "constant": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
        }
        """
    )
    assert out == {"numpy": False, "llama": False, "internals": False, "decode": True, "constant": 1}


def test_the_high_level_names_still_come_when_asked_for() -> None:
    out = _run(
        """
        import importlib.metadata
        import sluicegate.engines.llamacpp
        import llama_cpp
        from llama_cpp import mtmd_cpp  # a submodule alone: not the high-level package
        before = "llama_cpp.llama" in sys.modules
        from llama_cpp import Llama, LlamaGrammar
        out = {
            "submodule": mtmd_cpp.__name__,
            "before": before,
            "after": "llama_cpp.llama" in sys.modules,
            "llama": Llama.__module__,
            "grammar": LlamaGrammar.__module__,
            "version": llama_cpp.__version__ == importlib.metadata.version("llama-cpp-python"),
            "missing": not hasattr(llama_cpp, "no_such_name"),
        }
        """
    )
    assert out == {
        "submodule": "llama_cpp.mtmd_cpp",
        "before": False,
        "after": True,
        "llama": "llama_cpp.llama",
        "grammar": "llama_cpp.llama_grammar",
        "version": True,
        "missing": True,
    }


def _fake_package(root: Path, init: str) -> Path:
    package = root / "llama_cpp"
    package.mkdir()
    (package / "__init__.py").write_text(init)
    (package / "llama_cpp.py").write_text("def llama_decode():\n    return 'low'\n_private = 1\n")
    (package / "llama.py").write_text("import sys\nsys.modules['heavy_marker'] = sys\nclass Llama: pass\n")
    return root


@pytest.mark.parametrize(
    ("init", "lazy"),
    [
        ("from .llama_cpp import *\nfrom .llama import *\n\n__version__ = '9.9'\n", True),
        ("# a comment first\nfrom .llama_cpp import *\nfrom .llama import *\n", True),
        ("from .llama import *\nfrom .llama_cpp import *\n", False),  # another shape: imported as is
    ],
)
def test_an_init_of_the_known_shape_is_deferred_any_other_is_imported_as_it_is(
    tmp_path: Path, init: str, lazy: bool
) -> None:
    # bindings.py alone: the package sluicegate.engines.llamacpp imports the real llama_cpp
    out = _run(
        """
        import importlib.util
        spec = importlib.util.spec_from_file_location("bindings", BINDINGS)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        high_level_loaded, install = module.high_level_loaded, module.install
        installed = install()
        import llama_cpp
        out = {
            "installed": installed,
            "heavy": "heavy_marker" in sys.modules,
            "low": llama_cpp.llama_decode(),
            "private": hasattr(llama_cpp, "_private"),
            "loaded": high_level_loaded(),
            "llama": llama_cpp.Llama.__name__,
            "heavy after": "heavy_marker" in sys.modules,
            "again": install(),
        }
        """,
        path=_fake_package(tmp_path, init),
        prelude=f"BINDINGS = {bindings.__file__!r}\n",
    )
    assert out == {
        "installed": lazy,
        "heavy": not lazy,
        "low": "low",
        "private": False,
        "loaded": not lazy,
        "llama": "Llama",
        "heavy after": True,
        "again": False,
    }


@pytest.mark.parametrize(
    ("sampling", "grammar", "wanted"),
    [
        ({}, False, False),  # llama.cpp's sampler chain: no logits read in Python
        ({"temperature": 0.0}, False, True),  # the greedy argmax
        ({"temperature": 0.0, "repeat_penalty": 1.3}, False, False),  # a chain again
        ({"logprobs": True}, False, True),
        ({"token_ids": True}, False, True),  # llama-server's token ids carry their logprob
        ({}, True, True),  # a grammar's mask
    ],
)
def test_the_requests_that_read_logits_through_numpy(
    sampling: dict[str, object], grammar: bool, wanted: bool
) -> None:
    from sluicegate.core.request import SamplingParams
    from sluicegate.engines.llamacpp.grammar import Grammar
    from sluicegate.engines.llamacpp.runtime import needs_numpy

    rule = Grammar("answer: /a/", "json_object") if grammar else None
    assert needs_numpy(SamplingParams(**sampling), rule) is wanted  # type: ignore[arg-type]
