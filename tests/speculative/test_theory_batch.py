"""The speedup under a batch (theory.batch_speedup) against Theorem 3.8, against numbers worked out by hand, and
against a brute-force search over k."""

import pytest

from teachspec.theory import batch_optimal_k, batch_speedup, expected_tokens, optimal_k, speedup


def flat(n):
    return 2.5  # a pass that costs the same whatever it verifies: Theorem 3.8's assumption


def knee(at):
    """A roofline pass: flat up to `at` positions, then growing with them (arithmetic-bound)."""
    return lambda n: max(1.0, n / at)


@pytest.mark.parametrize("b", [1, 4, 64])
@pytest.mark.parametrize("alpha, c", [(0.8, 0.05), (0.6, 0.2), (0.3, 0.4)])
def test_a_flat_pass_is_theorem_3_8_at_any_batch(alpha, c, b):
    for k in range(9):
        assert batch_speedup(alpha, k, c, flat, b) == pytest.approx(speedup(alpha, k, c), rel=1e-12)
    assert batch_optimal_k(alpha, c, flat, b) == optimal_k(alpha, c)


def test_worked_example_past_the_knee():
    # knee at 16 positions, b = 8, k = 3: the pass over 32 positions costs 2 passes over 8 (which cost 1)
    cost = knee(16)
    assert batch_speedup(0.8, 3, 0.1, cost, 8) == pytest.approx(expected_tokens(0.8, 3) / (0.3 + 2.0), rel=1e-12)
    assert expected_tokens(0.8, 3) == pytest.approx(2.952, rel=1e-12)  # 1 + 0.8 + 0.64 + 0.512
    # b = 1, k = 3: 4 positions, still under the knee: Theorem 3.8
    assert batch_speedup(0.8, 3, 0.1, cost, 1) == pytest.approx(speedup(0.8, 3, 0.1), rel=1e-12)
    # deep past the knee every position is paid for: b = 64, k = 1 costs 2 passes, plus c
    assert batch_speedup(0.8, 1, 0.1, cost, 64) == pytest.approx(1.8 / 2.1, rel=1e-12)


def test_the_best_k_falls_as_the_batch_grows():
    cost = knee(64)
    best = [batch_optimal_k(0.8, 0.05, cost, b) for b in (1, 2, 4, 8, 16, 32, 64, 128)]
    assert best == sorted(best, reverse=True) and best[0] > 0 and best[-1] == 0
    for b in (1, 8, 128):  # against a search by hand; ties go to the shorter draft
        speedups = [batch_speedup(0.8, k, 0.05, cost, b) for k in range(17)]
        assert batch_optimal_k(0.8, 0.05, cost, b) == speedups.index(max(speedups))


def test_k_0_is_plain_decoding():
    assert batch_speedup(0.9, 0, 0.3, knee(4), 32) == 1.0
    assert batch_optimal_k(0.1, 0.5, flat, 1) == 0  # alpha <= c: no k pays even on a flat curve


@pytest.mark.parametrize("call, match", [
    (lambda: batch_speedup(0.8, 2, 0.1, flat, 0), "b must be"),
    (lambda: batch_speedup(0.8, 2, 0.1, flat, True), "b must be"),
    (lambda: batch_speedup(0.8, -1, 0.1, flat, 1), "k must be"),
    (lambda: batch_speedup(1.2, 2, 0.1, flat, 1), "alpha must be"),
    (lambda: batch_speedup(0.8, 2, -0.1, flat, 1), "c must be"),
    (lambda: batch_speedup(0.8, 2, [0.1, 0.2], flat, 1), "c must be one number"),
    (lambda: batch_speedup(0.8, 2, 0.1, 3.0, 1), "pass_cost must be a function"),
    (lambda: batch_speedup(0.8, 2, 0.1, lambda n: 0.0, 1), r"pass_cost\(1\) must return"),
    (lambda: batch_speedup(0.8, 2, 0.1, lambda n: float("nan"), 1), "must return a finite time"),
    (lambda: batch_optimal_k(0.8, 0.1, flat, 1, k_max=-1), "k_max must be"),
])
def test_bad_arguments_are_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()
