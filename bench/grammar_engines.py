"""Benchmark: llguidance against llama.cpp's own grammar sampler, in process, no server.

Run from the repository root (venv active):

    python bench/grammar_engines.py

On one vocabulary (by default the demo GGUF's, padded to `--vocab` tokens, as
`structured_output.py` uses), for a few schemas, each engine:

- compiles the schema: llguidance from the JSON schema itself; llama.cpp from the GBNF text
  llama-cpp-python's converter writes (the engine Sluicegate used before, and its port of the
  grammar llama-server builds), conversion included;
- walks one valid answer token by token and, at every step, computes the whole-vocabulary mask
  (llguidance: `compute mask` into a bitmask and apply it to the logits; llama.cpp: one
  `llama_sampler_apply` over every token), then accepts the token — what a step costs when the
  model's first choice was refused;
- checks one token alone (what a step costs when the model's first choice is allowed).

It prints the median per-token cost of each, and the ratios. Absolute numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp.llama_grammar import SchemaConverter
from llguidance import LLMatcher

sys.path.insert(0, str(Path(__file__).parent.parent / "src"))
from sluicegate.demo.model import base_vocab_size, make_demo_gguf
from sluicegate.engines.llamacpp.constrained import vocab_tokenizer
from sluicegate.engines.llamacpp.grammar import json_schema_grammar
from sluicegate.engines.llamacpp.runtime import Vocabulary

SCHEMAS: dict[str, tuple[dict[str, Any], Any]] = {
    "person": (
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 20},
                "age": {"type": "integer", "minimum": 0, "maximum": 150},
                "email": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
            },
            "required": ["name", "age", "email", "tags"],
            "additionalProperties": False,
        },
        {"name": "Ada Lovelace", "age": 36, "email": "ada@example.com", "tags": ["math", "poetry"]},
    ),
    "notes": (
        {
            "type": "object",
            "properties": {
                "notes": {"type": "array", "items": {"type": "string", "maxLength": 24}, "minItems": 3},
                "done": {"type": "boolean"},
            },
            "required": ["notes", "done"],
            "additionalProperties": False,
        },
        {"notes": ["first of them", "the second", "a third note here"], "done": True},
    ),
}


def gbnf(schema: dict[str, Any]) -> str:
    make: Any = SchemaConverter
    converter = make(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    converter.visit(converter.resolve_refs(schema, "schema"), "")
    text: str = converter.format_grammar()
    return text


def llamacpp_walk(
    vocab: Any, n_vocab: int, text: str, tokens: list[int]
) -> tuple[float, list[float], list[float]]:
    started = time.perf_counter()
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, text.encode(), b"root")
    compile_s = time.perf_counter() - started
    assert sampler, "llama.cpp could not parse the grammar"
    cells = (llama_cpp.llama_token_data * n_vocab)()
    one = (llama_cpp.llama_token_data * 1)()
    masks, checks = [], []
    for token in tokens:
        t0 = time.perf_counter()
        one[0] = llama_cpp.llama_token_data(token, 1.0, 0.0)
        llama_cpp.llama_sampler_apply(
            sampler, ctypes.byref(llama_cpp.llama_token_data_array(one, 1, -1, False))
        )
        t1 = time.perf_counter()
        for i in range(n_vocab):
            cells[i].id, cells[i].logit = i, 0.0
        t2 = time.perf_counter()
        array = llama_cpp.llama_token_data_array(cells, n_vocab, -1, False)
        llama_cpp.llama_sampler_apply(sampler, ctypes.byref(array))
        t3 = time.perf_counter()
        assert not np.isinf(cells[token].logit), "the grammar refused the answer"
        llama_cpp.llama_sampler_accept(sampler, token)
        checks.append(t1 - t0)
        masks.append(t3 - t2)
    llama_cpp.llama_sampler_free(sampler)
    return compile_s, masks, checks


def guidance_walk(
    tokenizer: Any, n_vocab: int, lark: str, tokens: list[int]
) -> tuple[float, list[float], list[float]]:
    started = time.perf_counter()
    matcher = LLMatcher(tokenizer, LLMatcher.grammar_from_lark(lark), log_level=0)
    compile_s = time.perf_counter() - started
    assert not matcher.is_error(), matcher.get_error()
    mask = np.zeros((n_vocab + 31) // 32, dtype=np.int32)
    logits = np.zeros(n_vocab, dtype=np.float32)
    masks, checks = [], []
    for token in tokens:
        t0 = time.perf_counter()
        matcher.validate_tokens([token])
        t1 = time.perf_counter()
        matcher.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
        allowed = np.unpackbits(mask.view(np.uint8), bitorder="little")[:n_vocab].astype(bool)
        np.copyto(logits, -np.inf, where=~allowed)
        t2 = time.perf_counter()
        assert allowed[token], "the grammar refused the answer"
        assert matcher.consume_token(token)
        checks.append(t1 - t0)
        masks.append(t2 - t1)
    return compile_s, masks, checks


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gguf", type=Path, help="default: the demo model, written to a temp folder")
    parser.add_argument("--vocab", type=int, default=32000, help="vocabulary size of the demo model")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sluicegate-bench-") as tmp:
        gguf = args.gguf or make_demo_gguf(
            Path(tmp) / "demo.gguf", extra_vocab=max(args.vocab - base_vocab_size(), 0)
        )
        vocabulary = Vocabulary(gguf)
        vocab = vocabulary.model.vocab
        n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
        started = time.perf_counter()
        tokenizer = vocab_tokenizer(vocab)
        print(
            f"vocabulary {n_vocab} tokens; llguidance tokenizer built in {time.perf_counter() - started:.3f} s"
        )
        for name, (schema, answer) in SCHEMAS.items():
            text = json.dumps(answer)
            tokens = vocabulary.model.tokenize(text.encode(), add_bos=False, special=False)
            t0 = time.perf_counter()
            grammar_text = gbnf(json.loads(json.dumps(schema)))
            convert = time.perf_counter() - t0
            t0 = time.perf_counter()
            lark = json_schema_grammar(schema, "bench").lark
            build = time.perf_counter() - t0
            l_compile, l_masks, l_checks = llamacpp_walk(vocab, n_vocab, grammar_text, tokens)
            g_compile, g_masks, g_checks = guidance_walk(tokenizer, n_vocab, lark, tokens)
            ms = 1000
            lm, gm = statistics.median(l_masks) * ms, statistics.median(g_masks) * ms
            lc, gc = statistics.median(l_checks) * 1e6, statistics.median(g_checks) * 1e6
            print(f"\nschema {name!r}: {len(tokens)} tokens")
            print(
                f"  compile: llama.cpp {(convert + l_compile) * ms:.2f} ms, llguidance {(build + g_compile) * ms:.2f} ms"
            )
            print(
                f"  whole-vocabulary mask per token: llama.cpp {lm:.3f} ms, llguidance {gm:.3f} ms ({lm / gm:.1f}x)"
            )
            print(f"  one-token check: llama.cpp {lc:.1f} us, llguidance {gc:.1f} us")
        vocabulary.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
