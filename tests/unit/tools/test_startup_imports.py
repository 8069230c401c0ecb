"""A server that uses no MCP server does not load the MCP SDK: it is ~27 MB of every server's
memory (beside a local model, part of the RSS that issue 21 measures) and half its start-up.
One that may use it loads it at start, not on the event loop in the middle of a request."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _mcp_modules(code: str) -> list[str]:
    script = (
        "import json, sys\n"
        + code
        + "\nprint(json.dumps(sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'mcp_')))))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    modules: list[str] = json.loads(result.stdout)
    return modules


def test_the_server_without_mcp_does_not_import_the_mcp_sdk() -> None:
    assert (
        _mcp_modules("import sluicegate.app.serving, sluicegate.app.factory, sluicegate.tools.catalog") == []
    )


@pytest.mark.parametrize("allow", [False, True])
def test_a_catalog_that_may_connect_to_request_servers_imports_it_up_front(allow: bool) -> None:
    code = f"from sluicegate.tools.catalog import ToolCatalog\nToolCatalog(allow_request_servers={allow})"
    assert ("mcp" in _mcp_modules(code)) is allow


def _loaded(code: str, module: str) -> bool:
    script = f"import sys\n{code}\nprint({module!r} in sys.modules)\n"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return result.stdout.strip() == "True"


def test_the_server_imports_neither_jsonschema_nor_cryptography_until_it_may_need_them(
    tmp_path: object,
) -> None:
    """jsonschema checks a server tool's arguments, cryptography seals `encrypted_content`: ~3 and
    ~7 MiB of every server's memory (bench/README.md, "Memory, round four")."""
    code = (
        "import sluicegate.app.serving, sluicegate.app.factory, sluicegate.tools.catalog\n"
        "from pathlib import Path\n"
        "from sluicegate.core.sealing import sealer_for\n"
        f"sealer_for(Path({str(tmp_path)!r}))\n"
        "sluicegate.tools.catalog.ToolCatalog()"
    )
    assert not _loaded(code, "jsonschema")
    assert not _loaded(code, "cryptography")
    sealed = code + "\nsealer_for(Path(" + repr(str(tmp_path)) + ")).seal({}, purpose='p', scope='s')"
    assert _loaded(sealed, "cryptography")


def test_a_catalog_that_may_call_a_tool_imports_jsonschema_up_front() -> None:
    code = "from sluicegate.tools.catalog import ToolCatalog\nToolCatalog(allow_request_servers=True)"
    assert _loaded(code, "jsonschema")


def test_the_server_imports_the_http_client_only_to_fetch() -> None:
    """httpx2 (~3 MiB of RSS) comes with the transport pinned to a checked address
    (tools/pinned.py): an MCP server or an image URL imports it, a server that may check a URL
    does not."""
    code = "import sluicegate.app.serving, sluicegate.app.factory, sluicegate.tools.catalog, sluicegate.turn.images"
    assert not _loaded(code, "httpx2")
    assert _loaded(code + "\nimport sluicegate.tools.pinned", "httpx2")
