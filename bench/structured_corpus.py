"""Benchmark: coverage and compliance of structured output on a public schema corpus.

Run from the repository root (venv active):

    python bench/structured_corpus.py [--suite DIR] [--llama-server URL] [--samples 2]

The corpus is the JSON Schema Test Suite (draft 2020-12; by default the copy the `jsonschema`
sdist vendors, downloaded once into the tests' cache): every schema of the keyword groups that
structured output promises (the groups of `tests/unit/engines/llamacpp/test_json_schema_suite.py`).
Each schema is sent as a Chat Completions `json_schema` `response_format`, `--samples` times
with different seeds, to Sluicegate serving the random-weight demo GGUF (it wanders through
everything a grammar allows) and, with `--llama-server URL`, to a llama-server already running on
the same GGUF (bench/README.md says how to build one) — in the same run, alternating.

Per target it reports: schemas accepted (2xx; a 4xx is a refusal), outputs valid (of the
accepted ones that completed — finish `stop` — validated with `jsonschema`, format checking on),
invalid outputs, cut-off outputs (finish `length`), and 5xx answers or dropped connections.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonschema

sys.path.insert(0, str(Path(__file__).parent))
from local_engine import free_port, serving
from sluicegate.engines.llamacpp.demo import make_demo_gguf

GROUPS = [
    "type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "minLength", "maxLength", "pattern", "enum", "const", "items", "prefixItems", "minItems",
    "maxItems", "required", "properties", "additionalProperties", "anyOf", "oneOf", "allOf",
    "ref", "defs", "optional/format/date", "optional/format/time", "optional/format/date-time",
    "optional/format/uuid", "optional/format/email", "optional/format/ipv4", "optional/format/ipv6",
]  # fmt: skip
FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER


@dataclass
class Tally:
    schemas: int = 0
    accepted: int = 0
    completed: int = 0
    valid: int = 0
    invalid: int = 0
    cut_off: int = 0
    errors: int = 0  # 5xx or a dropped connection
    examples: list[str] = field(default_factory=list)

    def line(self, name: str) -> str:
        pct = 100 * self.accepted / max(self.schemas, 1)
        ok = 100 * self.valid / max(self.completed, 1)
        return (
            f"{name:12} schemas accepted {self.accepted}/{self.schemas} ({pct:.1f}%), outputs valid "
            f"{self.valid}/{self.completed} ({ok:.1f}%), invalid {self.invalid}, cut off "
            f"{self.cut_off}, 5xx {self.errors}"
        )


def corpus(suite: Path) -> list[tuple[str, Any]]:
    schemas = []
    for group in GROUPS:
        for case in json.loads((suite / f"{group}.json").read_text(encoding="utf-8")):
            if isinstance(case["schema"], dict):
                schemas.append((f"{group}: {case['description']}", case["schema"]))
    return schemas


def run(
    client: httpx.Client, url: str, model: str, schema: Any, samples: int, max_tokens: int, tally: Tally
) -> None:
    tally.schemas += 1
    for seed in range(samples):
        body = {
            "model": model,
            "messages": [{"role": "user", "content": "Answer in JSON."}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}},
            "max_tokens": max_tokens,
            "seed": seed,
            "temperature": 1.0,
        }
        try:
            reply = client.post(url + "/v1/chat/completions", json=body)
        except httpx.TransportError:
            tally.errors += 1
            return
        if reply.status_code >= 500:
            tally.errors += 1
            return
        if reply.status_code >= 400:
            return
        if seed == 0:
            tally.accepted += 1
        choice = reply.json()["choices"][0]
        if choice.get("finish_reason") != "stop":
            tally.cut_off += 1
            continue
        tally.completed += 1
        try:
            jsonschema.validate(json.loads(choice["message"]["content"]), schema, format_checker=FORMATS)
            tally.valid += 1
        except (ValueError, jsonschema.ValidationError, jsonschema.SchemaError):
            tally.invalid += 1
            if len(tally.examples) < 10:
                tally.examples.append(f"{json.dumps(schema)[:80]} -> {choice['message']['content'][:60]!r}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--suite", type=Path, help="a checkout of the suite (default: from the jsonschema sdist)"
    )
    parser.add_argument("--llama-server", help="base URL of a llama-server on the same GGUF (optional)")
    parser.add_argument("--gguf", type=Path, help="default: the demo GGUF, written to a temp folder")
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--limit", type=int, default=0, help="only the first N schemas (0: all)")
    args = parser.parse_args()
    if args.suite is not None:
        os.environ["JSON_SCHEMA_TEST_SUITE"] = str(args.suite)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from schema_suite_sources import draft2020_12

    schemas = corpus(draft2020_12())
    if args.limit:
        schemas = schemas[: args.limit]
    with tempfile.TemporaryDirectory(prefix="sluicegate-bench-") as tmp:
        folder = Path(tmp)
        gguf = args.gguf or make_demo_gguf(folder / "demo.gguf", ends_replies=False)
        config = folder / "sluicegate.toml"
        config.write_text(
            f'[server]\nlog_level = "warning"\n\n[[models]]\nid = "demo"\nengine = "llamacpp"\n'
            f'path = "{gguf}"\ncontext_length = 2048\n'
        )
        url = f"http://127.0.0.1:{free_port()}"
        env = {**os.environ, "XDG_DATA_HOME": str(folder / "data")}
        env.pop("SLUICEGATE_CONFIG", None)
        command = [sys.executable, "-m", "sluicegate", "serve", "--config", str(config)]
        command += ["--port", url.rsplit(":", 1)[1]]
        tallies = {"sluicegate": Tally(), "llama-server": Tally()}
        with serving(command, url, folder / "sluicegate.log", env), httpx.Client(timeout=600) as client:
            for index, (_name, schema) in enumerate(schemas):
                run(client, url, "demo", schema, args.samples, args.max_tokens, tallies["sluicegate"])
                if args.llama_server:
                    run(
                        client,
                        args.llama_server,
                        "demo",
                        schema,
                        args.samples,
                        args.max_tokens,
                        tallies["llama-server"],
                    )
                if index % 25 == 24:
                    print(
                        f"{index + 1}/{len(schemas)}: {tallies['sluicegate'].line('sluicegate')}", flush=True
                    )
    print(
        f"\n{len(schemas)} schemas from the JSON Schema Test Suite, {args.samples} samples each, max_tokens {args.max_tokens}"
    )
    for name, tally in tallies.items():
        if name == "llama-server" and not args.llama_server:
            continue
        print(tally.line(name))
        for example in tally.examples:
            print("   invalid:", example)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
