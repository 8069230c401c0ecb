"""llama.cpp's further samplers, built from a request's sampling as llama.cpp's common sampler
(common/sampling.cpp) builds them, with its defaults: DRY, top-n-sigma, XTC and mirostat.
`LlamaRuntime._sampler` places each in the chain where llama.cpp's default order puts it
(penalties, DRY, top-n-sigma, top-k, typical-p, top-p, min-p, XTC, temperature; mirostat in
place of all but the logit bias)."""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp

from sluicegate.core.request import SamplingParams

DRY_BASE = 1.75
DRY_ALLOWED_LENGTH = 2
DRY_PENALTY_LAST_N = 64
DRY_SEQUENCE_BREAKERS = ("\n", ":", '"', "*")
XTC_THRESHOLD = 0.10
MIROSTAT_TAU = 5.0
MIROSTAT_ETA = 0.1
MIROSTAT_M = 100  # mirostat 1's candidates for estimating s_hat, as llama.cpp sets it
MIN_KEEP = 1


def dry_on(s: SamplingParams) -> bool:
    return bool(s.dry_multiplier) and s.dry_penalty_last_n != 0


def dry(vocab: Any, s: SamplingParams, n_ctx: int) -> Any | None:
    """DRY ("don't repeat yourself"): a penalty on the token that would extend a sequence
    already seen, growing with its length; None when off."""
    if not dry_on(s):
        return None
    base = DRY_BASE if s.dry_base is None or s.dry_base < 1.0 else s.dry_base  # as llama-server
    allowed = DRY_ALLOWED_LENGTH if s.dry_allowed_length is None else s.dry_allowed_length
    last_n = DRY_PENALTY_LAST_N if s.dry_penalty_last_n is None else s.dry_penalty_last_n
    last_n = n_ctx if last_n < 0 else last_n  # -1: the whole context (older llama-servers)
    breakers = [b.encode() for b in (s.dry_sequence_breakers or DRY_SEQUENCE_BREAKERS)]
    array = (ctypes.c_char_p * len(breakers))(*breakers)  # llama.cpp copies them
    return llama_cpp.llama_sampler_init_dry(
        vocab, float(s.dry_multiplier or 0.0), base, allowed, last_n, array, len(breakers)
    )


def top_n_sigma(s: SamplingParams) -> Any | None:
    """Keeps the tokens within n standard deviations of the top logit; None when off (<= 0)."""
    if s.top_n_sigma is None or s.top_n_sigma <= 0:
        return None
    return llama_cpp.llama_sampler_init_top_n_sigma(s.top_n_sigma)


def xtc(s: SamplingParams, seed: int) -> Any | None:
    """XTC ("exclude top choices"): with probability p, every token above the threshold but the
    least likely of them is removed; None when off."""
    if not s.xtc_probability:
        return None
    threshold = XTC_THRESHOLD if s.xtc_threshold is None else s.xtc_threshold
    return llama_cpp.llama_sampler_init_xtc(s.xtc_probability, threshold, MIN_KEEP, seed)


def mirostat(s: SamplingParams, n_vocab: int, seed: int) -> Any | None:
    """Mirostat 1 or 2: picks the token itself, steering the text's surprise towards tau;
    None when off."""
    tau = MIROSTAT_TAU if s.mirostat_tau is None else s.mirostat_tau
    eta = MIROSTAT_ETA if s.mirostat_eta is None else s.mirostat_eta
    if s.mirostat == 1:
        return llama_cpp.llama_sampler_init_mirostat(n_vocab, seed, tau, eta, MIROSTAT_M)
    if s.mirostat == 2:
        return llama_cpp.llama_sampler_init_mirostat_v2(seed, tau, eta)
    return None
