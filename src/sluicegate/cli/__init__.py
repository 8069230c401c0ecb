"""The `sluicegate` command line: serve, chat, models."""

from sluicegate.cli.main import main

__all__ = ["main"]
