"""`sluicegate serve` parses its arguments with the parser that also holds `chat` and `models`:
those clients' HTTP library (httpx, with rich and ssl behind it) is imported where they use it,
not by every server (~4 MiB of a local server's RSS, issue 48's memory gap)."""

from __future__ import annotations

import subprocess
import sys


def test_the_command_line_does_not_import_the_clients_http_library() -> None:
    script = "import sys, sluicegate.cli.main\nprint('httpx' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
