"""The acceptance rule is exact whatever the inputs' dtype: float32, float16 and bfloat16 inputs included.

`verify` runs in float64: float64 uniforms, p/q compared and the residual computed in float64. Checked three ways:
the uniforms `verify` records are the generator's float64 draws; the law by enumeration (as in
test_verify_exact.py) on low-precision tables whose values sum to exactly 1; and a statistical test that catches
bfloat16 uniforms, which torch makes exactly 0 about once in 512 draws.
"""

from __future__ import annotations

import math

import pytest
import torch

from helpers.exact import V, ToyLM, make_table, max_error
from teachspec.speculative import acceptance_probability, verify, verify_batch

F64 = torch.float64
LOW = [torch.float32, torch.float16, torch.bfloat16]


def dyadic_table(seed: int, dtype: torch.dtype, **kw) -> torch.Tensor:
    """make_table's distributions rounded to multiples of 1/64 with every row summing to exactly 1: values that
    float32, float16 and bfloat16 all hold exactly, so the target law is known exactly in every dtype."""
    w = make_table(seed, **kw)
    units = (w * 64).floor()
    units.scatter_add_(-1, w.argmax(-1, keepdim=True), 64 - units.sum(-1, keepdim=True))  # the rest on the top token
    table = (units / 64).to(dtype)
    assert torch.equal(table.double().sum(-1), torch.ones(table.shape[:-1], dtype=F64))
    return table


def cases(dtype):
    return {
        "generic, zeros in both": (ToyLM(dyadic_table(0, dtype, zeros=0.3)), ToyLM(dyadic_table(1, dtype, zeros=0.3))),
        "disjoint supports": (ToyLM(dyadic_table(3, dtype, support=range(0, 3))),
                              ToyLM(dyadic_table(4, dtype, support=range(3, 5)))),
        "q = None, point-mass drafts": (ToyLM(dyadic_table(11, dtype, zeros=0.3)),
                                        ToyLM(dyadic_table(12, dtype), certain=True)),
    }


def residual_in_the_inputs_dtype(p, q):
    """The residual as it was computed before: in the inputs' dtype (bfloat16 keeps 8 significant bits)."""
    r = (p - q).clamp(min=0.0)
    mass = r.sum(-1, keepdim=True)
    return torch.where(mass > 0, r / mass.where(mass > 0, 1.0), p).double()


# -- the law, by enumeration -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("case", list(cases(F64)))
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_every_prefix_has_the_target_probability_in_low_precision(dtype, case, k):
    target, drafter = cases(dtype)[case]
    assert target.table.dtype == dtype
    assert max_error(target, drafter, k) <= 1e-12


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_the_enumeration_catches_a_residual_in_the_inputs_dtype(dtype):
    """Mutation check: the same enumeration with the residual computed in float16 or bfloat16 is off."""
    target, drafter = cases(dtype)["generic, zeros in both"]
    assert max_error(target, drafter, 2, resample=residual_in_the_inputs_dtype) > 1e-5


# -- the uniforms ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", LOW + [F64], ids=str)
def test_verify_records_the_generators_float64_draws(dtype):
    """With p = q every draft is accepted and every position's u is recorded: they are float64 draws, whatever
    the dtype of p and q (before, they were drawn in it, and bfloat16 ones are multiples of 2^-8 at best)."""
    k, table = 4, dyadic_table(0, dtype)
    p = table[0, :k + 1, 0]  # (k+1, V)
    draft = p[:k].double().argmax(-1)
    for seed in range(5):
        verdict = verify(p, p[:k], draft, torch.Generator().manual_seed(seed))
        expected = torch.rand(k, generator=torch.Generator().manual_seed(seed), dtype=F64).tolist()
        assert verdict.accepted == k and [r.u for r in verdict.positions] == expected


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_verify_batch_compares_float64_draws_with_the_float64_ratio(dtype):
    """Softmax outputs rounded to the dtype (their sums off by up to eps / 2) are accepted, and decided in float64."""
    g = torch.Generator().manual_seed(0)
    B, k = 2000, 3
    p = torch.softmax(3 * torch.randn(B, k + 1, V, generator=g), -1).to(dtype)
    q = torch.softmax(3 * torch.randn(B, k, V, generator=g), -1).to(dtype)
    draft = torch.randint(0, V, (B, k), generator=g)
    accepted, _ = verify_batch(p, q, draft, torch.Generator().manual_seed(1))
    u = torch.rand(B, k, generator=torch.Generator().manual_seed(1), dtype=F64)
    expected = (u < acceptance_probability(p[:, :k], q, draft)).long().cumprod(-1).sum(-1)
    assert torch.equal(accepted, expected) and 0 < accepted.double().mean() < k


A = 2.0 ** -8  # p(x) / q(x) for the statistical test: exact in every dtype, and where bfloat16 uniforms err most
N = 400_000


def acceptance_rate(dtype: torch.dtype) -> float:
    """How often verify_batch accepts a point-mass draft of a token the target gives probability A."""
    p = torch.tensor([[A, 1 - A], [0.5, 0.5]], dtype=dtype).expand(N, 2, 2)  # (N, k+1, vocab), k = 1
    accepted, _ = verify_batch(p, None, torch.zeros(N, 1, dtype=torch.long), torch.Generator().manual_seed(0))
    return accepted.double().mean().item()


@pytest.mark.parametrize("dtype", LOW + [F64], ids=str)
def test_a_draft_is_accepted_with_probability_p_over_q_in_every_dtype(dtype):
    sigma = math.sqrt(A * (1 - A) / N)
    assert abs(acceptance_rate(dtype) - A) < 5 * sigma


def test_the_statistical_test_catches_bfloat16_uniforms():
    """Mutation check: the same count with the uniforms drawn in bfloat16, as verify_batch once did, is more than
    ten standard deviations off (torch's bfloat16 uniforms are exactly 0 about once in 512 draws)."""
    sigma = math.sqrt(A * (1 - A) / N)
    u = torch.rand(N, generator=torch.Generator().manual_seed(0), dtype=torch.bfloat16)
    assert (u < A).double().mean().item() - A > 10 * sigma


# -- the generator ---------------------------------------------------------------------------------------------------

P = torch.tensor([[0.5, 0.5], [0.25, 0.75]], dtype=F64)


@pytest.mark.parametrize("generator", [42, "seed", torch.tensor(0)])
def test_generator_must_be_a_torch_generator_or_none(generator):
    name = type(generator).__name__
    with pytest.raises(TypeError, match=f"generator must be a torch.Generator or None .*, got {name}"):
        verify(P, None, torch.tensor([1]), generator)
    with pytest.raises(TypeError, match=f"generator must be a torch.Generator or None .*, got {name}"):
        verify(P, None, torch.tensor([1]), generator, check=False)
    with pytest.raises(TypeError, match=f"generator must be a torch.Generator or None .*, got {name}"):
        verify_batch(P[None], None, torch.tensor([[1]]), generator)
    state = torch.get_rng_state()
    verify(P, None, torch.tensor([1]), torch.Generator().manual_seed(0))  # a Generator: the global state is untouched
    assert torch.equal(torch.get_rng_state(), state)
