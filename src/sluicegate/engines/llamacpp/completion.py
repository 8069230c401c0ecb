"""A text completion's prompt tokens, laid out as llama-server lays them out.

A plain prompt is tokenized as it is, with BOS when the vocabulary adds one and special tokens
read as such (llama-server's `/completion`). Fill-in-the-middle follows `format_prompt_infill`
in llama-server (`tools/server/server-common.cpp`), the repo-level FIM layout:

    [FIM_REP]myproject\\n [FIM_SEP]file\\n extra ... [FIM_SEP]filename\\n
    [BOS] [FIM_PRE]prefix middle [FIM_SUF]suffix [FIM_MID]

with the prefix kept to 3/4 of a batch (its end) and the suffix to what is left of a quarter,
and extra files filling what the context has beyond a batch and twice the output.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import llama_cpp

from sluicegate.core.errors import invalid
from sluicegate.core.request import RawPrompt, SamplingParams

NULL = -1  # LLAMA_TOKEN_NULL
REPO = "myproject\n"  # llama-server's fixed project name
FILE = "filename\n"  # and the current file's
# Between extra files when the vocabulary has no FIM_SEP: "\n\n--- snippet ---\n\n".
SNIPPET = "\n\n--- snippet ---\n\n"


@dataclass(frozen=True, slots=True)
class FimTokens:
    pre: int
    suf: int
    mid: int
    rep: int  # NULL when the vocabulary has none
    sep: int


def fim_tokens(vocab: Any) -> tuple[FimTokens | None, str]:
    """The vocabulary's FIM tokens, or None and which of prefix/suffix/middle is missing."""
    tokens = FimTokens(
        llama_cpp.llama_vocab_fim_pre(vocab),
        llama_cpp.llama_vocab_fim_suf(vocab),
        llama_cpp.llama_vocab_fim_mid(vocab),
        llama_cpp.llama_vocab_fim_rep(vocab),
        llama_cpp.llama_vocab_fim_sep(vocab),
    )
    missing = [
        name
        for name, t in (("prefix", tokens.pre), ("suffix", tokens.suf), ("middle", tokens.mid))
        if t == NULL
    ]
    return (None, "/".join(missing)) if missing else (tokens, "")


def _tokens(model: Any, text: str | list[int] | list[int | str], *, bos: bool, special: bool) -> list[int]:
    """Token ids are taken as they are, with no BOS added (as llama-server and vLLM take them:
    the client's ids say whether there is one); in a mixed list, each text is tokenized where it
    stands, with BOS only when it comes first (llama-server's `tokenize_mixed`)."""
    if isinstance(text, list):
        out: list[int] = []
        for index, piece in enumerate(text):
            if isinstance(piece, str):
                out += _tokens(model, piece, bos=bos and index == 0, special=special) if piece else []
            else:
                out.append(piece)
        return out
    if not text:
        return [model.token_bos()] if bos and model.add_bos_token() else []
    tokens: list[int] = model.tokenize(
        text.encode("utf-8"), add_bos=bos and model.add_bos_token(), special=special
    )
    return tokens


def plain_tokens(model: Any, prompt: RawPrompt) -> list[int]:
    """A prompt without a suffix: as it is, BOS first when the vocabulary adds one."""
    return _tokens(model, prompt.text, bos=True, special=True)


def infill_tokens(
    model: Any, fim: FimTokens, prompt: RawPrompt, *, n_batch: int, n_ctx: int, n_predict: int
) -> list[int]:
    """The FIM layout of `prompt` (see the module docstring); `n_predict` -1: unbounded."""
    extra: list[int] = []
    if fim.rep != NULL:
        extra += [fim.rep, *_tokens(model, REPO, bos=False, special=False)]
    for chunk in prompt.extra:
        if fim.sep != NULL:
            extra += [fim.sep, *_tokens(model, chunk.filename + "\n", bos=False, special=False)]
        else:
            extra += _tokens(model, SNIPPET, bos=False, special=False)
        extra += _tokens(model, chunk.text, bos=False, special=False)
    if fim.sep != NULL:
        extra += [fim.sep, *_tokens(model, FILE, bos=False, special=False)]

    prefix = _tokens(model, prompt.text, bos=False, special=False)
    suffix = _tokens(model, prompt.suffix or "", bos=False, special=False)
    middle = _tokens(model, prompt.middle, bos=False, special=True)
    prefix_take = min(len(prefix), 3 * (n_batch // 4))
    suffix_take = min(len(suffix), max(0, n_batch // 4 - (2 + len(middle))))
    extra_take = min(max(0, n_ctx - n_batch - 2 * n_predict), len(extra))

    head = [fim.pre, *prefix[len(prefix) - prefix_take :], *middle]
    tail = [fim.suf, *suffix[:suffix_take]]
    if model.add_bos_token():
        head.insert(0, model.token_bos())
    return [*extra[len(extra) - extra_take :], *head, *tail, fim.mid]


def refuse_unservable(prompt: RawPrompt, sampling: SamplingParams, model_id: str, vocab_size: int) -> None:
    """What this engine cannot do with a completion: a 400 before anything runs."""
    if prompt.echo and prompt.fill_in_middle:
        raise invalid("'echo' cannot be combined with 'suffix' (fill-in-the-middle).", param="echo")
    if prompt.echo and sampling.logprobs:
        raise invalid(
            f"Model {model_id!r} cannot give the prompt's logprobs: send 'echo' or 'logprobs', not both.",
            param="logprobs",
        )
    if isinstance(prompt.text, list) and any(
        isinstance(t, int) and not 0 <= t < vocab_size for t in prompt.text
    ):
        raise invalid(f"Invalid 'prompt': token ids must be in [0, {vocab_size}).", param="prompt")


def prompt_tokens(
    model: Any, fim: FimTokens | None, prompt: RawPrompt, *, n_batch: int, n_ctx: int, n_predict: int
) -> list[int]:
    """The tokens of `prompt`: the FIM layout (`fim` is checked to be there), or the prompt as it
    is; an empty prompt is BOS alone, as llama-server starts one."""
    if prompt.fill_in_middle:
        assert fim is not None
        return infill_tokens(model, fim, prompt, n_batch=n_batch, n_ctx=n_ctx, n_predict=n_predict)
    tokens = plain_tokens(model, prompt)
    if not tokens:
        bos: int = model.token_bos()
        if bos < 0:
            raise invalid(
                "The prompt is empty, and this model has no BOS token to start from.", param="prompt"
            )
        tokens = [bos]
    return tokens


def detokenize(vocab: Any, tokens: list[int]) -> str:
    """Token ids back to text (for `echo` of a token prompt); control tokens are left out."""
    buffer = ctypes.create_string_buffer(256)
    out = bytearray()
    for token in tokens:
        size = llama_cpp.llama_token_to_piece(vocab, token, buffer, len(buffer), 0, False)
        out += buffer.raw[: max(size, 0)]
    return out.decode("utf-8", "replace")


def echoed(vocab: Any, prompt: list[int] | list[int | str]) -> str:
    """A token (or mixed) prompt as text, for `echo`: the ids detokenized, the texts as given."""
    return "".join(p if isinstance(p, str) else detokenize(vocab, [p]) for p in prompt)
