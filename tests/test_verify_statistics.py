"""The acceptance rule, statistically: Monte Carlo chi-square (T2), mutants it must catch (T3), the acceptance law
(T5) and seeded determinism (T7).

The harness is a small Markov "language": the next token depends on the last token and on the parity of the
position, for both the target (p) and the draft (q). A draft model samples k tokens autoregressively, the target
scores the k + 1 positions, `verify_batch` decides, and speculation steps repeat until every row has emitted k + 1
tokens (a row whose first step emitted one token gets a second step, and so on). The first k + 1 emitted tokens
must then be distributed as k + 1 tokens sampled from the target alone, which we know exactly.
"""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from teachspec.course.harness import buggy_rule
from teachspec.sampling import SamplingParams, sample, warp
from teachspec.speculative import verify, verify_batch
from teachspec.theory import alpha_from_distributions, expected_tokens

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


# -- the rule with one bug at a time ----------------------------------------------------------------------------

# the mutants come from the course, which switches the same bugs on in lecture 3
buggy_verify_batch = buggy_rule


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


@pytest.fixture(scope="module")
def correct_run():
    return simulate(N, seed=1)


# -- T2: the correct rule passes -----------------------------------------------------------------------------------

def check_passes(tokens: np.ndarray) -> None:
    results = run_tests(tokens)
    threshold = ALPHA_SIGNIFICANCE / len(results)
    for name, (p_value, tv) in results.items():
        assert p_value > threshold, f"{name}: chi-square p = {p_value:.3g} <= {threshold:.3g}"
        assert tv < 0.01, f"{name}: total variation {tv:.4f}"


def test_T2_emitted_tokens_follow_the_target(correct_run):
    assert (correct_run["tokens"] >= 0).all()
    check_passes(correct_run["tokens"])


@pytest.mark.parametrize(
    "draws, scores",
    [(TOP_K, TOP_K), (GREEDY, None)],
    ids=["top-k draft scored with top-k q", "greedy draft as a point mass"],
)
def test_T2_other_correct_drafters(draws, scores):
    check_passes(simulate(N, seed=2, draws=draws, scores=scores)["tokens"])


def test_T2_point_mass_is_the_one_hot_q_of_a_greedy_draft():
    a = simulate(5_000, seed=3, draws=GREEDY, scores=None)
    b = simulate(5_000, seed=3, draws=GREEDY, scores=GREEDY)
    assert np.array_equal(a["tokens"], b["tokens"])


def test_T2_copied_rule_without_a_bug_is_verify_batch():
    a = simulate(5_000, seed=3, rule=buggy_verify_batch(None))
    b = simulate(5_000, seed=3)
    assert np.array_equal(a["tokens"], b["tokens"])


# -- T3: the harness catches every classic bug ---------------------------------------------------------------------

MUTANTS = {
    "resample from p, not the residual": {"rule": buggy_verify_batch("resample from p, not the residual")},
    "raw q where the draft sampled from top-k q": {"draws": TOP_K, "scores": SOFTMAX},
    "argmax drafts scored with a softmax q": {"draws": GREEDY, "scores": SOFTMAX},
    "one uniform shared by all positions": {"rule": buggy_verify_batch("one uniform shared by all positions")},
    "p row off by one": {"rule": buggy_verify_batch("p row off by one")},
    "always accept": {"rule": buggy_verify_batch("always accept")},
    "bonus from p_(k-1)": {"rule": buggy_verify_batch("bonus from p_(k-1)")},
}


@pytest.mark.parametrize("mutant", MUTANTS)
def test_T3_harness_rejects_mutant(mutant):
    results = run_tests(simulate(N, seed=4, **MUTANTS[mutant])["tokens"])
    smallest = min(p_value for p_value, _ in results.values())
    assert smallest < MUTANT_P, f"{mutant} survived: smallest p = {smallest:.3g}"


# -- T5: the acceptance law ----------------------------------------------------------------------------------------

def test_T5_acceptance_follows_sum_of_min(correct_run):
    """P(first j drafts accepted) = e_prompt M_0 M_1 ... M_(j-1) 1, with M_t = min(p_t, q_t) over (last, next).

    For j = 1 this is the single-step rate beta = sum(min(p, q)) of Leviathan et al., Corollary 3.6.
    """
    Q = warp(DRAFT_LOGITS, SOFTMAX)
    accepted = correct_run["first_accepted"]
    reach = torch.zeros(V, dtype=torch.float64)
    reach[START_TOKEN] = 1.0
    for j in range(1, K + 1):
        reach = reach @ torch.minimum(P, Q)[(START_LENGTH + j - 1) % 2]  # mass of accepted paths, by last token
        rate = reach.sum().item()
        if j == 1:
            beta = alpha_from_distributions(P[START_LENGTH % 2, START_TOKEN], Q[START_LENGTH % 2, START_TOKEN])
            assert rate == pytest.approx(beta.item(), abs=1e-12)
        observed = (accepted >= j).double().mean().item()
        assert abs(observed - rate) < 4 * math.sqrt(rate * (1 - rate) / N), f"j = {j}"


def test_T5_mean_tokens_per_step_matches_leviathan_eq1():
    """With context-free p and q every position accepts with alpha = sum(min(p, q)), independently."""
    g = torch.Generator().manual_seed(5)
    p = warp(1.5 * torch.randn(V, generator=g, dtype=torch.float64), SOFTMAX)
    q = warp(1.5 * torch.randn(V, generator=g, dtype=torch.float64), SOFTMAX)
    alpha = alpha_from_distributions(p, q).item()
    draft = sample(q.expand(N, K, V), g)
    accepted, _ = verify_batch(p.expand(N, K + 1, V), q.expand(N, K, V), draft, g)
    tokens = (accepted + 1).double()
    law = np.array([alpha**j * (1 - alpha) for j in range(K)] + [alpha**K])  # P(accepted = j)
    mean = float((law * np.arange(1, K + 2)).sum())
    sigma = math.sqrt(float((law * (np.arange(1, K + 2) - mean) ** 2).sum()) / N)
    assert mean == pytest.approx(expected_tokens(alpha, K), abs=1e-12)
    assert abs(tokens.mean().item() - mean) < 4 * sigma


# -- T7: seeded determinism ----------------------------------------------------------------------------------------

def test_T7_same_seed_same_results():
    first = simulate(2_000, seed=6)["tokens"]
    for _ in range(20):
        assert np.array_equal(simulate(2_000, seed=6)["tokens"], first)
    assert not np.array_equal(simulate(2_000, seed=7)["tokens"], first)


def test_T7_verify_replays():
    p, q = P[1, [0, 3, 5, 7]], warp(DRAFT_LOGITS, SOFTMAX)[0, [1, 2, 4]]
    draft = torch.tensor([3, 5, 7])
    runs = [verify(p, q, draft, torch.Generator().manual_seed(8)) for _ in range(20)]
    summary = [(v.tokens, [(r.u, r.decision, r.resampled) for r in v.positions]) for v in runs]
    assert all(s == summary[0] for s in summary)
