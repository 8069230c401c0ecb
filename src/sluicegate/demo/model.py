"""A tiny llama-architecture GGUF with random weights: it loads in llama.cpp and talks nonsense.

What is real: the byte-level BPE tokenizer (merges learned from a short English text), the
special tokens of ChatML with `<think>` and `<tool_call>`, and a Jinja chat template with tools
and reasoning. What is not: the weights. They are random, except for one shared direction in
the embeddings and the output matrix that keeps the special tokens (and, unless `ends_replies`,
end-of-turn) from being sampled, so a reply is nonsense text of a predictable shape.
Deterministic given the seed.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from itertools import pairwise
from pathlib import Path

import gguf
import numpy as np

DEMO_NAME = "Sluicegate demo (random weights, produces nonsense)"
DEMO_DESCRIPTION = (
    "A tiny model written by Sluicegate with random weights. It has a real tokenizer and chat "
    "template, so every part of serving works, but what it says is nonsense."
)
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
)
# Fill-in-the-middle tokens as Qwen2.5-Coder names them (with `fim`): llama.cpp's FIM layout
# (`/infill`, a completion's `suffix`) needs prefix, suffix and middle; repo and file
# separators make it the repo-level layout. Key: the GGUF tokenizer key's part.
FIM_TOKENS = {
    "pre": "<|fim_prefix|>",
    "suf": "<|fim_suffix|>",
    "mid": "<|fim_middle|>",
    "pad": "<|fim_pad|>",
    "rep": "<|repo_name|>",
    "sep": "<|file_sep|>",
}
# Text markers the parsers must see are USER_DEFINED (detokenized as text); the rest CONTROL.
_TEXT_MARKERS = frozenset(SPECIAL_TOKENS[3:])
EOS = "<|im_end|>"
# How much end-of-turn likes the shared direction, relative to ordinary tokens: replies of a
# hundred or so tokens.
EOS_PULL = 1.26

_CORPUS = """\
The quick brown fox jumps over the lazy dog. A local server answers questions about the weather,
the time and the files on this machine. It streams every token as soon as the model writes it,
and it stops the moment the client goes away. Models are loaded when they are first used and
unloaded when they have been idle for an hour. The prompt is processed in batches, and the cache
keeps what was already computed, so the second turn of a conversation only reads the new words.
Tools are called with JSON arguments; the results come back to the model, which then writes its
answer. Reasoning happens between think tags before the answer. This model has random weights:
whatever it says is nonsense, but the tokenizer, the template and the server around it are real.
What is the weather in Paris today? It is sunny and warm, with a light wind from the west.
Please read the file and tell me what it says. I will call the tool and then answer you.
"""
_PIECE = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+")


@dataclass(frozen=True, slots=True)
class DemoShape:
    n_embd: int
    n_layers: int
    n_ff: int
    n_heads: int
    context_length: int


SHAPES = {
    # ~3 MB: the tests' and the first-start model.
    "tiny": DemoShape(n_embd=256, n_layers=4, n_ff=768, n_heads=4, context_length=4096),
    # ~70 MB: big enough that decoding costs real time (the benchmark's model).
    "bench": DemoShape(n_embd=1024, n_layers=8, n_ff=2560, n_heads=16, context_length=4096),
}


def byte_symbols() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes, in byte order."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def learn_merges(text: str, max_merges: int) -> list[tuple[str, str]]:
    """Plain byte-level BPE training; ties go to the lexicographically smallest pair."""
    symbols = byte_symbols()
    words = Counter(tuple(symbols[b] for b in piece.encode("utf-8")) for piece in _PIECE.findall(text))
    merges: list[tuple[str, str]] = []
    while len(merges) < max_merges:
        pairs: Counter[tuple[str, str]] = Counter()
        for word, count in words.items():
            for pair in pairwise(word):
                pairs[pair] += count
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        if pairs[best] < 2:
            break
        merges.append(best)
        joined = best[0] + best[1]
        merged: Counter[tuple[str, ...]] = Counter()
        for word, count in words.items():
            out: list[str] = []
            i = 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(joined)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += count
        words = merged
    return merges


def chat_template() -> str:
    return resources.files(__package__).joinpath("template.jinja").read_text(encoding="utf-8")


# The prompt a reranker scores, as llama-server fills it in (`tokenizer.chat_template.rerank`).
RERANK_TEMPLATE = "<|im_start|>query\n{query}<|im_end|>\n<|im_start|>document\n{document}<|im_end|>\n"

# Q5_0 by default: llama.cpp has no CPU "repack" kernels for it, so it ran even before the
# engine turned repacking off (Q4_0 and Q8_0 repacked crashed on an AVX-512 machine). Tests
# build Q4_0 and Q8_0 variants to prove they no longer do.
QUANTIZATION = gguf.GGMLQuantizationType.Q5_0
QUANTIZATIONS = {
    "Q5_0": (gguf.GGMLQuantizationType.Q5_0, gguf.LlamaFileType.MOSTLY_Q5_0),
    "Q4_0": (gguf.GGMLQuantizationType.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0),
    "Q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
}
# How much the reasoning close tag likes the shared direction when `thinks`: reasoning of a few
# dozen tokens, then the answer.
THINK_PULL = 1.3
# The generation prompt of a `thinks` demo opens the reasoning block, as Qwen3-thinking's does.
_OPEN_THINKING = r"""{%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}"""
_OPENS_THINKING = r"""{%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- else %}
        {{- '<think>\n' }}
    {%- endif %}"""


def base_vocab_size() -> int:
    """The demo tokenizer's own tokens (bytes, learned merges, specials), before `extra_vocab`."""
    return len(byte_symbols()) + len(learn_merges(_CORPUS, max_merges=400)) + len(SPECIAL_TOKENS)


def _filler(rng: np.random.Generator, count: int, taken: set[str]) -> list[str]:
    """`count` new tokens: lowercase words, half of them with GPT-2's leading-space symbol."""
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    out: list[str] = []
    seen = set(taken)
    while len(out) < count:
        word = ("Ġ" if len(out) % 2 else "") + "".join(rng.choice(letters, int(rng.integers(3, 9))))
        if word not in seen:
            seen.add(word)
            out.append(word)
    return out


def _quantized(
    writer: gguf.GGUFWriter, name: str, weights: np.ndarray, kind: gguf.GGMLQuantizationType
) -> None:
    data = gguf.quants.quantize(weights.astype(np.float32), kind)
    writer.add_tensor(name, data, raw_dtype=kind)


def finish_gguf(writer: gguf.GGUFWriter, tmp: Path, path: Path) -> Path:
    """Write out what `writer` (opened on `tmp`) holds, then move it into place: a reader never
    sees a half-written file at `path`."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(path)
    return path


def make_demo_gguf(
    path: str | Path,
    *,
    size: str = "tiny",
    seed: int = 0,
    ends_replies: bool = True,
    quantization: str = "Q5_0",
    thinks: bool = False,
    embedding: bool = False,
    rerank: bool = False,
    extra_vocab: int = 0,
    mixing: float = 0.02,
    fim: bool = False,
) -> Path:
    """Write the demo model to `path` and return it. `ends_replies=False` makes end-of-turn as
    unlikely as the other special tokens, so every reply runs to its token limit (tests, bench).
    `quantization`: "Q5_0", "Q4_0" or "Q8_0". `thinks`: the generation prompt opens `<think>`
    and the model closes it after a few dozen tokens. `embedding`: an embedding model (mean
    pooling, no chat template), as llama.cpp serves with `embeddings = true`. `rerank`: a reranker
    (Qwen3-reranker-shaped: rank pooling over the last token, a one-score head, and a rerank
    prompt template), whose scores are random but fixed. `extra_vocab`: that
    many more ordinary tokens (random lowercase words, never produced by the tokenizer but
    sampled like the others), for a vocabulary the size of a real model's (benchmarks). `fim`:
    fill-in-the-middle tokens (FIM_TOKENS) in the tokenizer, as a code model has. `mixing`:
    the scale of the attention weights; at the default a token's output hardly depends on the
    tokens before it, so the vision demo raises it (its replies must depend on the image)."""
    shape = SHAPES[size]
    kind, file_type = QUANTIZATIONS[quantization]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)

    merges = learn_merges(_CORPUS, max_merges=400)
    learned = [*byte_symbols(), *(a + b for a, b in merges)]
    specials = [*SPECIAL_TOKENS, *(FIM_TOKENS.values() if fim else ())]
    tokens = [*learned, *_filler(rng, extra_vocab, set(learned)), *specials]
    types = [gguf.TokenType.NORMAL] * (len(tokens) - len(specials)) + [
        gguf.TokenType.USER_DEFINED if t in _TEXT_MARKERS else gguf.TokenType.CONTROL for t in specials
    ]
    n_vocab = len(tokens)
    special_ids = range(n_vocab - len(specials), n_vocab)
    eos_id = tokens.index(EOS)

    n, head_dim = shape.n_embd, shape.n_embd // shape.n_heads
    # One shared direction: every embedding leans along it, so after the final norm the hidden
    # state does too, and the output rows decide how much a token likes it. Ordinary tokens get
    # logits ~14 with noise of ~2.5 (varied, not uniform); specials get ~-14.
    bias = rng.standard_normal(n)
    bias /= np.linalg.norm(bias)
    lean = 2.0 * np.sqrt(n)
    embeddings = rng.standard_normal((n_vocab, n)) + lean * bias
    pull = 16.0 / np.sqrt(n)
    output = rng.standard_normal((n_vocab, n)) * (2.5 / np.sqrt(n)) + pull * bias
    # Specials, and bytes that are not printable ASCII (they would stream as broken UTF-8).
    unlikely = [*special_ids, *(b for b in range(256) if not (32 <= b < 127 or b == 10))]
    output[unlikely] = -pull * bias
    if ends_replies:
        output[eos_id] = EOS_PULL * pull * bias
    if thinks:
        output[tokens.index("</think>")] = THINK_PULL * pull * bias

    tmp = path.with_name(path.name + ".partial")  # written whole, then renamed into place
    writer = gguf.GGUFWriter(str(tmp), "qwen3" if rerank else "llama")
    writer.add_name(DEMO_NAME)
    writer.add_description(DEMO_DESCRIPTION)
    writer.add_string("general.organization", "sluicegate")
    writer.add_context_length(shape.context_length)
    writer.add_embedding_length(n)
    writer.add_block_count(shape.n_layers)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_heads)
    writer.add_head_count_kv(shape.n_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(file_type)
    if embedding:
        writer.add_pooling_type(gguf.PoolingType.MEAN)
    if rerank:
        writer.add_pooling_type(gguf.PoolingType.RANK)
        writer.add_chat_template([{"name": "rerank", "template": RERANK_TEMPLATE}])
        # As Qwen3-Reranker's conversion: two labels, a softmax over them; the score is "yes".
        writer.add_array("qwen3.classifier.output_labels", ["yes", "no"])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([f"{a} {b}" for a, b in merges])
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(eos_id)
    writer.add_pad_token_id(tokens.index("<|endoftext|>"))
    writer.add_add_bos_token(False)
    if fim:
        for part, text in FIM_TOKENS.items():
            writer.add_uint32(f"tokenizer.ggml.fim_{part}_token_id", tokens.index(text))
    if not embedding and not rerank:
        template = chat_template()
        assert not thinks or _OPEN_THINKING in template, "template.jinja changed: update _OPEN_THINKING"
        writer.add_chat_template(template.replace(_OPEN_THINKING, _OPENS_THINKING) if thinks else template)

    small = 0.02
    _quantized(writer, "token_embd.weight", embeddings, kind)
    for layer in range(shape.n_layers):
        blk = f"blk.{layer}"
        writer.add_tensor(f"{blk}.attn_norm.weight", np.ones(n, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            _quantized(writer, f"{blk}.{name}.weight", rng.standard_normal((n, n)) * mixing, kind)
        if rerank:  # Qwen3 normalises queries and keys per head
            writer.add_tensor(f"{blk}.attn_q_norm.weight", np.ones(head_dim, dtype=np.float32))
            writer.add_tensor(f"{blk}.attn_k_norm.weight", np.ones(head_dim, dtype=np.float32))
        writer.add_tensor(f"{blk}.ffn_norm.weight", np.ones(n, dtype=np.float32))
        _quantized(writer, f"{blk}.ffn_gate.weight", rng.standard_normal((shape.n_ff, n)) * small, kind)
        _quantized(writer, f"{blk}.ffn_up.weight", rng.standard_normal((shape.n_ff, n)) * small, kind)
        _quantized(writer, f"{blk}.ffn_down.weight", rng.standard_normal((n, shape.n_ff)) * small, kind)
    writer.add_tensor("output_norm.weight", np.ones(n, dtype=np.float32))
    _quantized(writer, "output.weight", output, kind)
    if rerank:  # the score: one row over the last token's hidden state
        writer.add_tensor("cls.output.weight", (rng.standard_normal((2, n)) * 0.5).astype(np.float32))

    return finish_gguf(writer, tmp, path)
