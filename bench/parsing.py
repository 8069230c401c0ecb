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
    ToolCallFormat.HERMES: ('<tool_call>{"name": "w", "arguments": {"t": "', '"}}</tool_call>'),
    ToolCallFormat.LLAMA3_JSON: ('{"name": "w", "parameters": {"t": "', '"}}'),
    ToolCallFormat.MISTRAL: ('[TOOL_CALLS][{"name": "w", "arguments": {"t": "', '"}}]'),
    ToolCallFormat.HARMONY: (
        '<|channel|>commentary to=functions.w <|constrain|>json<|message|>{"t": "',
        '"}<|call|>',
    ),
    ToolCallFormat.QWEN3_CODER: (
        "<tool_call>\n<function=w>\n<parameter=t>\n",
        "\n</parameter>\n</function>\n</tool_call>",
    ),
    ToolCallFormat.SEED_OSS: (
        "<seed:tool_call>\n<function=w>\n<parameter=t>",
        "</parameter>\n</function>\n</seed:tool_call>",
    ),
    ToolCallFormat.GLM: ("<tool_call>w\n<arg_key>t</arg_key>\n<arg_value>", "</arg_value>\n</tool_call>"),
    ToolCallFormat.MINIMAX_M2: (
        '<minimax:tool_call>\n<invoke name="w">\n<parameter name="t">',
        "</parameter>\n</invoke>\n</minimax:tool_call>",
    ),
    ToolCallFormat.DEEPSEEK_V3_1: (
        '<\uff5ctool\u2581calls\u2581begin\uff5c><\uff5ctool\u2581call\u2581begin\uff5c>w<\uff5ctool\u2581sep\uff5c>{"t": "',
        '"}<\uff5ctool\u2581call\u2581end\uff5c><\uff5ctool\u2581calls\u2581end\uff5c>',
    ),
    ToolCallFormat.KIMI_K2: (
        '<|tool_calls_section_begin|><|tool_call_begin|>functions.w:0<|tool_call_argument_begin|>{"t": "',
        '"}<|tool_call_end|><|tool_calls_section_end|>',
    ),
    ToolCallFormat.GEMMA4: ('<|tool_call>call:w{t:<|"|>', '<|"|>}<tool_call|>'),
    ToolCallFormat.LFM2: ('<|tool_call_start|>[w(t="', '")]<|tool_call_end|>'),
    ToolCallFormat.NEMOTRON: ('<TOOLCALL>[{"name": "w", "arguments": {"t": "', '"}}]</TOOLCALL>'),
    ToolCallFormat.GRANITE: ('<|tool_call|>[{"name": "w", "arguments": {"t": "', '"}}]'),
    ToolCallFormat.COMMAND_R7B: (
        '<|START_ACTION|>[{"tool_name": "w", "parameters": {"t": "',
        '"}}]<|END_ACTION|>',
    ),
    ToolCallFormat.APERTUS: ('<|tools_prefix|>[{"w": {"t": "', '"}}]<|tools_suffix|>'),
    ToolCallFormat.FUNCTIONARY_V3_1: ('<function=w>{"t": "', '"}</function>'),
    ToolCallFormat.FUNCTIONARY_V3_2: ('w\n{"t": "', '"}'),
    # parsing/families/recent.py
    ToolCallFormat.DEEPSEEK_V3_2: (
        '<\uff5cDSML\uff5cfunction_calls>\n<\uff5cDSML\uff5cinvoke name="w">\n'
        '<\uff5cDSML\uff5cparameter name="t" string="true">',
        "</\uff5cDSML\uff5cparameter>\n</\uff5cDSML\uff5cinvoke>\n</\uff5cDSML\uff5cfunction_calls>",
    ),
    ToolCallFormat.DEEPSEEK_V4: (
        '<\uff5cDSML\uff5ctool_calls>\n<\uff5cDSML\uff5cinvoke name="w">\n'
        '<\uff5cDSML\uff5cparameter name="t" string="true">',
        "</\uff5cDSML\uff5cparameter>\n</\uff5cDSML\uff5cinvoke>\n</\uff5cDSML\uff5ctool_calls>",
    ),
    ToolCallFormat.SOLAR_OPEN: (
        '<|tool_calls|><|tool_call:begin|>c<|tool_call:name|>w<|tool_call:args|>{"t": "',
        '"}<|tool_call:end|><|calls|>',
    ),
    ToolCallFormat.MINIMAX_M1: ('<tool_calls>\n{"name": "w", "arguments": {"t": "', '"}}\n</tool_calls>'),
    ToolCallFormat.KIMI_K3: (
        '<|open|>tools<|sep|><|open|>call tool="w" index="1"<|sep|><|open|>argument key="t" type="string"<|sep|>',
        "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>",
    ),
    ToolCallFormat.MINIMAX_M3: (
        ']<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="w">]<]minimax[>[<t>',
        "]<]minimax[>[</t>]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>",
    ),
    ToolCallFormat.MINICPM5: ('<function name="w"><param name="t">', "</param></function>"),
    ToolCallFormat.GIGACHAT3: (
        '<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "w", "arguments": {"t": "',
        '"}}',
    ),
    ToolCallFormat.GIGACHAT3_1: ('<|function_call|>{"name": "w", "arguments": {"t": "', '"}}'),
    ToolCallFormat.APRIEL: ('<tool_calls>[{"name": "w", "arguments": {"t": "', '"}}]</tool_calls>'),
    ToolCallFormat.COMMAND_R_PLUS: (
        'Action:\n```json\n[{"tool_name": "w", "parameters": {"t": "',
        '"}}]\n```',
    ),
    ToolCallFormat.FIREFUNCTION_V2: (' functools[{"name": "w", "arguments": {"t": "', '"}}]'),
    ToolCallFormat.LLAMA4_PYTHONIC: ('[w(t="', '")]'),
    ToolCallFormat.HY3: (
        "<tool_calls:opensource>\n<tool_call:opensource>w<tool_sep:opensource>\n"
        "<arg_key:opensource>t</arg_key:opensource>\n<arg_value:opensource>",
        "</arg_value:opensource>\n</tool_call:opensource>\n</tool_calls:opensource>",
    ),
    ToolCallFormat.MUSE_GLIMMER: (
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
        if only and fmt.value not in only:
            continue
        rows.append((f"{fmt.value}: plain text", per_token(words, fmt)))
        rows.append((f"{fmt.value}: one long call argument", per_token([head, *argument, tail], fmt)))
    for label, cost in rows:
        share = f"  {cost / token * 100:5.2f}% of a token" if token else ""
        print(f"{label:44s} {cost * 1e6:6.2f} µs/token  {cost / base:6.2f}x baseline{share}")


if __name__ == "__main__":
    main()
