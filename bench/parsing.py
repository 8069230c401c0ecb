"""Benchmark: what the streaming output parser (parsing) costs per token, for every family.

Run from the repository root (venv active): `python bench/parsing.py [--generation]`

Feeds token-sized chunks through each family's parser (`new_parser`): plain text, and one long
tool-call argument in the family's own markup. Prints µs per token, the ratio against a
baseline that only builds the one `TextDelta` a token needs (what an engine without a parser
would do) and, with `--generation`, the share of a token's generation time on the bench model
(`sluicegate models make-demo --size bench`, decoded by llama.cpp in this process). Absolute
numbers depend on the machine; compare the ratios within one run.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from sluicegate.core.events import ItemKind, TextDelta
from sluicegate.parsing import THINK, ToolCallFormat, new_parser

# Each family's call opening, an argument's text is repeated between, then its closing.
CALLS: dict[ToolCallFormat, tuple[str, str]] = {
    ToolCallFormat("hermes"): ('<tool_call>{"name": "w", "arguments": {"t": "', '"}}</tool_call>'),
    ToolCallFormat("llama3_json"): ('{"name": "w", "parameters": {"t": "', '"}}'),
    ToolCallFormat("mistral"): ('[TOOL_CALLS][{"name": "w", "arguments": {"t": "', '"}}]'),
    ToolCallFormat("harmony"): (
        '<|channel|>commentary to=functions.w <|constrain|>json<|message|>{"t": "',
        '"}<|call|>',
    ),
    ToolCallFormat("qwen3_coder"): (
        "<tool_call>\n<function=w>\n<parameter=t>\n",
        "\n</parameter>\n</function>\n</tool_call>",
    ),
    ToolCallFormat("seed_oss"): (
        "<seed:tool_call>\n<function=w>\n<parameter=t>",
        "</parameter>\n</function>\n</seed:tool_call>",
    ),
    ToolCallFormat("glm"): ("<tool_call>w\n<arg_key>t</arg_key>\n<arg_value>", "</arg_value>\n</tool_call>"),
    ToolCallFormat("minimax_m2"): (
        '<minimax:tool_call>\n<invoke name="w">\n<parameter name="t">',
        "</parameter>\n</invoke>\n</minimax:tool_call>",
    ),
    ToolCallFormat("deepseek_v3_1"): (
        '<\uff5ctool\u2581calls\u2581begin\uff5c><\uff5ctool\u2581call\u2581begin\uff5c>w<\uff5ctool\u2581sep\uff5c>{"t": "',
        '"}<\uff5ctool\u2581call\u2581end\uff5c><\uff5ctool\u2581calls\u2581end\uff5c>',
    ),
    ToolCallFormat("kimi_k2"): (
        '<|tool_calls_section_begin|><|tool_call_begin|>functions.w:0<|tool_call_argument_begin|>{"t": "',
        '"}<|tool_call_end|><|tool_calls_section_end|>',
    ),
    ToolCallFormat("gemma4"): ('<|tool_call>call:w{t:<|"|>', '<|"|>}<tool_call|>'),
    ToolCallFormat("lfm2"): ('<|tool_call_start|>[w(t="', '")]<|tool_call_end|>'),
    ToolCallFormat("nemotron"): ('<TOOLCALL>[{"name": "w", "arguments": {"t": "', '"}}]</TOOLCALL>'),
    ToolCallFormat("granite"): ('<|tool_call|>[{"name": "w", "arguments": {"t": "', '"}}]'),
    ToolCallFormat("command_r7b"): (
        '<|START_ACTION|>[{"tool_name": "w", "parameters": {"t": "',
        '"}}]<|END_ACTION|>',
    ),
    ToolCallFormat("apertus"): ('<|tools_prefix|>[{"w": {"t": "', '"}}]<|tools_suffix|>'),
    ToolCallFormat("functionary_v3_1"): ('<function=w>{"t": "', '"}</function>'),
    ToolCallFormat("functionary_v3_2"): ('w\n{"t": "', '"}'),
    # the families after the first nineteen
    ToolCallFormat("deepseek_v3_2"): (
        '<\uff5cDSML\uff5cfunction_calls>\n<\uff5cDSML\uff5cinvoke name="w">\n'
        '<\uff5cDSML\uff5cparameter name="t" string="true">',
        "</\uff5cDSML\uff5cparameter>\n</\uff5cDSML\uff5cinvoke>\n</\uff5cDSML\uff5cfunction_calls>",
    ),
    ToolCallFormat("deepseek_v4"): (
        '<\uff5cDSML\uff5ctool_calls>\n<\uff5cDSML\uff5cinvoke name="w">\n'
        '<\uff5cDSML\uff5cparameter name="t" string="true">',
        "</\uff5cDSML\uff5cparameter>\n</\uff5cDSML\uff5cinvoke>\n</\uff5cDSML\uff5ctool_calls>",
    ),
    ToolCallFormat("solar_open"): (
        '<|tool_calls|><|tool_call:begin|>c<|tool_call:name|>w<|tool_call:args|>{"t": "',
        '"}<|tool_call:end|><|calls|>',
    ),
    ToolCallFormat("minimax_m1"): ('<tool_calls>\n{"name": "w", "arguments": {"t": "', '"}}\n</tool_calls>'),
    ToolCallFormat("kimi_k3"): (
        '<|open|>tools<|sep|><|open|>call tool="w" index="1"<|sep|><|open|>argument key="t" type="string"<|sep|>',
        "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>",
    ),
    ToolCallFormat("minimax_m3"): (
        ']<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="w">]<]minimax[>[<t>',
        "]<]minimax[>[</t>]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>",
    ),
    ToolCallFormat("minicpm5"): ('<function name="w"><param name="t">', "</param></function>"),
    ToolCallFormat("gigachat3"): (
        '<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "w", "arguments": {"t": "',
        '"}}',
    ),
    ToolCallFormat("gigachat3_1"): ('<|function_call|>{"name": "w", "arguments": {"t": "', '"}}'),
    ToolCallFormat("apriel"): ('<tool_calls>[{"name": "w", "arguments": {"t": "', '"}}]</tool_calls>'),
    ToolCallFormat("command_r_plus"): (
        'Action:\n```json\n[{"tool_name": "w", "parameters": {"t": "',
        '"}}]\n```',
    ),
    ToolCallFormat("firefunction_v2"): (' functools[{"name": "w", "arguments": {"t": "', '"}}]'),
    ToolCallFormat("llama4_pythonic"): ('[w(t="', '")]'),
    ToolCallFormat("hy3"): (
        "<tool_calls:opensource>\n<tool_call:opensource>w<tool_sep:opensource>\n"
        "<arg_key:opensource>t</arg_key:opensource>\n<arg_value:opensource>",
        "</arg_value:opensource>\n</tool_call:opensource>\n</tool_calls:opensource>",
    ),
    ToolCallFormat("muse_glimmer"): (
        ' to=w<|message|><atem:function_calls>\n<atem:invoke name="w">\n<atem:parameter name="t">',
        "</atem:parameter>\n</atem:invoke>\n</atem:function_calls><|eom|>",
    ),
}
TOOLS: dict[str, dict[str, object]] = {"w": {"type": "object", "properties": {"t": {"type": "string"}}}}


def per_token(chunks: list[str], fmt: ToolCallFormat, **config: Any) -> float:
    parser = new_parser(fmt, tools=TOOLS, **config)
    start = time.perf_counter()
    for chunk in chunks:
        parser.feed(chunk)
    parser.finish()
    return (time.perf_counter() - start) / len(chunks)


def baseline(chunks: list[str]) -> float:
    start = time.perf_counter()
    for chunk in chunks:
        [TextDelta(ItemKind.MESSAGE, chunk, None)]  # the work being measured
    return (time.perf_counter() - start) / len(chunks)


def generation_time(tokens: int = 64) -> float:
    """Seconds per generated token on the bench demo model, in this process."""
    import llama_cpp

    from sluicegate.demo.model import make_demo_gguf

    with tempfile.TemporaryDirectory() as folder:
        path = make_demo_gguf(Path(folder) / "bench.gguf", size="bench", ends_replies=False)
        llm = llama_cpp.Llama(str(path), n_ctx=512, verbose=False)
        llm("warm up", max_tokens=4)
        start = time.perf_counter()
        out = llm("Once upon a time", max_tokens=tokens, temperature=0.0)
        elapsed = time.perf_counter() - start
        done = out["usage"]["completion_tokens"]  # type: ignore[index]
        return elapsed / max(int(done), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description="Per-token cost of the streaming output parser.")
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--generation", action="store_true", help="compare with the bench model's token time")
    parser.add_argument("--only", default="", help="comma-separated formats to measure (default: all)")
    args = parser.parse_args()
    words = [" word"] * args.tokens
    argument = [" wo rd"] * args.tokens
    baseline(words)  # warm up
    base = baseline(words)
    token = generation_time() if args.generation else None
    print(f"{'baseline: one TextDelta per token':44s} {base * 1e6:6.2f} µs/token")
    if token is not None:
        print(f"{'a token generated (bench model)':44s} {token * 1e6:8.1f} µs/token")
    rows: list[tuple[str, float]] = [
        ("no format, <think> reasoning", per_token(["<think>", *words], ToolCallFormat.NONE, reasoning=THINK))
    ]
    only = {f.strip() for f in args.only.split(",") if f.strip()}
    for fmt, (head, tail) in CALLS.items():
        if only and fmt not in only:
            continue
        rows.append((f"{fmt}: plain text", per_token(words, fmt)))
        rows.append((f"{fmt}: one long call argument", per_token([head, *argument, tail], fmt)))
    for label, cost in rows:
        share = f"  {cost / token * 100:5.2f}% of a token" if token else ""
        print(f"{label:44s} {cost * 1e6:6.2f} µs/token  {cost / base:6.2f}x baseline{share}")


if __name__ == "__main__":
    main()
