"""The acceptance rule, exactly: enumeration in float64 (T1) and hand-checked cases of `verify` itself.

T1 walks every draft a toy draft model can propose (weighted by its autoregressive probability) and every
accept/reject branch of the rule, built from the same `acceptance_probability` and `residual` that `verify_batch`
uses (and `verify` agrees with it token for token, tested below).
Repeating speculation steps until m tokens are out must give every m-token sequence exactly the probability the
target alone gives it, for m = 1 .. k+1. (The toy models and the enumeration: tests/helpers/exact.py.)
"""

import math

import pytest
import torch

from helpers.exact import F64, PROMPT, ToyLM, make_table, max_error, step_outcomes
from teachspec.sampling import SamplingParams, sample, warp
from teachspec.speculative import (
    acceptance_probability,
    residual,
    verify,
    verify_batch,
)

CASES = {
    "generic, zeros in both": (ToyLM(make_table(0, zeros=0.3)), ToyLM(make_table(1, zeros=0.3))),
    "p = q": (ToyLM(make_table(2, zeros=0.3)), ToyLM(make_table(2, zeros=0.3))),
    "disjoint supports": (ToyLM(make_table(3, support=range(0, 3))), ToyLM(make_table(4, support=range(3, 5)))),
    "one-hot p": (ToyLM(make_table(5, one_hot=True)), ToyLM(make_table(6))),
    "one-hot q": (ToyLM(make_table(7)), ToyLM(make_table(8, one_hot=True))),
    "q = 0 where p > 0": (ToyLM(make_table(9)), ToyLM(make_table(10, zeros=0.6))),
    "q = None, point-mass drafts": (ToyLM(make_table(11, zeros=0.3)), ToyLM(make_table(12), certain=True)),
}


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("case", CASES)
def test_T1_every_prefix_has_the_target_probability(case, k):
    target, drafter = CASES[case]
    assert max_error(target, drafter, k) <= 1e-12


def test_T1_k0_is_plain_decoding():
    target, drafter = CASES["generic, zeros in both"]
    assert max_error(target, drafter, 0) <= 1e-12


def test_T1_one_step_is_a_distribution():
    target, drafter = CASES["generic, zeros in both"]
    assert math.isclose(sum(step_outcomes(target, drafter, PROMPT, 3).values()), 1.0, abs_tol=1e-12)


def test_T1_enumeration_catches_a_wrong_resample():
    target, drafter = CASES["generic, zeros in both"]
    assert max_error(target, drafter, 2, resample=lambda p, q: p) > 1e-3


# -- the building blocks ---------------------------------------------------------------------------------------

def t(*values):
    return torch.tensor(values, dtype=F64)


def test_acceptance_probability_hand_values():
    p = t([0.5, 0.2, 0.3, 0.0], [0.5, 0.2, 0.3, 0.0], [0.5, 0.2, 0.3, 0.0], [0.5, 0.2, 0.3, 0.0])
    q = t([0.25, 0.25, 0.25, 0.25], [0.25, 0.25, 0.25, 0.25], [0.0, 0.5, 0.5, 0.0], [0.25, 0.25, 0.25, 0.25])
    x = torch.tensor([0, 1, 0, 3])
    # ratio 2 -> 1; 0.2/0.25; q(x) = 0 -> rejected; p(x) = 0 -> 0
    torch.testing.assert_close(acceptance_probability(p, q, x), t(1.0, 0.8, 0.0, 0.0), rtol=0, atol=1e-15)


def test_residual_hand_values_and_zero_mass_fallback():
    p, q = t(0.5, 0.2, 0.3, 0.0), t(0.25, 0.25, 0.25, 0.25)
    torch.testing.assert_close(residual(p, q), t(0.25, 0.0, 0.05, 0.0) / 0.3, rtol=0, atol=1e-15)
    torch.testing.assert_close(residual(p, p), p)  # p == q: nothing left over, fall back to p
    torch.testing.assert_close(residual(p, torch.zeros(4, dtype=F64)), p)


# -- verify, case by case ----------------------------------------------------------------------------------------

def uniforms(seed: int, k: int) -> list[float]:
    return torch.rand(k, generator=torch.Generator().manual_seed(seed), dtype=F64).tolist()


def test_all_accepted_then_bonus():
    p = t([0.1, 0.1, 0.7, 0.1], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0])
    q = t([0.1, 0.1, 0.5, 0.3], [0.25, 0.25, 0.25, 0.25])
    verdict = verify(p, q, torch.tensor([2, 1]), torch.Generator().manual_seed(0))
    assert (verdict.accepted, verdict.tokens, verdict.bonus, verdict.resampled) == (2, [2, 1, 3], 3, None)
    first, second = verdict.positions
    assert (first.i, first.token, first.decision, first.residual, first.resampled) == (0, 2, "accept", None, None)
    assert first.p == pytest.approx(0.7) and first.q == pytest.approx(0.5) and first.ratio == pytest.approx(1.4)
    assert (second.i, second.token, second.p, second.q, second.ratio) == (1, 1, 1.0, 0.25, 4.0)
    assert [first.u, second.u] == uniforms(0, 2)  # one uniform per position, drawn in order


def test_reject_at_position_1_resamples_from_residual():
    p = t([0.1, 0.1, 0.7, 0.1], [0.0, 0.5, 0.5, 0.0], [0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0])
    q = t([0.1, 0.1, 0.5, 0.3], [0.5, 0.5, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25])
    verdict = verify(p, q, torch.tensor([2, 0, 1]), torch.Generator().manual_seed(1))
    # p_1(0) = 0: certain rejection; max(0, p_1 - q_1) = [0, 0, 0.5, 0] leaves only token 2
    assert (verdict.accepted, verdict.tokens, verdict.bonus, verdict.resampled) == (1, [2, 2], None, 2)
    assert [r.decision for r in verdict.positions] == ["accept", "reject"]  # position 2 is never examined
    rejected = verdict.positions[1]
    assert (rejected.token, rejected.p, rejected.q, rejected.ratio, rejected.resampled) == (0, 0.0, 0.5, 0.0, 2)
    torch.testing.assert_close(rejected.residual, t(0.0, 0.0, 1.0, 0.0))


def test_rejected_position_records_the_normalised_residual():
    p, q = t([0.0, 0.5, 0.5, 0.0], [0.25, 0.25, 0.25, 0.25]), t([0.6, 0.4, 0.0, 0.0])
    verdict = verify(p, q, torch.tensor([0]), torch.Generator().manual_seed(2))
    torch.testing.assert_close(verdict.positions[0].residual, t(0.0, 1 / 6, 5 / 6, 0.0), rtol=0, atol=1e-15)
    assert verdict.resampled in (1, 2) and verdict.tokens == [verdict.resampled]


def test_draft_with_q_zero_is_rejected_with_infinite_ratio():
    p, q = t([0.0, 1.0, 0.0], [1.0, 0.0, 0.0]), t([1.0, 0.0, 0.0])
    verdict = verify(p, q, torch.tensor([1]), torch.Generator().manual_seed(0))
    record = verdict.positions[0]
    assert (record.decision, record.ratio, verdict.accepted) == ("reject", math.inf, 0)
    assert verdict.tokens == [1]  # the residual max(0, p - q) is all on token 1


def test_k0_samples_the_bonus_from_p0_like_plain_decoding():
    p0 = t(0.1, 0.2, 0.3, 0.4)
    empty = torch.zeros(0, dtype=torch.long)
    for seed in range(20):
        verdict = verify(p0[None], None, empty, torch.Generator().manual_seed(seed))
        plain = sample(p0, torch.Generator().manual_seed(seed)).item()
        assert (verdict.accepted, verdict.tokens, verdict.bonus, verdict.positions) == (0, [plain], plain, [])
    assert verify(p0[None], torch.zeros(0, 4, dtype=F64), empty, None).accepted == 0


def test_point_mass_draft_accepts_with_probability_p():
    p = t([0.0, 0.0, 0.0, 1.0], [0.5, 0.0, 0.5, 0.0], [1.0, 0.0, 0.0, 0.0])
    verdict = verify(p, None, torch.tensor([3, 1]), torch.Generator().manual_seed(0))
    assert [(r.q, r.ratio, r.decision) for r in verdict.positions] == [(1.0, 1.0, "accept"), (1.0, 0.0, "reject")]
    torch.testing.assert_close(verdict.positions[1].residual, t(0.5, 0.0, 0.5, 0.0))  # p without the draft
    # acceptance frequency of a point-mass draft is p(x)
    p = t([0.3, 0.7], [0.5, 0.5]).expand(20_000, 2, 2)
    accepted, _ = verify_batch(p, None, torch.zeros(20_000, 1, dtype=torch.long), torch.Generator().manual_seed(1))
    assert abs(accepted.double().mean().item() - 0.3) < 4 * math.sqrt(0.3 * 0.7 / 20_000)


def test_decisions_follow_u_and_ratio():
    g = torch.Generator().manual_seed(3)
    for seed in range(100):
        p = torch.rand(4, 6, generator=g, dtype=F64) ** 2
        q = torch.rand(3, 6, generator=g, dtype=F64) ** 2
        p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
        draft = torch.randint(0, 6, (3,), generator=g)
        verdict = verify(p, q, draft, torch.Generator().manual_seed(seed))
        for record in verdict.positions:
            assert (record.decision == "accept") == (record.q > 0 and record.u < min(1.0, record.ratio))
        assert len(verdict.tokens) == verdict.accepted + 1
        assert len(verdict.positions) == verdict.accepted + (verdict.bonus is None)


def test_greedy_is_the_temperature_zero_case():
    g = torch.Generator().manual_seed(4)
    greedy = SamplingParams(temperature=0.0)
    for seed in range(30):
        target_logits, draft_logits = torch.randn(4, 3, generator=g), torch.randn(3, 3, generator=g)
        draft = draft_logits.argmax(-1)
        verdict = verify(warp(target_logits, greedy), warp(draft_logits, greedy), draft, None)
        target_argmax = target_logits.argmax(-1).tolist()
        matches = (draft == target_logits[:3].argmax(-1)).long().cumprod(0).sum().item()
        assert verdict.accepted == matches
        assert verdict.tokens == target_argmax[: matches + 1]


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("with_q", [True, False])
@pytest.mark.parametrize("k", [0, 1, 4])
def test_verify_and_verify_batch_agree_on_one_row(dtype, with_q, k):
    g = torch.Generator().manual_seed(5)
    for seed in range(15):
        p = torch.softmax(2 * torch.randn(k + 1, 6, generator=g), -1).to(dtype)
        q = torch.softmax(2 * torch.randn(k, 6, generator=g), -1).to(dtype)
        draft = sample(q, g) if k else torch.zeros(0, dtype=torch.long)
        q = q if with_q else None
        verdict = verify(p, q, draft, torch.Generator().manual_seed(seed))
        accepted, tokens = verify_batch(p[None], None if q is None else q[None], draft[None],
                                        torch.Generator().manual_seed(seed))
        assert accepted.item() == verdict.accepted
        assert tokens[0].tolist() == verdict.tokens + [-1] * (k - verdict.accepted)
        unchecked = verify(p, q, draft, torch.Generator().manual_seed(seed), check=False)  # the engine's call
        assert unchecked.tokens == verdict.tokens
        assert [(r.u, r.p, r.q) for r in unchecked.positions] == [(r.u, r.p, r.q) for r in verdict.positions]


# -- input errors ----------------------------------------------------------------------------------------------

P = t([0.5, 0.5, 0.0], [0.2, 0.3, 0.5])
Q = t([0.1, 0.8, 0.1])
DRAFT = torch.tensor([1])


@pytest.mark.parametrize(
    "p, q, draft, match",
    [
        (P[0], Q, DRAFT, r"p must be .* \(k\+1, vocab\)"),
        (P.long(), Q, DRAFT, "p must be a floating-point"),
        (P, Q, DRAFT.int(), "draft must be a long"),
        (P, Q, [1], "draft must be a long"),
        (P, Q, torch.tensor([[1]]), r"draft must have shape \(k\)"),
        (P, Q, torch.tensor([1, 2]), r"p must have k\+1 = 3 rows for a draft of k = 2"),
        (P, Q, torch.tensor([3]), r"draft token ids must be in \[0, vocab=3\), got 3"),
        (P, Q, torch.tensor([-1]), "draft token ids .* got -1"),
        (P, Q[:, :2], DRAFT, r"q must be None or .* \(1, 3\)"),
        (P, Q.numpy(), DRAFT, "q must be None or"),
        (P * 3, Q, DRAFT, "p rows must be probability distributions .* not logits"),
        (P, t([1.2, -0.2, 0.0]), DRAFT, "q rows must be probability distributions"),
        (P, t([float("nan"), 0.5, 0.5]), DRAFT, "q rows must be probability distributions"),
    ],
)
def test_verify_rejects_bad_inputs(p, q, draft, match):
    with pytest.raises(ValueError, match=match):
        verify(p, q, draft, None)


def test_verify_batch_rejects_bad_inputs():
    with pytest.raises(ValueError, match=r"p must be .* \(B, k\+1, vocab\)"):
        verify_batch(P, Q, DRAFT, None)
    with pytest.raises(ValueError, match=r"draft must have shape \(B, k\) to match p \(2, 2, 3\)"):
        verify_batch(P.expand(2, 2, 3), None, DRAFT[None], None)
    with pytest.raises(ValueError, match=r"q must be None or .* \(2, 1, 3\)"):
        verify_batch(P.expand(2, 2, 3), Q, DRAFT.expand(2, 1), None)
