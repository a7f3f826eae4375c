"""The chi-square harness of the acceptance rule (tests/speculative/test_verify_statistics.py; test_draft_vocab.py
drafts through it over a reduced vocabulary).

A small Markov "language": the next token depends on the last token and on the parity of the position, for both
the target (p) and the draft (q). A draft model samples K tokens autoregressively, the target scores the K + 1
positions, a rule (`verify_batch`, or a mutant of it) decides, and speculation steps repeat until every row has
emitted K + 1 tokens (`speculate`, `simulate`). The first K + 1 emitted tokens must then be distributed as K + 1
tokens sampled from the target alone, which is known exactly: `run_tests` makes the m = K + 2 chi-square tests of a
run, `check_passes` asserts that it passes them all (Bonferroni-split at ALPHA_SIGNIFICANCE), and a mutant must fail
one at MUTANT_P.
"""

import numpy as np
import torch
from scipy import stats

from teachspec.sampling import SamplingParams, sample, warp
from teachspec.speculative import verify_batch

torch.set_num_threads(1)

V, K, N = 10, 3, 200_000
START_LENGTH, START_TOKEN = 5, 0  # the prompt: 5 tokens ending in token 0
ALPHA_SIGNIFICANCE = 1e-4  # family-wise, Bonferroni-split over the m tests of a run
MUTANT_P = 1e-6

_g = torch.Generator().manual_seed(0)
TARGET_LOGITS = 1.5 * torch.randn(2, V, V, generator=_g, dtype=torch.float64)  # (parity, last token, next token)
DRAFT_LOGITS = TARGET_LOGITS + 0.8 * torch.randn(2, V, V, generator=_g, dtype=torch.float64)

SOFTMAX, TOP_K, GREEDY = (
    SamplingParams(temperature=1.0), SamplingParams(temperature=1.0, top_k=3), SamplingParams(temperature=0.0)
)
P = warp(TARGET_LOGITS, SOFTMAX)  # the target samples at temperature 1


# -- the harness -------------------------------------------------------------------------------------------------

def simulate(n: int, seed: int, draws=SOFTMAX, scores=SOFTMAX, rule=verify_batch) -> dict:
    """Speculate until each of n rows has emitted K + 1 tokens.

    draws: the decoding settings the draft model samples with; scores: the settings its reported q comes from
    (None: report no q, a point-mass drafter). Correct drafters have draws == scores.
    """
    q_draw = warp(DRAFT_LOGITS, draws)  # (2, V, V)
    q_report = None if scores is None else warp(DRAFT_LOGITS, scores)
    g = torch.Generator().manual_seed(seed)

    def guess(parity, token):
        return sample(q_draw[parity, token], g), None if q_report is None else q_report[parity, token]
    return speculate(n, g, guess, rule)


def speculate(n: int, g: torch.Generator, guess, rule=verify_batch) -> dict:
    """Speculation steps until each of n rows has emitted K + 1 tokens: `guess(parity, last tokens)` gives each
    active row's next guess and the q row verification is told it came from (None: no q, a point-mass drafter);
    `rule` judges each step. Returns the K + 1 tokens of each row and the first step's accepted counts."""
    out = torch.full((n, K + 1), -1)
    count = torch.zeros(n, dtype=torch.long)
    length = torch.full((n,), START_LENGTH)
    last = torch.full((n,), START_TOKEN)
    active = torch.arange(n)
    first_accepted = None
    while active.numel():
        pos, token = length[active], last[active]
        drafts, p_rows, q_rows = [], [], []
        for i in range(K):
            parity = (pos + i) % 2
            p_rows.append(P[parity, token])
            token, q = guess(parity, token)
            drafts.append(token)
            if q is not None:
                q_rows.append(q)
        p_rows.append(P[(pos + K) % 2, token])
        q = torch.stack(q_rows, 1) if q_rows else None  # (b, K, V)
        accepted, tokens = rule(torch.stack(p_rows, 1), q, torch.stack(drafts, 1), g)  # (b,), (b, K+1)
        if first_accepted is None:
            first_accepted = accepted
        for j in range(K + 1):
            slot = count[active] + j
            fits = (tokens[:, j] >= 0) & (slot <= K)
            out[active[fits], slot[fits]] = tokens[fits, j]
        count[active] += accepted + 1
        length[active] += accepted + 1
        last[active] = tokens[torch.arange(len(active)), accepted]
        active = active[count[active] <= K]
    return {"tokens": out.numpy(), "first_accepted": first_accepted}


def target_first_two() -> np.ndarray:
    """Exact joint of the first two target tokens: p(y0 | prompt) p(y1 | prompt, y0)."""
    p0 = P[START_LENGTH % 2, START_TOKEN]  # (V,)
    return (p0[:, None] * P[(START_LENGTH + 1) % 2]).numpy()  # (V, V)


def target_marginals() -> list[np.ndarray]:
    dist = P[START_LENGTH % 2, START_TOKEN]
    marginals = [dist]
    for t in range(1, K + 1):
        dist = dist @ P[(START_LENGTH + t) % 2]
        marginals.append(dist)
    return [m.numpy() for m in marginals]


def chi_square(samples: np.ndarray, probs: np.ndarray) -> tuple[float, float]:
    """Pearson chi-square p-value and total variation of categorical samples against exact probabilities.

    Cells expected fewer than 5 times are pooled (smallest first) until the pool is expected at least 5 times.
    """
    observed = np.bincount(samples, minlength=probs.size).astype(float)
    n = observed.sum()
    expected = probs.ravel() * n
    order = np.argsort(expected)
    small = int(np.searchsorted(expected[order], 5.0))  # how many cells are expected fewer than 5 times
    pooled = max(small, int(np.searchsorted(np.cumsum(expected[order]), 5.0)) + 1) if small else 0
    keep = order[pooled:]
    obs = np.append(observed[keep], observed[order[:pooled]].sum()) if pooled else observed
    exp = np.append(expected[keep], expected[order[:pooled]].sum()) if pooled else expected
    p_value = stats.chisquare(obs, exp).pvalue
    return float(p_value), 0.5 * float(np.abs(observed / n - probs.ravel()).sum())


def run_tests(tokens: np.ndarray) -> dict[str, tuple[float, float]]:
    """The m = K + 2 chi-square tests of one run: the joint of the first two tokens, and each position's marginal."""
    results = {"joint(y0, y1)": chi_square(tokens[:, 0] * V + tokens[:, 1], target_first_two())}
    for t, marginal in enumerate(target_marginals()):
        results[f"y{t}"] = chi_square(tokens[:, t], marginal)
    return results


def check_passes(tokens: np.ndarray) -> None:
    results = run_tests(tokens)
    threshold = ALPHA_SIGNIFICANCE / len(results)
    for name, (p_value, tv) in results.items():
        assert p_value > threshold, f"{name}: chi-square p = {p_value:.3g} <= {threshold:.3g}"
        assert tv < 0.01, f"{name}: total variation {tv:.4f}"
