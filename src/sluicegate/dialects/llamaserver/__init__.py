"""llama-server's own API (llama.cpp's `tools/server`): `POST /completion` (and `/completions`,
as llama-server answers it), and the shapes of `/tokenize`, `/detokenize`, `/apply-template` and
`/props`, whose routes are in `sluicegate.routes.llamaserver`."""
