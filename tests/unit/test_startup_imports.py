"""A server that uses no MCP server does not load the MCP SDK: it is ~27 MB of every server's
memory (beside a local model, part of the RSS that issue 21 measures) and half its start-up."""

from __future__ import annotations

import subprocess
import sys


def test_the_server_without_mcp_does_not_import_the_mcp_sdk() -> None:
    code = (
        "import sys\n"
        "import sluicegate.serving, sluicegate.server, sluicegate.tools.catalog\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'mcp_types'))))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
