"""The speedup under a batch (theory.batch_speedup) against Theorem 3.8, against numbers worked out by hand, and
against a brute-force search over k; where it stops paying (theory.batch_crossover) against a brute-force search
over b."""

import pytest

from teachspec.theory import batch_c, batch_crossover, batch_optimal_k, batch_speedup, expected_tokens, optimal_k, \
    speedup


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


# -- where speculation stops paying (theory.batch_crossover) -------------------------------------------------------

def brute_crossover(alpha, c, cost, ks, batches, draft=None):
    """The first batch at which every k of ks loses, by the formula written out again (not batch_speedup)."""
    for b in batches:
        c_b = c if draft is None else c * (draft(b) / draft(1)) / (cost(b) / cost(1))
        speedups = [sum(alpha**i for i in range(k + 1)) / (k * c_b + cost(b * (k + 1)) / cost(b)) for k in ks]
        if max(speedups) < 1:
            return b
    return None


@pytest.mark.parametrize("alpha", [0.3, 0.6, 0.8, 0.95])
@pytest.mark.parametrize("c", [0.0, 0.05, 0.2])
@pytest.mark.parametrize("at", [1, 8, 64])
def test_the_crossover_is_the_first_losing_batch_by_brute_force(alpha, c, at):
    cost = knee(at)
    for k in (1, 2, 3, 6):
        assert batch_crossover(alpha, c, cost, k=k, b_max=300) == brute_crossover(alpha, c, cost, [k], range(1, 301))
    assert batch_crossover(alpha, c, cost, k_max=6, b_max=300) == brute_crossover(alpha, c, cost, range(1, 7),
                                                                                  range(1, 301))
    grid = [1, 2, 4, 8, 16, 32, 64, 128]
    assert batch_crossover(alpha, c, cost, k=3, batches=grid) == brute_crossover(alpha, c, cost, [3], grid)


def test_a_draft_that_grows_with_the_batch_by_brute_force():
    cost, draft = knee(32), (lambda n: 1.0 + n / 200)  # the draft's pass grows slowly: c_b rises past 32, then falls
    for k in (1, 3, 5):
        assert batch_crossover(0.8, 0.1, cost, k=k, b_max=256, draft_cost=draft) == \
            brute_crossover(0.8, 0.1, cost, [k], range(1, 257), draft)


def test_worked_crossovers():
    cost = knee(64)
    # k = 3: b (k + 1) = 4b positions cost 4b / 64 plain passes over b while b <= 64; 0.15 + b / 16 > 2.952 first
    # at b = 45 (44.8 exactly)
    assert batch_crossover(0.8, 0.05, cost, k=3) == 45
    assert batch_speedup(0.8, 3, 0.05, cost, 44) >= 1 > batch_speedup(0.8, 3, 0.05, cost, 45)
    assert batch_crossover(0.8, 0.05, cost) == 57  # the best k holds on longer: k = 1 loses last
    assert batch_crossover(0.8, 0.05, cost, k=3, b_max=45) == 45  # b_max itself is looked at
    assert batch_crossover(0.8, 0.05, cost, k=3, b_max=44) is None
    assert batch_crossover(0.8, 0.05, cost, k=3, batches=[1, 2, 4, 8, 16, 32, 64, 128]) == 64  # the grid's next
    assert batch_crossover(0.8, 0.05, flat, k=3) is None  # Theorem 3.8's flat pass: it always pays
    assert batch_crossover(0.1, 0.5, flat, k=1) == 1  # alpha <= c: even one request loses
    assert batch_crossover(0.8, 0.05, cost, k=3, batches=[128, 8, 64, 8]) == 64  # looked at in increasing order


def test_the_first_losing_batch_even_when_a_later_one_pays_again():
    bumpy = {1: 1.0, 2: 1.0, 4: 1.0, 8: 3.5, 16: 1.5, 32: 3.0, 64: 2.5, 128: 3.5, 256: 5.0}.get  # 2 -> 8: 3.5x
    assert batch_speedup(0.8, 3, 0.05, bumpy, 4) > 1 and batch_speedup(0.8, 3, 0.05, bumpy, 8) > 1
    assert batch_speedup(0.8, 3, 0.05, bumpy, 2) < 1
    assert batch_crossover(0.8, 0.05, bumpy, k=3, batches=[1, 2, 4, 8]) == 2


def test_batch_c_scales_c_by_both_curves():
    cost, draft = knee(4), (lambda n: 2.0 if n > 8 else 1.0)
    assert batch_c(0.2, 1, cost, draft) == pytest.approx(0.2)
    assert batch_c(0.2, 16, cost, draft) == pytest.approx(0.2 * 2.0 / 4.0)  # draft x2, target x4
    # batch_speedup with draft_cost is batch_speedup with that c_b
    for b in (1, 4, 16, 64):
        assert batch_speedup(0.8, 3, 0.2, cost, b, draft) == pytest.approx(
            batch_speedup(0.8, 3, batch_c(0.2, b, cost, draft), cost, b), rel=1e-12)
    # a draft that grows exactly as the target does keeps c
    assert batch_c(0.2, 32, cost, lambda n: 0.1 * cost(n)) == pytest.approx(0.2)
    assert batch_optimal_k(0.8, 0.2, cost, 16, 8, draft) == batch_optimal_k(0.8, 0.2 * 0.5, cost, 16, 8)


class Counted:
    """A pass-cost curve that counts how often it is asked: a refused call must not have asked at all."""

    def __init__(self):
        self.calls = 0

    def __call__(self, n):
        self.calls += 1
        return 1.0


@pytest.mark.parametrize("kwargs, match", [
    (dict(k=0), "k must be an int >= 1"),
    (dict(k=True), "k must be an int >= 1"),
    (dict(k=2.0), "k must be an int >= 1"),
    (dict(k_max=0), "k_max must be >= 1 when k is None"),
    (dict(k_max=-1), "k_max must be an int >= 0"),
    (dict(batches=[]), "batches must be a non-empty sequence"),
    (dict(batches="1248"), "batches must be a non-empty sequence"),
    (dict(batches=[1, 0, 4]), r"batches\[1\] must be an int >= 1"),
    (dict(batches=[1, 2.5]), r"batches\[1\] must be an int >= 1"),
    (dict(batches=[1, 2], b_max=8), "give batches or b_max, not both"),
    (dict(b_max=0), "b_max must be an int >= 1"),
    (dict(draft_cost=2.0), "draft_cost must be a function of the positions in a draft pass"),
    (dict(alpha=1.5), "alpha must be in"),
    (dict(alpha=[0.5]), "alpha must be one number"),
    (dict(c=-0.1), "c must be a finite number >= 0"),
    (dict(pass_cost=None), "pass_cost must be a function"),
])
def test_bad_crossover_arguments_are_refused_before_any_pass_cost_is_asked(kwargs, match):
    cost = Counted()
    args = dict(alpha=0.8, c=0.1, pass_cost=cost) | {name: kwargs.pop(name) for name in ("alpha", "c", "pass_cost")
                                                        if name in kwargs}
    with pytest.raises(ValueError, match=match):
        batch_crossover(**args, **kwargs)
    assert cost.calls == 0


def test_a_curve_that_answers_badly_is_named():
    with pytest.raises(ValueError, match=r"draft_cost\(1\) must return a finite time > 0, got 0"):
        batch_crossover(0.8, 0.1, flat, k=1, draft_cost=lambda n: 0)
    with pytest.raises(ValueError, match=r"pass_cost\(2\) must return a finite time > 0"):
        batch_crossover(0.8, 0.1, lambda n: 1.0 if n == 1 else float("inf"), k=1)
    with pytest.raises(ValueError, match="alpha must be in"):
        batch_speedup(1.5, 0, 0.1, flat, 1)  # k = 0 is plain decoding, but a bad alpha is still refused
