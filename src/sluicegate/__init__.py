"""Sluicegate: a local-first LLM server and gateway speaking every popular chat dialect."""

from sluicegate import _compiled

__version__ = "0.1.0"

# Compiled hot path or its Python source: decided before any of its modules is imported.
_compiled.choose()
