"""Choosing the tree from measurements: the best expected tokens per second among no guess, chains and trees."""

import pytest

from teachspec import Engine, load_pair
from teachspec.speculative.tree_policy import CANDIDATES, AdaptiveTree
from teachspec.theory import static_tree, tree_expected_tokens
from teachspec.workloads import docs_completion


def measured(h: list[list[float]], pass_s, level_s: float) -> AdaptiveTree:
    """A policy past its warm-up that has seen these acceptance rates and pass times many times over."""
    policy = AdaptiveTree(steps=17)  # past the warm-up, and not a probing step (every 16th)
    for d, row in enumerate(h):
        for r, rate in enumerate(row):
            policy.tried[(d, r)], policy.accepted[(d, r)] = 1000.0, 1000.0 * rate
    for shape in CANDIDATES:
        n = len(static_tree(shape))
        policy.passes[n] = [1000.0 * pass_s(n), 1000.0]
    policy.level_s = [1000.0 * level_s, 1000.0]
    return policy


def test_a_flat_pass_and_a_cheap_draft_choose_a_big_tree():
    policy = measured([[0.8, 0.5, 0.3]] * 6, pass_s=lambda n: 1.0, level_s=0.01)
    shape = policy.next_shape()
    assert len(static_tree(shape)) >= 10  # (3, 2, 2, 1) or wider: every node is free
    assert policy.tokens_per_s(shape) == max(policy.tokens_per_s(s) for s in CANDIDATES)


def test_a_pass_that_grows_with_its_nodes_chooses_a_chain_and_bad_guesses_choose_none():
    chain = measured([[0.9, 0.1]] * 6, pass_s=lambda n: 1.0 + 0.5 * (n - 1), level_s=0.05).next_shape()
    assert set(chain) == {1}  # one child a level: a second one would rarely pay for its share of the pass
    none = measured([[0.05, 0.05]] * 6, pass_s=lambda n: 1.0 + 0.2 * (n - 1), level_s=0.2).next_shape()
    assert none == ()


def test_the_expected_tokens_it_ranks_by_are_the_theorys():
    policy = measured([[0.7, 0.4]] * 6, pass_s=lambda n: 1.0, level_s=0.0)
    table = policy.acceptance()
    for shape in CANDIDATES:
        assert policy.tokens_per_s(shape) == pytest.approx(tree_expected_tokens(static_tree(shape), table))


def test_it_tries_the_runner_up_now_and_then():
    policy = measured([[0.8, 0.5]] * 6, pass_s=lambda n: 1.0 + 0.05 * n, level_s=0.01)
    ranked = sorted(CANDIDATES, key=policy.tokens_per_s, reverse=True)
    shapes = []
    for _ in range(2 * policy.probe_every):
        shapes.append(policy.next_shape())
        policy.steps += 1
    assert shapes.count(ranked[1]) == 2 and shapes.count(ranked[0]) == 2 * policy.probe_every - 2


def test_the_adaptive_tree_is_plain_decoding_when_greedy_and_learns_as_it_goes():
    pair = load_pair("tiny")
    engine = Engine(pair, cache_tokens=0)
    for request in docs_completion(n_prompts=4).requests:
        plain = engine.generate(request.prompt, 32, speculate=None).tokens
        assert engine.generate(request.prompt, 32, speculate="model", tree="adaptive").tokens == plain
    policy = next(p for key, p in engine.adaptive.items() if key[0] == "tree")
    assert policy.steps > len(policy.warmup) and policy.last in CANDIDATES
    assert sum(policy.tried.values()) > 20 and len(policy.passes) >= 3
