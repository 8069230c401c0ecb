"""Text completions: OpenAI's legacy `POST /v1/completions` and llama-server's `POST /infill`."""
