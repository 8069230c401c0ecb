"""A toy wire dialect, packaged as a third party would package one: its own spec, parser,
encoder and routes, and one registration (`toy_dialect.registration:REGISTRATION`) that an
entry point in the `sluicegate.dialects` group names. tests/e2e/test_toy_dialect.py serves it
with no edit anywhere in `src/`.

The wire: `POST /toy/say {"model", "say", "stream"}` answers `{"said": text}`, or a stream of
NDJSON lines `{"bit": text}` ending with `{"done": reason}`; errors are `{"oops": message,
"what": param}`; `GET /toy/ping` answers `{"pong": true}`; `{"hush": true}` is answered
`{"hushed": true}` without a turn (its hooks)."""
