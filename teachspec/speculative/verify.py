"""Verification: the acceptance rule of speculative sampling, as a pure function.

A cheap draft model proposes k tokens x_0 .. x_{k-1}, each sampled from its distribution q_i = q(. | prefix, x_<i).
One pass of the target model scores all k + 1 positions at once, giving p_0 .. p_k. Walking the draft left to right,

    accept x_i with probability  min(1, p_i(x_i) / q_i(x_i))        (draw u_i ~ U[0, 1), accept if u_i < that)

and at the first rejection emit instead a token drawn from the *residual*

    r_i = norm(max(0, p_i - q_i))

and stop. If all k drafts survive, p_k has been computed anyway, so one more token, the *bonus*, is drawn from it for
free. A step therefore emits between 1 and k + 1 tokens, and every one of them is distributed exactly as if the
target had sampled it alone (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding",
Algorithm 1 and the proof that its output is distributed as p; Chen et al. 2023, "Accelerating Large Language Model
Decoding with Speculative Sampling", Algorithm 2 and Theorem 1). Why, in one line: the token leaving position i is x
with probability

    q(x) min(1, p(x)/q(x)) + P(reject) r(x) = min(p(x), q(x)) + max(0, p(x) - q(x)) = p(x),

because P(reject) = 1 - sum(min(p, q)) = sum(max(0, p - q)) is exactly the residual's normalising constant.

Special cases that need no code of their own:
- greedy decoding is temperature 0: `sampling.warp` makes p and q one-hot, so a draft is accepted iff it is the
  target's argmax, and on rejection the residual is the one-hot of the target's argmax;
- drafters without a distribution (n-gram lookup, an oracle) pass q = None: their proposal is a point mass,
  q(x) = 1, so x is accepted with probability p(x) and the residual is p with x removed;
- k = 0 drafts nothing and draws the bonus from p_0: plain decoding.

Three guards. u lies in [0, 1), so `u < a` accepts with probability exactly a and never accepts a token the target
gives probability 0. A draft with q(x) = 0 could not have been sampled from q, so it is rejected rather than divided
by zero. And the residual has zero mass only when p_i <= q_i everywhere, that is p_i == q_i; then every draft is
accepted and a rejection can only come from rounding, so the residual falls back to p_i itself.

The uniforms u_0 .. u_{k-1} are drawn up front, one per drafted position in order (those after the first rejection
go unused); then one token is drawn, the resample or the bonus. `verify` (one sequence, with a readable trace) and
`verify_batch` (vectorised over a batch) use the generator in exactly this way, so with one row they agree token
for token, and they share the building block `residual`.

Precision. Whatever the inputs' dtype, the rule runs in float64: the uniforms are float64 draws (multiples of
2^-53), p/q is divided, compared and the residual computed in float64, and `sampling.sample` sums in float64. So
the law is exact for float32, float16 and bfloat16 inputs too, their values taken as they are (rows that sum to
1). In the inputs' dtype it would not be: torch's bfloat16 uniforms are exactly 0 about once in 512 draws (float16 once in
4096), so a draft with p(x)/q(x) = 2^-8 would be accepted half as often again as it should, and P(u < 0.5) comes
out near 0.501; and bfloat16 arithmetic, with 8 significant bits, rounds p/q and the residual by up to 2^-9.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F

from teachspec.sampling import sample


@dataclass(slots=True)
class PositionRecord:
    """What happened at one examined draft position: the numbers a student checks by hand."""

    i: int  # index in the draft, 0 .. k-1
    token: int  # the drafted token x_i
    q: float  # q_i(x_i), the draft's probability of it (1.0 for a point-mass drafter)
    p: float  # p_i(x_i), the target's probability of it
    ratio: float  # p / q; inf when q = 0
    u: float  # the uniform draw; accepted iff u < min(1, ratio) (and q > 0)
    decision: Literal["accept", "reject"]
    residual: torch.Tensor | None = None  # (vocab,) float64 norm(max(0, p_i - q_i)), only at a rejection
    resampled: int | None = None  # the token drawn from the residual, only at a rejection


@dataclass(slots=True)
class Verdict:
    accepted: int  # how many drafted tokens were accepted, 0 .. k
    tokens: list[int]  # emitted: the accepted drafts, then the resampled or bonus token (accepted + 1 of them)
    positions: list[PositionRecord] = field(default_factory=list)  # examined positions, in order
    bonus: int | None = None  # drawn from p_k when all k drafts were accepted
    resampled: int | None = None  # drawn from the residual at the first rejection


# -- the rule's building blocks ----------------------------------------------------------------------------------

def acceptance_probability(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """min(1, p(x) / q(x)) for distributions p, q (..., vocab) and tokens x (...); 0 where q(x) = 0.

    Divided in float64 whatever the inputs' dtype, as `verify` divides Python floats, so that both decide alike."""
    p_x, q_x = at(p, x).double(), at(q, x).double()
    drawable = q_x > 0
    return torch.where(drawable, (p_x / q_x.where(drawable, 1.0)).clamp(max=1.0), 0.0)


def at(dist: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """dist(x): each distribution's probability of its token, (..., vocab) and (...) -> (...)."""
    return dist.gather(-1, x.unsqueeze(-1)).squeeze(-1)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) over the last dim; p itself where that has no mass (p == q).

    In float64 whatever the inputs' dtype: in bfloat16 the division alone would be off by up to 2^-9."""
    p, q = p.double(), q.double()
    r = (p - q).clamp(min=0.0)
    mass = r.sum(-1, keepdim=True)
    return torch.where(mass > 0, r / mass.where(mass > 0, 1.0), p)


def point_mass(draft: torch.Tensor, vocab: int, dtype: torch.dtype) -> torch.Tensor:
    """q for a drafter that proposes tokens with certainty: one-hot rows (..., vocab)."""
    return F.one_hot(draft, vocab).to(dtype)


# -- the rule --------------------------------------------------------------------------------------------------

def verify(
    p: torch.Tensor, q: torch.Tensor | None, draft: torch.Tensor, generator: torch.Generator | None,
    check: bool = True,
) -> Verdict:
    """Run the acceptance rule on one draft.

    p: (k+1, vocab) target probabilities at the k drafted positions and the one after them.
    q: (k, vocab) draft probabilities each drafted token was sampled from, or None for a point-mass drafter.
    draft: (k,) long tensor of drafted token ids; k may be 0.
    check=False skips validating the inputs: for a caller whose p and q come from `sampling.warp` and whose
    draft was sampled from q (the engine, which would otherwise pay for it at every step).
    """
    _check_generator(generator)
    p, q = _check(p, q, draft, batched=False) if check else _distributions(p, q, draft)
    k = draft.shape[0]
    u = torch.rand(k, generator=generator, dtype=torch.float64, device=p.device)  # (k,)
    # as Python floats (exact), in one conversion: the decisions below compare them, the records keep them
    u_of, p_of, q_of = torch.stack([u, at(p[:k], draft).double(), at(q, draft).double()]).tolist()
    xs, positions = draft.tolist(), []
    for i, x in enumerate(xs):
        p_x, q_x = p_of[i], q_of[i]
        ratio = p_x / q_x if q_x > 0 else math.inf
        record = PositionRecord(i=i, token=x, q=q_x, p=p_x, ratio=ratio, u=u_of[i], decision="accept")
        positions.append(record)
        if not (q_x > 0 and u_of[i] < min(1.0, ratio)):  # accept with probability min(1, p/q); never if q(x) = 0
            record.decision = "reject"
            record.residual = residual(p[i], q[i])
            record.resampled = sample(record.residual, generator).item()
            tokens = xs[:i] + [record.resampled]
            return Verdict(accepted=i, tokens=tokens, positions=positions, resampled=record.resampled)
    bonus = sample(p[k], generator).item()
    return Verdict(accepted=k, tokens=xs + [bonus], positions=positions, bonus=bonus)


def verify_batch(
    p: torch.Tensor, q: torch.Tensor | None, draft: torch.Tensor, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same rule over a batch of B independent drafts, with no trace.

    p: (B, k+1, vocab); q: (B, k, vocab) or None; draft: (B, k) long.
    Returns accepted (B,) and tokens (B, k+1): the emitted tokens of each row, padded with -1.
    """
    _check_generator(generator)
    p, q = _check(p, q, draft, batched=True)
    B, k = draft.shape
    u = torch.rand(B, k, generator=generator, dtype=torch.float64, device=p.device)  # (B, k)
    accepted_at = u < acceptance_probability(p[:, :k], q, draft)  # (B, k), both sides float64
    accepted = accepted_at.long().cumprod(-1).sum(-1)  # (B,) length of the leading run of acceptances

    rows = torch.arange(B, device=p.device)
    final = p[rows, accepted].double()  # (B, vocab): p_k, the bonus distribution, where every draft was accepted
    hit = accepted < k  # rows with a rejection resample from the residual at that position instead
    final[hit] = residual(p[rows[hit], accepted[hit]], q[rows[hit], accepted[hit]])
    last = sample(final, generator)  # (B,)

    slot = torch.arange(k + 1, device=p.device)
    tokens = torch.where(slot[:k] < accepted[:, None], draft, -1)  # (B, k)
    tokens = torch.cat([tokens, torch.full((B, 1), -1, device=p.device)], dim=1)  # (B, k+1)
    tokens[rows, accepted] = last
    return accepted, tokens


# -- input checks ------------------------------------------------------------------------------------------------

def _check(
    p: torch.Tensor, q: torch.Tensor | None, draft: torch.Tensor, batched: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate the inputs and return p and q in one dtype, q = point mass when None."""
    lead, n = ("B, ", 1) if batched else ("", 0)
    if not isinstance(p, torch.Tensor) or p.dim() != n + 2 or not p.is_floating_point() or p.shape[-1] == 0:
        raise ValueError(f"p must be a floating-point tensor of shape ({lead}k+1, vocab), got {_describe(p)}")
    if not isinstance(draft, torch.Tensor) or draft.dtype != torch.long:
        raise ValueError(f"draft must be a long (int64) tensor of token ids, got {_describe(draft)}")
    if draft.dim() != n + 1 or draft.shape[:n] != p.shape[:n]:
        raise ValueError(f"draft must have shape ({lead}k) to match p {tuple(p.shape)}, got {tuple(draft.shape)}")
    for name, t in (("draft", draft), ("q", q)):
        if isinstance(t, torch.Tensor) and t.device != p.device:
            raise ValueError(f"{name} is on {t.device} and p on {p.device}: they must be on one device")
    k, vocab = draft.shape[-1], p.shape[-1]
    if p.shape[-2] != k + 1:
        raise ValueError(f"p must have k+1 = {k + 1} rows for a draft of k = {k} tokens, got {p.shape[-2]}")
    lowest, highest = torch.stack(draft.aminmax()).tolist() if draft.numel() else (0, 0)
    if lowest < 0 or highest >= vocab:
        bad = lowest if lowest < 0 else highest
        raise ValueError(f"draft token ids must be in [0, vocab={vocab}), got {bad}")
    _check_distributions("p", p)
    if q is not None:
        expected = (*p.shape[:n], k, vocab)
        if not isinstance(q, torch.Tensor) or not q.is_floating_point() or tuple(q.shape) != expected:
            raise ValueError(
                f"q must be None or a floating-point tensor of shape {expected} (draft has k = {k}, p has vocab = "
                f"{vocab}), got {_describe(q)}"
            )
        _check_distributions("q", q)
    return _distributions(p, q, draft)


def _check_generator(generator: object) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None (torch's global generator), got "
                        f"{type(generator).__name__} {generator!r}")


def _distributions(p: torch.Tensor, q: torch.Tensor | None, draft: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """p and q in one dtype, q a point mass on the draft when None."""
    if q is None:
        return p, point_mass(draft, p.shape[-1], p.dtype)
    dtype = torch.promote_types(p.dtype, q.dtype)
    return p.to(dtype), q.to(dtype)


def _check_distributions(name: str, probs: torch.Tensor) -> None:
    if probs.numel() == 0:
        return
    sums = probs.sum(-1, dtype=torch.float64)  # in bfloat16 itself the sum could not tell 1 from 1 + 2^-7
    # Loose enough for float32 softmax over a large vocabulary, and for the rounding of each probability to a
    # low-precision dtype (it moves the sum by up to eps / 2); the point is to catch logits passed by mistake.
    tolerance = max(1e-3, torch.finfo(probs.dtype).eps)
    lowest, off = torch.stack([probs.amin().double(), (sums - 1).abs().amax()]).tolist()
    if not (lowest >= 0 and off <= tolerance):  # written so that NaN fails too
        raise ValueError(
            f"{name} rows must be probability distributions (non-negative, summing to 1; pass probabilities, not "
            f"logits), got row sums in [{sums.min().item():.4g}, {sums.max().item():.4g}] and minimum "
            f"{probs.min().item():.4g}"
        )


def _describe(x: object) -> str:
    if isinstance(x, torch.Tensor):
        return f"{x.dtype} tensor of shape {tuple(x.shape)}"
    return type(x).__name__
