"""Draft-length policies: each reacts to what it measures the way its docstring says."""

import random

import pytest

from helpers.pairs import PROMPT, make_pair
from teachspec.engine import Engine
from teachspec.sampling import SamplingParams
from teachspec.speculate import start_k
from teachspec.speculative.policies import Adaptive, Confidence, Constant, Heuristic, make_policy
from teachspec.theory import expected_tokens, optimal_k


def simulate(policy, alpha, draft_cost, verify_slope, steps=400, seed=0, verify_cost=None):
    """Feed a policy steps whose guesses are accepted i.i.d. with probability alpha (or, for a list, guess i with
    probability alpha[i] once the ones before it were); return the k's it chose."""
    rng, ks = random.Random(seed), []
    h = (lambda i: alpha[min(i, len(alpha) - 1)]) if isinstance(alpha, list) else (lambda i: alpha)
    verify_cost = verify_cost or (lambda k: 1.0 + verify_slope * k)
    for _ in range(steps):
        k = policy.next_k()
        accepted = 0
        while accepted < k and rng.random() < h(accepted):
            accepted += 1
        policy.update(k, accepted, k * draft_cost, verify_cost(k))
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


def test_adaptive_drafts_long_when_accepted_guesses_come_in_runs():
    # prompt lookup: the first guess is a coin flip, but once a copied stretch starts it goes on (h_2.. = 0.9),
    # which makes k = 8 the best; one pooled alpha would undervalue every guess after the first.
    hs, c, slope = [0.4, 0.9], 0.0, 0.06
    def expected(k):
        total, run = 1.0, 1.0
        for i in range(k):
            run *= hs[min(i, 1)]
            total += run
        return total
    assert max(range(9), key=lambda k: expected(k) / (1 + slope * k)) == 8
    ks = simulate(Adaptive(), hs, c, slope)[-200:]
    assert sum(ks) / len(ks) >= 7, sum(ks) / len(ks)
    policy = Adaptive()
    simulate(policy, hs, c, slope)
    h = policy.acceptance()
    assert abs(h[0] - 0.4) < 0.15 and all(abs(x - 0.9) < 0.1 for x in h[1:4]), h


def test_adaptive_recovers_from_a_slow_start():
    # the first passes of a process are slow (allocation, caches warming up): the k's timed then look expensive,
    # and a policy that never tries them again would settle below the best k for good
    calls = []
    def verify_cost(k):
        calls.append(k)
        return 1.0 + (8.0 if len(calls) <= 8 and k >= 2 else 0.0)
    ks = simulate(Adaptive(k_max=12), 0.8, 0.05, 0.0, steps=600, verify_cost=verify_cost)[-100:]
    settled = max(set(ks), key=ks.count)
    assert abs(settled - optimal_k(0.8, 0.05, 12)) <= 1, (settled, optimal_k(0.8, 0.05, 12))


def test_adaptive_times_a_one_token_pass_apart_from_the_rest():
    # a CPU: verifying one token is a matrix-vector product, two or more a matrix-matrix product costing 45% more.
    # With alpha = 0.3 no k recovers that (E(k) < 1.43), so plain decoding is best; a line through every k's
    # cost would place t_verify(0) well above 1 and keep guessing.
    ks = simulate(Adaptive(), 0.3, 0.0, 0.0, verify_cost=lambda k: 1.0 if k == 0 else 1.45 + 0.02 * k)
    assert ks[-100:].count(0) >= 90, ks[-100:]


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


def test_a_cold_policy_starts_from_its_drafters_good_constant_k_and_warms_up_next_to_it():
    """A cold engine is never far from a good fixed choice: the warm-up is the drafter's constant k and its two
    neighbours, no plain steps and no short chains."""
    for drafter, start in (("model", 3), ("eagle", 5), ("ngram", 8), ("adversary", 3), (None, 3)):
        policy = Adaptive.cold(start_k(drafter))
        ks = []
        for _ in policy.warmup:
            ks.append(policy.next_k())
            policy.update(ks[-1], 0, None, None)
        assert policy.start == start_k(drafter) == start and ks[0] == start
        assert set(ks) == {start - 1, start, min(start + 1, policy.k_max)} and ks.count(start) >= 3
    with pytest.raises(ValueError, match="start must be >= 0"):
        Adaptive(start=-1)


def test_a_cold_policy_loses_little_to_the_constant_k_it_starts_from():
    """Over the first 40 steps, with the costs of a CPU (c = 0.15, each verified token 5% of a pass) and alpha 0.8,
    the adaptive policy realises at least 0.95 of the expected tokens per second of its constant start k."""
    def rate(k):
        return expected_tokens(0.8, k) / (k * 0.15 + 1 + 0.05 * k)
    ks = simulate(Adaptive.cold(start_k("model")), 0.8, 0.15, 0.05, steps=40)
    realised = sum(expected_tokens(0.8, k) for k in ks) / sum(k * 0.15 + 1 + 0.05 * k for k in ks)
    assert realised >= 0.95 * rate(3), (ks, realised, rate(3))


def test_drafting_that_also_read_the_prompt_counts_for_acceptance_but_not_for_cost():
    policy = Adaptive()
    policy.update(3, 2, None, None)  # the request's first proposal: the drafter read the prompt
    assert policy.draft_passes == 0 and policy.draft_s == 0 and policy.judged_at == [1, 1, 1]
    policy.update(3, 3, 0.3, 1.0)
    assert policy.draft_passes == pytest.approx(3) and policy.draft_s == pytest.approx(0.3)


def test_acceptance_is_not_forgotten_while_the_policy_does_not_guess():
    policy = Adaptive()
    for _ in range(50):
        policy.update(2, 0, 0.1, 1.0)  # guesses that fail
    h = policy.acceptance()[0]
    for _ in range(200):
        policy.update(0, 0, 0.0, 1.0)  # plain steps: nothing learnt about acceptance
    assert policy.acceptance()[0] == h < 0.05


class Spy(Adaptive):
    """An adaptive policy that always guesses 3 tokens and remembers every update it heard."""

    def __post_init__(self):
        super().__post_init__()
        self.heard = []

    def next_k(self):
        return 3

    def update(self, k, accepted, draft_s, target_s):
        self.heard.append((k, draft_s, target_s))
        super().update(k, accepted, draft_s, target_s)


@pytest.mark.parametrize("speculate", ["model", "eagle"])
def test_the_engine_keeps_one_policy_across_requests_and_times_no_drafting_that_read_the_prompt(speculate):
    """The draft model reads the prompt in its first proposal of a request, the EAGLE head in its second step (the
    first has no features yet): neither is timed as drafting; every later proposal is, and the policy (one per
    drafter and sampling setting) goes on from one request to the next."""
    engine = Engine(make_pair(), cache_tokens=0)
    spy = engine.adaptive[(speculate, SamplingParams())] = Spy()
    for request in range(2):
        before = len(spy.heard)
        engine.generate(PROMPT[request:], 24, speculate=speculate, k="adaptive")
        heard = spy.heard[before:]
        drafting = [draft_s for k, draft_s, _ in heard if k > 0]
        assert drafting[0] is None and None not in drafting[1:] and len(drafting) >= 3
        assert heard[0][2] is None  # the first pass read the prompt: not timed either
    assert engine.adaptive[(speculate, SamplingParams())] is spy and spy.steps == len(spy.heard)
