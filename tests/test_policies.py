"""Draft-length policies: each reacts to what it measures the way its docstring says."""

import random

import pytest

from teachspec.engine import Engine
from teachspec.speculative.policies import Adaptive, Confidence, Constant, Heuristic, make_policy
from teachspec.theory import expected_tokens, optimal_k
from test_engine import PROMPT, make_pair


def simulate(policy, alpha, draft_cost, verify_slope, steps=400, seed=0):
    """Feed a policy steps whose guesses are accepted i.i.d. with probability alpha; return the k's it chose."""
    rng, ks = random.Random(seed), []
    for _ in range(steps):
        k = policy.next_k()
        accepted = 0
        while accepted < k and rng.random() < alpha:
            accepted += 1
        policy.update(k, accepted, k * draft_cost, 1.0 + verify_slope * k)
        ks.append(k)
    return ks


def test_heuristic_grows_by_two_on_full_acceptance_and_shrinks_by_one_otherwise():
    h = Heuristic(k=4)
    h.update(4, 4, 0, 0)
    assert h.next_k() == 6
    h.update(6, 2, 0, 0)
    assert h.next_k() == 5
    for _ in range(10):
        h.update(h.k, 0, 0, 0)
    assert h.next_k() == 1


def test_adaptive_agrees_with_the_formula_when_verification_costs_the_same_for_any_k():
    for alpha, c in ((0.6, 0.17), (0.8, 0.05), (0.9, 0.02)):
        ks = simulate(Adaptive(k_max=12), alpha, c, 0.0)
        settled = max(set(ks[-100:]), key=ks[-100:].count)
        assert abs(settled - optimal_k(alpha, c, 12)) <= 1, (alpha, c, settled)


def cost_aware_best(alpha, c, slope, k_max=8):
    return max(range(k_max + 1), key=lambda k: expected_tokens(alpha, k) / (k * c + 1 + slope * k))


def test_adaptive_finds_the_best_k_when_verifying_more_tokens_costs_more():
    # a CPU-like pair: each extra verified token costs 10-15% of a pass, so shorter drafts win than the paper's
    for alpha, c, slope in ((0.65, 0.12, 0.10), (0.8, 0.05, 0.15), (0.7, 0.1, 0.25)):
        best = cost_aware_best(alpha, c, slope)
        ks = simulate(Adaptive(), alpha, c, slope)[-200:]
        assert best < optimal_k(alpha, c, 8)  # the paper's constant-cost formula would guess longer
        assert abs(sum(ks) / len(ks) - best) <= 0.6, (alpha, c, slope, best, sum(ks) / len(ks))


def test_adaptive_stops_guessing_when_guesses_fail():
    ks = simulate(Adaptive(), 0.02, 0.17, 0.12)
    assert ks[-100:].count(0) >= 90 and 1 in ks[-100:]  # plain decoding, probing k = 1 now and then


def test_confidence_stops_a_draft_after_a_doubtful_guess():
    pair = make_pair()
    out = Engine(pair).generate(PROMPT, 24, speculate="model", k=Confidence(k_max=6, threshold=1.0))
    assert out.stats.drafted == out.stats.drafts  # no softmax reaches 1, so each draft stops at one guess, so each draft stops at one
    out = Engine(pair).generate(PROMPT, 24, speculate="model", k=Confidence(k_max=6, threshold=0.0))
    assert out.stats.drafted > 2 * out.stats.drafts


def test_make_policy_accepts_ints_names_and_objects_and_refuses_the_rest():
    assert isinstance(make_policy(3), Constant) and make_policy(3).k == 3
    assert isinstance(make_policy("adaptive"), Adaptive)
    h = Heuristic()
    assert make_policy(h) is h
    with pytest.raises(ValueError, match="k='fast' is not a draft-length policy"):
        make_policy("fast")
    with pytest.raises(ValueError, match="threshold must be in"):
        Confidence(threshold=2)
    with pytest.raises(ValueError, match="decay must be in"):
        Adaptive(decay=1.5)
