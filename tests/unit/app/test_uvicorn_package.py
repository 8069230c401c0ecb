"""uvicorn's server without its command line (app/uvicorn_package.py): one server process does
not import `uvicorn.main` (click, the supervisors, multiprocessing, watchfiles), and every name
of the package still works, the rest of it loaded when first asked for."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _run(code: str, path: Path | None = None) -> dict[str, object]:
    prefix = f"import sys\nsys.path.insert(0, {str(path)!r})\n" if path else "import sys\n"
    script = prefix + "import json\n" + code
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    out: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return out


def test_the_server_path_imports_uvicorns_server_and_not_its_command_line() -> None:
    out = _run(
        "from sluicegate.app import uvicorn_package, serving\n"
        "from sluicegate.config import Settings\n"
        "serving.uvicorn_options(Settings())\n"
        "from uvicorn.config import Config\n"
        "from uvicorn.server import Server\n"
        "import uvicorn\n"
        "light = sorted(m for m in sys.modules if m.split('.')[0] in ('click', 'watchfiles', 'multiprocessing')"
        " or m == 'uvicorn.main')\n"
        "same = uvicorn.Config is Config and uvicorn.Server is Server\n"
        "full_before = uvicorn_package.full_package_loaded()\n"
        "run = uvicorn.run\n"  # the workers path (serve_workers) asks for it
        "print(json.dumps({'light': light, 'same': same, 'full_before': full_before,\n"
        "    'full_after': uvicorn_package.full_package_loaded(), 'main': 'uvicorn.main' in sys.modules,\n"
        "    'run': run.__module__, 'version': uvicorn.__version__, 'server': uvicorn.Server is Server}))\n"
    )
    assert out["light"] == []
    assert out["same"] is True and out["full_before"] is False
    assert out["full_after"] is True and out["main"] is True and out["run"] == "uvicorn.main"
    assert out["version"] and out["server"] is True


def test_an_init_of_another_shape_is_imported_as_it_is(tmp_path: Path) -> None:
    package = tmp_path / "uvicorn"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from uvicorn.config import Config\nfrom uvicorn.main import Server, main, run\nSTARTED = True\n"
    )
    out = _run(
        "from sluicegate.app import uvicorn_package\n"
        "print(json.dumps({'installed': uvicorn_package.install(), 'loaded': 'uvicorn' in sys.modules}))\n",
        tmp_path,
    )
    assert out == {"installed": False, "loaded": False}


def test_an_imported_uvicorn_is_left_as_it_is() -> None:
    out = _run(
        "import uvicorn\n"
        "from sluicegate.app import uvicorn_package\n"
        "print(json.dumps({'installed': uvicorn_package.install(), 'full': uvicorn_package.full_package_loaded()}))\n"
    )
    assert out == {"installed": False, "full": True}
