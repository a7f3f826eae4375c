"""Leviathan et al.'s formulas against numbers worked out by hand."""

import numpy as np
import pytest
import torch

from teachspec.theory import alpha_from_distributions, expected_tokens, optimal_k, speedup, speedup_bound


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
