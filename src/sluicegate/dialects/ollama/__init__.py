"""Ollama's native API (`/api/chat`, `/api/generate`, …): NDJSON streams, `{"error": …}` errors."""
