"""Leviathan et al.'s formulas against numbers worked out by hand; the tree formulas against them, against a
simulation of their own model, and against the multi-draft rule itself."""

import math
import random

import numpy as np
import pytest
import torch

from teachspec.speculative import residual
from teachspec.speculative.tree import TokenTree, verify_tree
from teachspec.theory import (
    alpha_from_distributions,
    expected_tokens,
    optimal_k,
    speedup,
    speedup_bound,
    static_tree,
    tree_expected_tokens,
    tree_tokens_per_second,
)


def test_worked_example():
    # (1 - 0.8^5) / 0.2 = (1 - 0.32768) / 0.2; a step costs 4 * 0.05 + 1 = 1.2 target passes
    assert expected_tokens(0.8, 4) == pytest.approx(3.3616, abs=1e-12)
    assert speedup(0.8, 4, 0.05) == pytest.approx(3.3616 / 1.2, abs=1e-12)  # 2.80x
    assert optimal_k(0.8, 0.05) == 8
    # (1 - 0.8^9) / 0.2 / 1.4 = 4.32891136 / 1.4
    assert speedup(0.8, 8, 0.05) == pytest.approx(4.32891136 / 1.4, abs=1e-12)  # 3.09x
    assert speedup(0.8, 7, 0.05) < speedup(0.8, 8, 0.05) > speedup(0.8, 9, 0.05)


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.5, 0.9, 0.99])
@pytest.mark.parametrize("k", [0, 1, 2, 7])
def test_expected_tokens_is_the_closed_form(alpha, k):
    assert expected_tokens(alpha, k) == pytest.approx((1 - alpha ** (k + 1)) / (1 - alpha), rel=1e-12)


def test_limits():
    assert expected_tokens(1.0, 4) == 5.0  # every draft accepted, plus the bonus
    assert expected_tokens(1 - 1e-12, 4) == pytest.approx(5.0)  # continuous at alpha = 1
    assert expected_tokens(0.0, 4) == 1.0  # every first draft rejected: one resampled token
    assert expected_tokens(0.5, 2) == 1.75  # 1 + 1/2 + 1/4
    assert expected_tokens(0.3, 0) == 1.0 and speedup(0.3, 0, 0.5) == 1.0  # k = 0 is plain decoding
    assert speedup(1.0, 3, 0.0) == 4.0  # a free, perfect drafter


def test_optimal_k_edges():
    assert optimal_k(0.1, 0.5) == 0  # drafting never pays: plain decoding
    assert optimal_k(1.0, 0.0) == 16 and optimal_k(1.0, 0.0, k_max=5) == 5
    assert optimal_k(0.0, 0.0) == 0  # every k ties at 1x: the shortest draft wins
    for alpha, c in [(0.6, 0.1), (0.9, 0.02), (0.75, 0.3)]:
        best = max(range(17), key=lambda k: speedup(alpha, k, c))
        assert optimal_k(alpha, c) == best


def test_speedup_bound():
    assert speedup_bound(0.8, 0.05) == pytest.approx(1.8 / 1.05, abs=1e-12)
    for alpha, c in [(0.8, 0.05), (0.5, 0.4), (0.95, 0.6)]:
        assert speedup_bound(alpha, c) == pytest.approx(speedup(alpha, 1, c))  # it is the k = 1 speedup
        assert 1 < speedup_bound(alpha, c) <= speedup(alpha, optimal_k(alpha, c), c)  # alpha > c
    assert speedup_bound(0.3, 0.5) < 1  # alpha <= c: no promise


def test_alpha_from_distributions():
    p = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5], [1.0, 0.0, 0.0]])
    q = torch.tensor([[0.25, 0.25, 0.5], [0.2, 0.3, 0.5], [0.0, 0.5, 0.5]])
    torch.testing.assert_close(alpha_from_distributions(p, q), torch.tensor([0.5, 1.0, 0.0]))
    with pytest.raises(ValueError, match="p and q must be tensors of the same shape"):
        alpha_from_distributions(p, q[:, :2])


def test_numpy_arrays_work_elementwise():
    np.testing.assert_allclose(expected_tokens(np.array([0.0, 0.5, 1.0]), 2), [1.0, 1.75, 3.0])
    np.testing.assert_allclose(speedup(np.array([0.8, 0.8]), 4, np.array([0.05, 0.0])), [3.3616 / 1.2, 3.3616])
    np.testing.assert_array_equal(optimal_k(np.array([0.01, 0.8, 1.0]), 0.05), [0, 8, 16])
    assert isinstance(expected_tokens(0.5, 2), float) and isinstance(optimal_k(0.5, 0.1), int)


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: expected_tokens(-0.1, 2), "alpha"),
        (lambda: expected_tokens(1.1, 2), "alpha"),
        (lambda: expected_tokens(float("nan"), 2), "alpha"),
        (lambda: expected_tokens("high", 2), "alpha"),
        (lambda: expected_tokens(True, 2), "alpha"),
        (lambda: expected_tokens(np.array([0.5, 2.0]), 2), "alpha"),
        (lambda: expected_tokens(0.5, -1), "k"),
        (lambda: expected_tokens(0.5, 1.5), "k"),
        (lambda: expected_tokens(0.5, True), "k"),
        (lambda: speedup(0.5, 2, -0.1), "c"),
        (lambda: speedup(0.5, 2, float("inf")), "c"),
        (lambda: speedup_bound(0.5, float("nan")), "c"),
        (lambda: optimal_k(0.5, 0.1, k_max=-1), "k_max"),
        (lambda: optimal_k(1.5, 0.1), "alpha"),
    ],
)
def test_errors_name_the_parameter(call, name):
    with pytest.raises(ValueError, match=rf"^{name} must be"):
        call()


# -- trees -------------------------------------------------------------------------------------------------------

def test_static_tree_shapes():
    assert static_tree(()) == (-1,)  # no guess at all
    assert static_tree((1, 1, 1)) == (-1, 0, 1, 2)  # a chain of 3
    assert static_tree((3, 2)) == (-1, 0, 0, 0, 1, 1, 2, 2, 3, 3)  # breadth first
    assert len(static_tree((3, 2, 2, 1))) == 1 + 3 + 6 + 12 + 12


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.8, 0.99, 1.0])
@pytest.mark.parametrize("k", [0, 1, 4, 9])
def test_a_chain_is_leviathans_formula(alpha, k):
    chain = static_tree((1,) * k)
    assert tree_expected_tokens(chain, alpha) == pytest.approx(expected_tokens(alpha, k), rel=1e-12, abs=0)
    if alpha < 1:
        assert tree_expected_tokens(chain, alpha) == pytest.approx((1 - alpha ** (k + 1)) / (1 - alpha), rel=1e-12)
    # Theorem 3.8: a pass of constant cost, k draft passes of c each
    ratio = tree_tokens_per_second(chain, alpha, lambda n: 1.0, draft_s=k * 0.05) / \
        tree_tokens_per_second(static_tree(()), alpha, lambda n: 1.0)
    assert ratio == pytest.approx(speedup(alpha, k, 0.05), rel=1e-12)


def test_a_chain_with_per_depth_rates():
    """h per depth is the adaptive policy's E(k) = 1 + h_1 + h_1 h_2 + ..."""
    assert tree_expected_tokens(static_tree((1, 1, 1)), [0.9, 0.5, 0.2]) == pytest.approx(1 + 0.9 + 0.45 + 0.09)
    assert tree_expected_tokens(static_tree((1, 1, 1)), [0.9, 0.5]) == pytest.approx(1 + 0.9 + 0.45 + 0.225)


def test_hand_worked_trees():
    # two children, h = 0.6 for the first and 0.5 for the second: 1 + 0.6 + 0.4 * 0.5
    assert tree_expected_tokens((-1, 0, 0), [[0.6, 0.5]]) == pytest.approx(1.8, abs=1e-15)
    # and a child under the first one (depth 1, rank 0): + 0.6 * 0.6
    assert tree_expected_tokens((-1, 0, 0, 1), [[0.6, 0.5]]) == pytest.approx(2.16, abs=1e-15)
    # with its own row for depth 1: + 0.6 * 0.9
    assert tree_expected_tokens((-1, 0, 0, 1), [[0.6, 0.5], 0.9]) == pytest.approx(2.34, abs=1e-15)
    # a third sibling reuses the last rank's rate: + 0.4 * 0.5 * 0.5
    assert tree_expected_tokens((-1, 0, 0, 0), [[0.6, 0.5]]) == pytest.approx(1.9, abs=1e-15)
    assert tree_expected_tokens(static_tree((5, 5)), 1.0) == 3.0  # the first child always accepted: a chain of 2
    assert tree_expected_tokens(static_tree((5, 5)), 0.0) == 1.0
    assert tree_expected_tokens(static_tree((3, 2)), np.array([[0.6, 0.5, 0.4], [0.7, 0.2, 0.2]])) == \
        tree_expected_tokens(static_tree((3, 2)), [[0.6, 0.5, 0.4], [0.7, 0.2]])  # a measured table


def test_more_branches_never_expect_fewer_tokens():
    rng = random.Random(0)
    for _ in range(200):
        table = [[rng.random() for _ in range(3)] for _ in range(3)]
        shape = [rng.randint(1, 3) for _ in range(rng.randint(0, 3))]
        expected = tree_expected_tokens(static_tree(shape), table)
        for d in range(len(shape)):
            wider = shape[:d] + [shape[d] + 1] + shape[d + 1:]
            assert tree_expected_tokens(static_tree(wider), table) > expected  # every h in (0, 1)
        assert tree_expected_tokens(static_tree(shape + [1]), table) > expected


def simulate(tree: TokenTree, table: list[list[float]], rng: random.Random) -> int:
    """One pass under the model: at each node try the children in order, each accepted with its h."""
    node, emitted = 0, 1
    while True:
        row = table[min(tree.depth[node], len(table) - 1)]
        for rank, child in enumerate(tree.children[node]):
            if rng.random() < row[min(rank, len(row) - 1)]:
                node, emitted = child, emitted + 1
                break
        else:
            return emitted


def test_matches_a_monte_carlo_of_its_model():
    parents, table = (-1, 0, 0, 0, 1, 1, 2, 4, 4, 7), [[0.5, 0.3, 0.2], [0.7, 0.4], [0.6]]
    rng, n = random.Random(1), 40_000
    tree = TokenTree(parents, (0,) * len(parents))
    draws = [simulate(tree, table, rng) for _ in range(n)]
    mean, sd = sum(draws) / n, np.std(draws)
    assert abs(mean - tree_expected_tokens(parents, table)) < 4 * sd / math.sqrt(n)


def test_is_exact_for_the_multi_draft_rule_when_p_and_q_do_not_change():
    """The same p and q at every node, children drawn independently: the rank-r child is accepted with chance
    sum(min(p_r, q)), p_r the residual after r rejections, whichever tokens were rejected. verify_tree's mean
    output length must then match the formula."""
    g = torch.Generator().manual_seed(2)
    p = torch.softmax(2 * torch.randn(6, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(2 * torch.randn(6, generator=g, dtype=torch.float64), -1)
    h, p_r = [], p
    for _ in range(3):
        h.append(torch.minimum(p_r, q).sum().item())
        p_r = residual(p_r, q)
    parents = static_tree((3, 2, 1))
    predicted = tree_expected_tokens(parents, [h])
    n, lengths = 4000, []
    for _ in range(n):
        tokens = [0] + torch.multinomial(q, len(parents) - 1, replacement=True, generator=g).tolist()
        verdict = verify_tree(p.expand(len(parents), 6), q.expand(len(parents), 6), TokenTree(parents, tokens), g)
        lengths.append(len(verdict.tokens))
    assert abs(np.mean(lengths) - predicted) < 4 * np.std(lengths) / math.sqrt(n)
    assert tree_expected_tokens(static_tree((1, 1, 1)), h[0]) < predicted  # the siblings earn their place


def test_tokens_per_second_picks_by_the_cost_of_a_pass():
    """A GPU's pass costs about the same for 1 or 30 nodes; on a CPU it grows with them, and the chain or no guess
    at all wins."""
    table = [[0.6, 0.3, 0.2]]
    candidates = {shape: static_tree(shape) for shape in [(), (1,), (1, 1, 1), (3, 2), (3, 2, 2, 1)]}

    def best(pass_s):
        return max(candidates, key=lambda shape: tree_tokens_per_second(candidates[shape], table, pass_s))

    assert best(lambda n: 1.0 + 0.002 * n) == (3, 2, 2, 1)
    assert best(lambda n: 1.0 + 0.1 * n) == (1, 1, 1)
    assert best(lambda n: 0.2 * n) == ()
    assert tree_tokens_per_second(static_tree(()), 0.9, lambda n: 0.5) == 2.0  # plain decoding: 1 / pass_s(1)
    assert tree_tokens_per_second(static_tree((1,)), 0.5, lambda n: 1.0, draft_s=0.5) == 1.0  # 1.5 / 1.5


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: static_tree((2, 0)), r"branching\[1\] must be an int >= 1 .* got 0"),
        (lambda: static_tree((2, True)), r"branching\[1\] must be an int >= 1 .* got True"),
        (lambda: static_tree("32"), "branching must be a sequence of ints >= 1, one per depth, got '32'"),
        (lambda: tree_expected_tokens((0, 0), 0.5), r"parents must be a sequence starting with -1 .* got \(0, 0\)"),
        (lambda: tree_expected_tokens((), 0.5), "parents must be a sequence starting with -1"),
        (lambda: tree_expected_tokens((-1, 1), 0.5), r"parents\[1\] must be a node numbered before it, .* got 1"),
        (lambda: tree_expected_tokens((-1, 0.0), 0.5), r"parents\[1\] must be .* got 0.0"),
        (lambda: tree_expected_tokens((-1, 0), 1.5), r"acceptance\[0\]\[0\] must be a number in \[0, 1\], got 1.5"),
        (lambda: tree_expected_tokens((-1, 0), [[0.5, float("nan")]]), r"acceptance\[0\]\[1\] must be"),
        (lambda: tree_expected_tokens((-1, 0), []), r"acceptance must be a number in \[0, 1\] or a non-empty list"),
        (lambda: tree_expected_tokens((-1, 0), "high"), "acceptance must be"),
        (lambda: tree_expected_tokens((-1, 0), [0.5, []]), r"acceptance\[1\] must be a number in \[0, 1\] or"),
        (lambda: tree_expected_tokens((-1, 0), True), r"acceptance\[0\]\[0\] must be .* got True"),
        (lambda: tree_tokens_per_second((-1, 0), 0.5, lambda n: 0.0), r"pass_s\(2\) must return .* > 0, got 0.0"),
        (lambda: tree_tokens_per_second((-1,), 0.5, lambda n: float("inf")), r"pass_s\(1\) must return"),
        (lambda: tree_tokens_per_second((-1, 0), 0.5, lambda n: 1.0, draft_s=-1), "draft_s must be .* >= 0, got -1"),
    ],
)
def test_tree_errors_name_the_parameter(call, match):
    with pytest.raises(ValueError, match=match):
        call()
