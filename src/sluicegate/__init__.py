"""Sluicegate: a local-first LLM server and gateway speaking every popular chat dialect."""

__version__ = "0.1.0"
