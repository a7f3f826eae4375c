"""Lecture 3's experiment: is speculative output distributed exactly as the target's? A chi-square test, and the
classic bugs it catches.

The model's own distributions at one prompt give p (k+1 rows) and q (k rows). Treating the rows as fixed (the
context-free simplification of the library's own tests, tests/helpers/statistics.py), a batch of drafts is sampled
from q and judged by an acceptance rule; the token emitted at position j, among the runs that reached j, must then
follow p_j exactly (Leviathan et al. 2023, Appendix A.1, "Correctness of speculative sampling", whose normalising
constant 1 - beta comes from their Theorem 3.5, beta = sum min(p, q); Chen et al. 2023, Theorem 1). A rule copied
from `verify_batch` with one bug switched on fails the test.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy import stats

from teachspec.renamed import old_names
from teachspec.sampling import sample
from teachspec.speculative import acceptance_probability, residual, verify_batch

BUGS = ("resample from p, not the residual", "always accept", "bonus from p_(k-1)",
        "one uniform shared by all positions", "p row off by one")


def buggy_rule(bug: str | None):
    """`verify_batch` line for line, with `bug` switched on (None: no bug)."""
    if bug is not None and bug not in BUGS:
        raise ValueError(f"bug must be None or one of {BUGS}, got {bug!r}")

    def rule(p, q, draft, generator):
        B, k = draft.shape
        u = torch.rand(B, k, generator=generator, dtype=p.dtype)  # (B, k)
        if bug == "one uniform shared by all positions":
            u = u[:, :1].expand(B, k)
        p_scored = p[:, 1:] if bug == "p row off by one" else p[:, :k]
        accepted = (u < acceptance_probability(p_scored, q, draft)).long().cumprod(-1).sum(-1)  # (B,)
        if bug == "always accept":
            accepted = torch.full((B,), k)
        rows = torch.arange(B)
        final = p[rows, accepted]  # (B, vocab): the bonus distribution p_k, or p at the rejection
        hit = accepted < k
        if bug == "bonus from p_(k-1)":
            final[~hit] = p[~hit, k - 1]
        if bug == "resample from p, not the residual":
            final[hit] = p[rows[hit], accepted[hit]]
        else:
            final[hit] = residual(p_scored[rows[hit], accepted[hit]], q[rows[hit], accepted[hit]])
        tokens = torch.where(torch.arange(k)[None] < accepted[:, None], draft, -1)  # (B, k)
        tokens = torch.cat([tokens, torch.full((B, 1), -1)], dim=1)  # (B, k+1)
        tokens[rows, accepted] = sample(final, generator)
        return accepted, tokens

    return rule


def coarsen(p: torch.Tensor, q: torch.Tensor, m: int = 63) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep the m tokens most likely under any row of p or q and merge the rest into one extra token: a
    vocabulary of m + 1 that keeps the batch small. The rule is exact for any distributions, these included."""
    keep = torch.cat([p, q]).max(0).values.topk(min(m, p.shape[-1])).indices  # (m,)
    def merge(x):
        kept = x[:, keep]
        return torch.cat([kept, (1 - kept.sum(-1, keepdim=True)).clamp(min=0)], dim=-1)  # (rows, m+1)
    p, q = merge(p), merge(q)
    return p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)


def run(p: torch.Tensor, q: torch.Tensor, n: int = 20_000, seed: int = 0, rule=verify_batch) -> torch.Tensor:
    """n speculation steps with drafts sampled from q's rows: the emitted tokens (n, k+1), -1 padded."""
    g = torch.Generator().manual_seed(seed)
    k = q.shape[0]
    draft = torch.stack([sample(q[i].expand(n, -1), g) for i in range(k)], dim=1)  # (n, k)
    _, tokens = rule(p.expand(n, -1, -1).clone(), q.expand(n, -1, -1).clone(), draft, g)
    return tokens


def chi_square(samples: np.ndarray, probs: np.ndarray) -> float:
    """Pearson chi-square p-value of categorical samples against exact probabilities; cells expected fewer than 5
    times are pooled into one."""
    observed = np.bincount(samples, minlength=probs.size).astype(float)
    expected = probs * observed.sum()
    small = expected < 5
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    exp *= obs.sum() / exp.sum()  # float rounding only
    return float(stats.chisquare(obs, exp).pvalue)


def lump(samples: np.ndarray, probs: np.ndarray, m: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """Keep the m likeliest tokens as categories 0..m-1 and merge every other token into category m, so that a few
    hundred samples can be tested against a distribution over thousands of tokens."""
    top = np.argsort(-probs)[:m]
    index = np.full(probs.size, m)
    index[top] = np.arange(m)
    return index[samples], np.append(probs[top], max(0.0, 1 - probs[top].sum()))


def position_p_values(tokens: torch.Tensor, p: torch.Tensor) -> list[float]:
    """One p-value per position j: the tokens emitted at j (by runs that got that far) against p_j."""
    out = []
    for j in range(tokens.shape[1]):
        col = tokens[:, j]
        col = col[col >= 0].numpy()
        out.append(chi_square(col, p[j].double().numpy()) if col.size else float("nan"))
    return out


# test_positions: a name pytest would take for a test of its own
__getattr__ = old_names(__name__, {"test_positions": "position_p_values"}, globals())
