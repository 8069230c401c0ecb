"""Benchmark: coverage and compliance of structured output on a public schema corpus.

Run from the repository root (venv active):

    python bench/structured_corpus.py [--llama-server-binary PATH | --llama-server URL] [--samples 2]

The corpus has two parts: the JSON Schema Test Suite (draft 2020-12; by default the copy the
`jsonschema` sdist vendors, downloaded once into the tests' cache) — every object schema of the
keyword groups that structured output promises — and the committed sample of JSONSchemaBench's
real-world schemas (`tests/data/jsonschemabench_sample.json`, 94 schemas from ten collections:
GlaiveAI function signatures, GitHub trivial…ultra, JSON Schema Store, Kubernetes, Snowplow,
Washington Post). Each schema is sent as a Chat Completions `json_schema` `response_format`,
`--samples` times with different seeds, to Sluicegate serving the random-weight demo GGUF (it
wanders through everything a grammar allows) and to llama-server on the same GGUF — started by
the script with `--llama-server-binary` (with `--no-repack`), or already running at
`--llama-server URL` — in the same run, alternating schema by schema.

Per target it reports: schemas accepted (2xx; a 4xx is a refusal), outputs valid (of the
accepted ones that completed — finish `stop` — validated with `jsonschema`, format checking on),
invalid outputs, cut-off outputs (finish `length`), and 5xx answers or dropped connections,
for each part of the corpus and both together; `--out FILE` appends every schema's outcome on
both servers as it goes (status, the refusal's message, valid / invalid counts).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonschema

sys.path.insert(0, str(Path(__file__).parent))
from local_engine import free_port, serving
from sluicegate.demo.model import make_demo_gguf

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "tests" / "data" / "jsonschemabench_sample.json"
GROUPS = [
    "type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "minLength", "maxLength", "pattern", "enum", "const", "items", "prefixItems", "minItems",
    "maxItems", "required", "properties", "additionalProperties", "anyOf", "oneOf", "allOf",
    "ref", "defs", "optional/format/date", "optional/format/time", "optional/format/date-time",
    "optional/format/uuid", "optional/format/email", "optional/format/ipv4", "optional/format/ipv6",
]  # fmt: skip
FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER
PARTS = ("JSON Schema Test Suite", "JSONSchemaBench sample")


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

    def add(self, outcome: dict[str, Any]) -> None:
        self.schemas += 1
        self.accepted += outcome["accepted"]
        for key in ("completed", "valid", "invalid", "cut_off", "errors"):
            setattr(self, key, getattr(self, key) + outcome[key])

    def line(self, name: str) -> str:
        pct = 100 * self.accepted / max(self.schemas, 1)
        ok = 100 * self.valid / max(self.completed, 1)
        return (
            f"{name:12} schemas accepted {self.accepted}/{self.schemas} ({pct:.1f}%), outputs valid "
            f"{self.valid}/{self.completed} ({ok:.1f}%), invalid {self.invalid}, cut off "
            f"{self.cut_off}, 5xx {self.errors}"
        )


def corpus(suite: Path) -> list[tuple[str, str, Any]]:
    """(part, name, schema) for every schema of both parts."""
    schemas = []
    for group in GROUPS:
        for case in json.loads((suite / f"{group}.json").read_text(encoding="utf-8")):
            if isinstance(case["schema"], dict):
                schemas.append((PARTS[0], f"{group}: {case['description']}", case["schema"]))
    for entry in json.loads(SAMPLE.read_text(encoding="utf-8"))["schemas"]:
        schemas.append((PARTS[1], entry["id"], entry["schema"]))
    return schemas


def run(client: httpx.Client, url: str, schema: Any, samples: int, max_tokens: int) -> dict[str, Any]:
    """One schema on one server: its outcome (accepted, counts, the refusal's message)."""
    outcome: dict[str, Any] = dict.fromkeys(
        ("accepted", "completed", "valid", "invalid", "cut_off", "errors"), 0
    )
    outcome["status"], outcome["message"], outcome["invalid_outputs"] = None, "", []
    for seed in range(samples):
        body = {
            "model": "demo",
            "messages": [{"role": "user", "content": "Answer in JSON."}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}},
            "max_tokens": max_tokens,
            "seed": seed,
            "temperature": 1.0,
        }
        try:
            reply = client.post(url + "/v1/chat/completions", json=body)
        except httpx.TransportError as exc:
            outcome["errors"] += 1
            outcome["status"], outcome["message"] = "dropped", str(exc)
            return outcome
        outcome["status"] = reply.status_code
        if reply.status_code >= 400:
            outcome["errors"] += reply.status_code >= 500
            with contextlib.suppress(ValueError, KeyError, TypeError):
                outcome["message"] = reply.json()["error"]["message"][:300]
            return outcome
        outcome["accepted"] = 1
        choice = reply.json()["choices"][0]
        if choice.get("finish_reason") != "stop":
            outcome["cut_off"] += 1
            continue
        outcome["completed"] += 1
        content = choice["message"]["content"]
        try:
            jsonschema.validate(json.loads(content), schema, format_checker=FORMATS)
            outcome["valid"] += 1
        except (ValueError, jsonschema.ValidationError, jsonschema.SchemaError) as exc:
            outcome["invalid"] += 1
            outcome["invalid_outputs"].append(
                {"output": content[:400], "why": str(exc).splitlines()[0][:200]}
            )
    return outcome


@contextlib.contextmanager
def llama_server(binary: str | None, url: str | None, gguf: Path, folder: Path) -> Iterator[str | None]:
    """The llama-server to compare with: the one at `url`, or one the script starts on `gguf`."""
    if binary is None:
        yield url
        return
    base = f"http://127.0.0.1:{free_port()}"
    command = [binary, "-m", str(gguf), "--no-repack", "-c", "2048", "-np", "1", "-t", "2", "--jinja"]
    command += ["--host", "127.0.0.1", "--port", base.rsplit(":", 1)[1], "--alias", "demo"]
    with serving(command, base, folder / "llama-server.log", dict(os.environ)):
        yield base


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--suite", type=Path, help="a checkout of the suite (default: from the jsonschema sdist)"
    )
    parser.add_argument("--llama-server", help="base URL of a llama-server on the same GGUF")
    parser.add_argument("--llama-server-binary", help="start this llama-server on the same GGUF")
    parser.add_argument("--gguf", type=Path, help="default: the demo GGUF, written to a temp folder")
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--limit", type=int, default=0, help="only every Nth schema (0: all)")
    parser.add_argument(
        "--out", type=Path, help="append each schema's outcome on both servers here (JSON lines)"
    )
    parser.add_argument("--only", choices=("suite", "sample"), help="only one part of the corpus")
    args = parser.parse_args()
    if args.suite is not None:
        os.environ["JSON_SCHEMA_TEST_SUITE"] = str(args.suite)
    sys.path.insert(0, str(ROOT / "tests"))
    from schema_suite_sources import draft2020_12

    schemas = corpus(draft2020_12())
    if args.only:
        schemas = [entry for entry in schemas if entry[0] == PARTS[args.only == "sample"]]
    if args.limit:
        schemas = schemas[:: args.limit]
    targets = ["sluicegate"] + (["llama-server"] if args.llama_server or args.llama_server_binary else [])
    tallies = {(part, name): Tally() for part in (*PARTS, "both") for name in targets}
    with tempfile.TemporaryDirectory(prefix="sluicegate-bench-") as tmp:
        folder = Path(tmp)
        gguf = args.gguf or make_demo_gguf(folder / "demo.gguf", ends_replies=False)
        config = folder / "sluicegate.toml"
        config.write_text(
            f'[server]\nlog_level = "warning"\n\n[[models]]\nid = "demo"\nengine = "llamacpp"\n'
            f'path = "{gguf}"\ncontext_length = 2048\nthreads = 2\n'
        )
        url = f"http://127.0.0.1:{free_port()}"
        env = {**os.environ, "XDG_DATA_HOME": str(folder / "data")}
        env.pop("SLUICEGATE_CONFIG", None)
        command = [sys.executable, "-m", "sluicegate", "serve", "--config", str(config)]
        command += ["--port", url.rsplit(":", 1)[1]]
        with (
            serving(command, url, folder / "sluicegate.log", env),
            llama_server(args.llama_server_binary, args.llama_server, gguf, folder) as reference,
            httpx.Client(timeout=600) as client,
        ):
            urls = {"sluicegate": url, "llama-server": reference}
            for index, (part, name, schema) in enumerate(schemas):
                record: dict[str, Any] = {"part": part, "name": name}
                # Alternate which server goes first, so neither always runs on a warmer cache.
                for target in targets if index % 2 == 0 else targets[::-1]:
                    outcome = run(client, str(urls[target]), schema, args.samples, args.max_tokens)
                    record[target] = outcome
                    for key in ((part, target), ("both", target)):
                        tallies[key].add(outcome)
                        if outcome["invalid_outputs"] and len(tallies[key].examples) < 10:
                            tallies[key].examples.append(f"{name}: {outcome['invalid_outputs'][0]}")
                if args.out:  # as it goes: a run stopped early keeps what it measured
                    with args.out.open("a", encoding="utf-8") as out:
                        out.write(json.dumps(record, ensure_ascii=False) + "\n")
                if index % 25 == 24:
                    print(f"{index + 1}/{len(schemas)}: " + "; ".join(
                        tallies[("both", t)].line(t) for t in targets), flush=True)  # fmt: skip
    print(
        f"\n{len(schemas)} schemas, {args.samples} samples each, max_tokens {args.max_tokens}, load average "
        + " ".join(f"{x:.1f}" for x in os.getloadavg())
    )
    for part in (*PARTS, "both"):
        print(f"\n{part}:")
        for target in targets:
            print(tallies[(part, target)].line(target))
    for target in targets:
        for example in tallies[("both", target)].examples:
            print(f"   invalid ({target}):", example)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
