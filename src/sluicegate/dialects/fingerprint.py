"""`system_fingerprint` in OpenAI's chat and text completions: which build of the server
answered (OpenAI: its backend configuration, to read beside `seed`). llama-server writes
`b<build>-<commit>`, and its clients and tests read the leading `b`; Sluicegate writes
`b<version>-sluicegate`."""

from __future__ import annotations

from sluicegate import __version__

SYSTEM_FINGERPRINT = f"b{__version__}-sluicegate"
