"""A server for the playground and `sluicegate chat` tests: an API key, the files plugin on a
folder with notes, and the scripted model `playground` (scripts/playground.yaml), which loads
just in time (load progress), reasons, calls read_file server-side and answers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from e2e_support import Server, scripted

StartServer = Callable[..., Server]
MODEL = "playground"
API_KEY = "sk-playground-test"
NOTES = "Remember: the playground works.\n"
PLAIN_REPLY = "Hello from the scripted playground model."
NOTES_REPLY = "Your notes say the playground works."
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"  # git-ignored


def start_playground_server(start_server: StartServer, folder: Path) -> Server:
    shared = folder / "shared"
    shared.mkdir(parents=True, exist_ok=True)
    (shared / "notes.txt").write_text(NOTES, encoding="utf-8")
    tables = {"tools.plugins.files": {"root": str(shared)}}
    return start_server({"api_key": API_KEY}, [scripted(MODEL, "playground.yaml")], tables)
