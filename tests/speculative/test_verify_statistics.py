"""The acceptance rule, statistically: Monte Carlo chi-square (T2), mutants it must catch (T3), the acceptance law
(T5) and seeded determinism (T7).

The harness (tests/helpers/statistics.py) is a small Markov "language": the next token depends on the last token and
on the parity of the position, for both the target (p) and the draft (q). A draft model samples k tokens
autoregressively, the target scores the k + 1 positions, `verify_batch` decides, and speculation steps repeat until
every row has emitted k + 1 tokens (a row whose first step emitted one token gets a second step, and so on). The
first k + 1 emitted tokens must then be distributed as k + 1 tokens sampled from the target alone, which we know
exactly.
"""

import math

import numpy as np
import pytest
import torch

from helpers.statistics import DRAFT_LOGITS, GREEDY, K, MUTANT_P, N, P, SOFTMAX, START_LENGTH, START_TOKEN, TOP_K, V, \
    check_passes, run_tests, simulate
from teachspec.course.harness import buggy_rule
from teachspec.sampling import sample, warp
from teachspec.speculative import verify, verify_batch
from teachspec.theory import alpha_from_distributions, expected_tokens


# -- the rule with one bug at a time ----------------------------------------------------------------------------

# the mutants come from the course, which switches the same bugs on in lecture 3
buggy_verify_batch = buggy_rule


# -- the harness, run once for the tests that share its rows -----------------------------------------------------

@pytest.fixture(scope="module")
def correct_run():
    return simulate(N, seed=1)


# -- T2: the correct rule passes -----------------------------------------------------------------------------------

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
