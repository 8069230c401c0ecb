"""Forced calls in every other family's markup (call_grammar.py): each grammar compiles (in
llguidance), holds only the tools the request allows, and writes the family's own markers."""

from __future__ import annotations

from typing import Any

import pytest

from llama_cpp_support import fold
from sluicegate.core.errors import SluicegateError
from sluicegate.core.request import ChatRequest, Message, ToolSpec
from sluicegate.demo.model import make_demo_gguf
from sluicegate.engines.llamacpp.call_grammar import forced_grammar
from sluicegate.engines.llamacpp.grammar import Grammar
from sluicegate.engines.llamacpp.runtime import Vocabulary
from sluicegate.parsing import FAMILIES, ReasoningStyle, ToolCallFormat, new_parser

TOOLS = [
    ToolSpec(
        "get_weather",
        parameters={
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 10},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer"},
            },
            "required": ["city"],
        },
    ),
    ToolSpec("lookup", parameters={"type": "object", "properties": {"id": {"type": "integer"}}}),
]
MARKERS = {
    ToolCallFormat("harmony"): "to=functions.",
    ToolCallFormat("qwen3_coder"): "<parameter=",
    ToolCallFormat("glm"): "<arg_key>",
    ToolCallFormat("minimax_m2"): "<invoke name=",
    ToolCallFormat("kimi_k2"): "<|tool_call_begin|>",
    ToolCallFormat("gemma4"): "<|tool_call>call:",
    ToolCallFormat("lfm2"): "<|tool_call_start|>",
}


@pytest.fixture(scope="module")
def vocabulary(tmp_path_factory: pytest.TempPathFactory) -> Vocabulary:
    return Vocabulary(make_demo_gguf(tmp_path_factory.mktemp("grammar") / "demo.gguf"))


@pytest.fixture(scope="module")
def tokenizer(vocabulary: Vocabulary) -> Any:
    """llguidance's view of the demo vocabulary, built once for the module."""
    from sluicegate.engines.llamacpp.constrained import vocab_tokenizer

    return vocab_tokenizer(vocabulary.model.vocab)


def compiles(tokenizer: Any, grammar: Grammar) -> bool:
    from llguidance import LLMatcher

    matcher = LLMatcher(tokenizer, LLMatcher.grammar_from_lark(grammar.lark), log_level=0)
    assert not matcher.is_error(), matcher.get_error()
    return True


def request(choice: str) -> ChatRequest:
    return ChatRequest(model="m", messages=[Message("user", "hi")], tools=list(TOOLS), tool_choice=choice)


@pytest.mark.parametrize("fmt", [ToolCallFormat(f.name) for f in FAMILIES])
def test_every_family_grammar_compiles(tokenizer: Any, fmt: ToolCallFormat) -> None:
    for choice in ("required", "lookup"):
        grammar = forced_grammar(request(choice), fmt, "m")
        assert grammar is not None and grammar.purpose == "tool_call"
        assert compiles(tokenizer, grammar) and compiles(tokenizer, grammar.after_reasoning())
    only_lookup = forced_grammar(request("lookup"), fmt, "m")
    assert only_lookup is not None and "get_weather" not in only_lookup.text
    if fmt in MARKERS:
        assert MARKERS[fmt].replace('"', '\\"') in only_lookup.text


def test_every_family_declares_its_forced_call() -> None:
    assert [f.name for f in FAMILIES if f.call is None] == []


def test_a_string_parameter_between_tags_is_plain_text_within_its_length() -> None:
    grammar = forced_grammar(request("get_weather"), ToolCallFormat("qwen3_coder"), "m")
    assert grammar is not None
    assert "/[^<\\n]{1,10}/" in grammar.text and '"celsius" | "fahrenheit"' in grammar.text


def test_a_named_tool_that_is_not_offered_is_a_400() -> None:
    with pytest.raises(SluicegateError, match="not among the tools"):
        forced_grammar(request("nope"), ToolCallFormat("glm"), "m")


# --- the family's markup before the answer ------------------------------------------------

OUTPUT_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "w",
        "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    },
}
HARMONY_THINKS = ReasoningStyle("<|channel|>analysis<|message|>", "<|end|>")
ANALYSIS = "<|channel|>analysis<|message|>They want JSON; a < b <|en.<|end|><|start|>assistant"
FINAL = '<|channel|>final<|message|>{"a": 1}'
CALL = '<|channel|>commentary to=functions.lookup <|constrain|>json<|message|>{"id": 7}'


def test_a_model_of_no_family_gets_the_answer_grammar_alone(tokenizer: Any) -> None:
    """A model without a tool-call format (a base model, Gemma 3 270M) still has its answer
    bound by `response_format` (the grammar was dropped once, after the family merge)."""
    grammar = forced_grammar(output_request(), ToolCallFormat.NONE, "m")
    assert grammar is not None
    assert accepts(tokenizer, grammar, '{"a": 1}') and not accepts(tokenizer, grammar, " France")


def accepts(tokenizer: Any, grammar: Grammar, text: str) -> bool:
    from llguidance import LLMatcher

    matcher = LLMatcher(tokenizer, LLMatcher.grammar_from_lark(grammar.lark), log_level=0)
    assert not matcher.is_error(), matcher.get_error()
    tokens = tokenizer.tokenize_str(text)
    return matcher.validate_tokens(tokens) == len(tokens) and (
        matcher.consume_tokens(tokens) and matcher.is_accepting()
    )


def output_request() -> ChatRequest:
    return ChatRequest(model="m", messages=[Message("user", "hi")], response_format=OUTPUT_FORMAT)


def test_harmony_json_output_sits_in_the_final_channel_after_any_analysis(tokenizer: Any) -> None:
    grammar = forced_grammar(output_request(), ToolCallFormat("harmony"), "m", HARMONY_THINKS)
    assert grammar is not None
    assert accepts(tokenizer, grammar, FINAL)
    assert accepts(tokenizer, grammar, ANALYSIS + FINAL)
    assert accepts(tokenizer, grammar, ANALYSIS + ANALYSIS + FINAL)
    assert not accepts(tokenizer, grammar, '{"a": 1}')  # bare JSON: not Harmony
    assert not accepts(tokenizer, grammar, "<|channel|>analysis<|message|>x<|end|>y" + FINAL)
    # A prompt that opened the analysis channel: from its end to the final channel.
    assert accepts(tokenizer, grammar.after_reasoning(), "<|start|>assistant" + FINAL)
    # No reasoning configured: the header, then the JSON.
    plain = forced_grammar(output_request(), ToolCallFormat("harmony"), "m")
    assert plain is not None and accepts(tokenizer, plain, FINAL)
    assert not accepts(tokenizer, plain, ANALYSIS + FINAL)


def test_harmony_reasons_before_a_forced_call(tokenizer: Any) -> None:
    grammar = forced_grammar(request("lookup"), ToolCallFormat("harmony"), "m", HARMONY_THINKS)
    assert grammar is not None and grammar.holds_reasoning
    assert accepts(tokenizer, grammar, ANALYSIS + CALL)
    assert accepts(tokenizer, grammar, CALL)
    assert not accepts(tokenizer, grammar, ANALYSIS)  # the call must follow
    # A prompt that opened the analysis channel: the rest of it, then the call.
    assert accepts(tokenizer, grammar.inside_reasoning(), "hmm<|end|><|start|>assistant" + CALL)


def test_a_forced_call_holds_a_bounded_reasoning_block(tokenizer: Any) -> None:
    """Reasoning before a forced call is in the grammar, closed before the call, at most a
    quarter of max_tokens long (issue 47: the model could end inside it)."""
    think = ReasoningStyle("<think>", "</think>")
    forced = request("lookup")
    forced.sampling.max_tokens = 40  # 10 characters of reasoning
    grammar = forced_grammar(forced, ToolCallFormat("minimax_m2"), "m", think)
    assert grammar is not None and grammar.holds_reasoning
    call = '<minimax:tool_call>\n<invoke name="lookup">\n</invoke>\n</minimax:tool_call>'
    assert accepts(tokenizer, grammar, "<think>short</think>\n" + call)
    assert accepts(tokenizer, grammar, call)
    assert not accepts(tokenizer, grammar, "<think>short</think>")
    assert not accepts(tokenizer, grammar, "<think>far too long to fit</think>" + call)
    inside = grammar.inside_reasoning()
    assert accepts(tokenizer, inside, "short</think>\n\n" + call)
    assert not accepts(tokenizer, inside, call)  # the open block must close first


def test_what_the_harmony_grammar_writes_parses_back() -> None:
    parser = new_parser(ToolCallFormat("harmony"))
    events = [*parser.feed(ANALYSIS + FINAL), *parser.finish()]
    assert fold(events) == {
        "content": '{"a": 1}',
        "reasoning": "They want JSON; a < b <|en.",
        "tool_calls": [],
    }


def test_gemma4_thinks_before_its_answer(tokenizer: Any) -> None:
    thought = ReasoningStyle("<|channel>thought", "<channel|>")
    grammar = forced_grammar(output_request(), ToolCallFormat("gemma4"), "m", thought)
    assert grammar is not None
    assert accepts(tokenizer, grammar, '<|channel>thought\nhmm<channel|>\n{"a": 1}')
    assert accepts(tokenizer, grammar, '{"a": 1}')
    call = forced_grammar(request("lookup"), ToolCallFormat("gemma4"), "m", thought)
    assert call is not None
    assert accepts(
        tokenizer, call, '<|channel>thought\nhmm<channel|><|tool_call>call:lookup{"id": 7}<tool_call|>'
    )
