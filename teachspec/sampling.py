"""Sampling: how a model's logits become the distribution a token is drawn from.

A language model outputs logits; decoding settings turn them into probabilities (nanoGPT's `sample.py` and
transformers' logits warpers do the same, in the same order):

    temperature T   divide the logits by T; T < 1 sharpens, T > 1 flattens, T = 0 means greedy (a one-hot at the
                    argmax, ties going to the lowest token id exactly like `torch.argmax`)
    top-k           keep the k largest logits (tokens tied with the k-th are kept too, as in transformers)
    top-p           nucleus sampling: keep the smallest set of most likely tokens whose mass reaches top_p
                    (always at least one token)

and then renormalise. `warp` applies them in that order, over the last dimension of any tensor of logits.

Why speculative decoding cares: the acceptance rule min(1, p(x)/q(x)) turns draft tokens into target samples only if
p is the distribution the target *would* sample from and q is *exactly* the distribution the draft token *was*
sampled from. So the target's p and the draft's q must both come out of this same `warp`, each with the decoding
settings actually used. Score a top-k-sampled draft with its raw softmax q and the draft's tokens look rarer to
the rule than they were: p/q is overstated, too many drafts are accepted, the residual max(0, p - q) removes too
little, and the output is no longer distributed as p (transformers issue #47932: acceptance inflated up to 7.8x,
total variation to the target up to 0.31). Greedy drafting scored with a softmax q is the same bug with top_k = 1.

Work happens in float32, or in float64 when the logits are float64: the exact tests run in float64.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch


# The smallest temperature other than 0. Logits are divided by T in float32, whose smallest normal number is about
# 1.2e-38: a T below that becomes 0 there, and every logit inf or NaN. 1e-30 keeps a margin, and is already greedy in
# all but name (a gap of 1e-28 between two logits decides).
TEMPERATURE_FLOOR = 1e-30


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float = 0.0  # 0 is greedy decoding: always the most likely token
    top_k: int | None = None  # None keeps the whole vocabulary
    top_p: float | None = None  # None (or 1.0) keeps the whole vocabulary

    def __post_init__(self) -> None:
        t = self.temperature
        if not _is_real(t) or not math.isfinite(t) or t < 0:
            raise ValueError(f"temperature must be a finite number >= 0 (0 means greedy), got {t!r}")
        if 0 < t < TEMPERATURE_FLOOR:
            raise ValueError(f"temperature must be 0 (greedy) or at least {TEMPERATURE_FLOOR:g}: float32 cannot divide "
                             f"logits by less; got {t!r}, which samples like greedy anyway, so pass 0")
        k = self.top_k
        if k is not None and (not isinstance(k, numbers.Integral) or isinstance(k, bool) or k < 1):
            raise ValueError(f"top_k must be an int >= 1 or None, got {k!r}")
        p = self.top_p
        if p is not None and (not _is_real(p) or not 0 < p <= 1):
            raise ValueError(f"top_p must be a number in (0, 1] or None, got {p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def _is_real(x: object) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


# ----------------------------------------------------------------------------------------------------------------

def warp(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Probabilities (same shape as `logits`) to sample the next token from, under `params`."""
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point() or logits.dim() == 0:
        got = f"{logits.dtype} of shape {tuple(logits.shape)}" if isinstance(logits, torch.Tensor) else type(logits)
        raise ValueError(f"logits must be a floating-point tensor of shape (..., vocab), got {got}")
    # A finite sum has no NaN or inf in it: in the usual case one pass and one number read back, which matters
    # because warp runs k + 1 times a step.
    if not math.isfinite(logits.sum()):
        if torch.isnan(logits).any() or torch.isposinf(logits).any():
            raise ValueError("logits must not contain NaN or +inf")
        if torch.isneginf(logits).all(-1).any():
            raise ValueError("every row of logits needs at least one finite value (a row is all -inf)")
    logits = logits.to(torch.float64 if logits.dtype == torch.float64 else torch.float32)

    if params.greedy:
        return torch.zeros_like(logits).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)  # one-hot

    # Softmax ignores a shift; subtracting the max first keeps a tiny T from overflowing the division.
    logits = (logits - logits.amax(-1, keepdim=True)) / params.temperature

    if params.top_k is not None and params.top_k < logits.shape[-1]:
        kth = logits.topk(params.top_k, dim=-1).values[..., -1:]  # (..., 1)
        logits = logits.masked_fill(logits < kth, -math.inf)
    probs = logits.softmax(-1)

    if params.top_p is not None and params.top_p < 1:
        ranked, order = probs.sort(dim=-1, descending=True, stable=True)
        # A token stays if the tokens ranked above it have not yet reached top_p; the first always stays, however
        # small top_p is (in float32 a top_p under 1e-45 is 0, and `above < 0` would keep nothing).
        above = ranked.cumsum(-1) - ranked
        stays = above < params.top_p
        stays[..., 0] = True
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, stays)
        probs = probs.masked_fill(~keep, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token id per distribution in `probs` (..., vocab) -> long tensor (...). None uses torch's global RNG.

    Inverse transform sampling: draw u uniform in (0, 1] and take the first token whose cumulative probability
    reaches u times the row's total. A token with probability 0 is never drawn (the cumulative sum does not rise
    at it), and u > 0 means the search always lands on a token. The same law as `torch.multinomial`, at a
    fraction of its cost for one draw over a large vocabulary, which matters when it runs k + 1 times a step.
    """
    flat = probs.reshape(-1, probs.shape[-1])  # (rows, vocab)
    cdf = flat.cumsum(-1, dtype=torch.float64)  # (rows, vocab); summed in float64 so that it stays exact
    u = 1.0 - torch.rand(flat.shape[0], 1, generator=generator, dtype=torch.float64, device=flat.device)
    return torch.searchsorted(cdf, u * cdf[:, -1:]).reshape(probs.shape[:-1])
