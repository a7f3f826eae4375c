"""warp and sample: temperature, top-k and top-p against hand-computed distributions."""

import dataclasses
import math

import pytest
import torch

from teachspec.sampling import SamplingParams, sample, warp

# probabilities 0.1, 0.2, 0.3, 0.4 at temperature 1
LOGITS = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64).log()


def expect(values, total=1.0):
    return torch.tensor(values, dtype=torch.float64) / total


@pytest.mark.parametrize(
    "params, expected",
    [
        (SamplingParams(temperature=1.0), expect([1, 2, 3, 4], 10)),
        (SamplingParams(temperature=0.5), expect([1, 4, 9, 16], 30)),  # p^(1/T)
        (SamplingParams(temperature=2.0), expect([1, 2**0.5, 3**0.5, 2], 1 + 2**0.5 + 3**0.5 + 2)),
        (SamplingParams(temperature=1.0, top_k=2), expect([0, 0, 3, 4], 7)),
        (SamplingParams(temperature=1.0, top_k=4), expect([1, 2, 3, 4], 10)),
        (SamplingParams(temperature=1.0, top_k=10), expect([1, 2, 3, 4], 10)),  # k beyond the vocabulary
        (SamplingParams(temperature=1.0, top_p=0.35), expect([0, 0, 0, 1])),  # 0.4 alone reaches 0.35
        (SamplingParams(temperature=1.0, top_p=0.5), expect([0, 0, 3, 4], 7)),  # 0.4 < 0.5, 0.4 + 0.3 >= 0.5
        (SamplingParams(temperature=1.0, top_p=0.75), expect([0, 2, 3, 4], 9)),
        (SamplingParams(temperature=1.0, top_p=1e-9), expect([0, 0, 0, 1])),  # always at least one token
        (SamplingParams(temperature=1.0, top_p=1.0), expect([1, 2, 3, 4], 10)),
        # top-k first ([0, 2, 3, 4] / 9), then top-p on that: 4/9 < 0.72 but 4/9 + 3/9 >= 0.72.
        # The other order would keep [0, 2, 3, 4] / 9.
        (SamplingParams(temperature=1.0, top_k=3, top_p=0.72), expect([0, 0, 3, 4], 7)),
        (SamplingParams(temperature=0.5, top_k=2), expect([0, 0, 9, 16], 25)),
    ],
)
def test_warp_matches_hand_computed(params, expected):
    torch.testing.assert_close(warp(LOGITS, params), expected, rtol=0, atol=1e-12)


def test_temperature_zero_is_one_hot_at_first_argmax():
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.0], [5.0, -1.0, 5.0, 5.0]])
    expected = torch.tensor([[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(warp(logits, SamplingParams(temperature=0.0)), expected)
    # top-k and top-p cannot change an argmax
    torch.testing.assert_close(warp(logits, SamplingParams(top_k=2, top_p=0.3)), expected)


def test_top_k_keeps_ties_with_the_kth_logit():
    logits = torch.tensor([1.0, 1.0, 0.0])
    torch.testing.assert_close(warp(logits, SamplingParams(temperature=1.0, top_k=1)), torch.tensor([0.5, 0.5, 0.0]))


def test_leading_dims_and_masked_logits():
    logits = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(0))
    logits[..., 0] = -math.inf  # e.g. a padded vocabulary slot
    probs = warp(logits, SamplingParams(temperature=0.7, top_k=4, top_p=0.9))
    assert probs.shape == (2, 3, 7)
    assert (probs[..., 0] == 0).all()
    assert ((probs > 0).sum(-1) <= 4).all()
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 3))


def test_tiny_temperature_does_not_overflow():
    probs = warp(torch.tensor([1.0, 2.0, 1.5]), SamplingParams(temperature=1e-30))
    torch.testing.assert_close(probs, torch.tensor([0.0, 1.0, 0.0]))


@pytest.mark.parametrize("t", [1e-31, 1e-46, 5e-324])
def test_a_temperature_below_the_floor_is_refused_naming_it(t):
    """float32 cannot divide by less than about 1e-38: such a T made every logit NaN, and sampling failed with an
    IndexError deep inside. It is refused where it is given, with the floor and what to pass instead."""
    with pytest.raises(ValueError, match=r"temperature must be 0 \(greedy\) or at least 1e-30.* pass 0"):
        SamplingParams(temperature=t)


@pytest.mark.parametrize("top_p", [1e-46, 5e-324, 1e-9])
def test_a_vanishing_top_p_keeps_the_likeliest_token(top_p):
    """top_p -> 0 keeps the smallest set that reaches it: the likeliest token alone, never nothing (in float32,
    1e-46 is 0, and the rule `mass above < top_p` kept no token at all, so sampling read past the vocabulary)."""
    logits = torch.tensor([[1.0, 2.0, 1.5, -3.0]] * 2)
    probs = warp(logits, SamplingParams(temperature=1.0, top_p=top_p))
    torch.testing.assert_close(probs, torch.tensor([[0.0, 1.0, 0.0, 0.0]] * 2))
    assert sample(probs, torch.Generator().manual_seed(0)).tolist() == [1, 1]


@pytest.mark.parametrize(
    "dtype, out", [(torch.float64, torch.float64), (torch.float32, torch.float32), (torch.bfloat16, torch.float32)]
)
def test_dtype(dtype, out):
    assert warp(LOGITS.to(dtype), SamplingParams(temperature=1.0)).dtype == out
    assert warp(LOGITS.to(dtype), SamplingParams()).dtype == out


def test_sample_shapes_ids_and_seed():
    probs = warp(torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(1)), SamplingParams(temperature=1.0))
    a = sample(probs, torch.Generator().manual_seed(7))
    b = sample(probs, torch.Generator().manual_seed(7))
    assert a.shape == (2, 3) and a.dtype == torch.long
    assert torch.equal(a, b)
    one_hot = torch.eye(4)[[2, 0, 3]]
    assert sample(one_hot, torch.Generator().manual_seed(0)).tolist() == [2, 0, 3]


def test_sample_frequencies_follow_probs():
    probs = expect([1, 2, 3, 4], 10)
    ids = sample(probs.expand(40_000, 4), torch.Generator().manual_seed(3))
    freq = torch.bincount(ids, minlength=4).double() / 40_000
    assert (freq - probs).abs().max() < 0.01  # 4 sigma is about 0.01


def test_params_are_frozen_and_greedy_flag():
    params = SamplingParams()
    assert params.greedy and not SamplingParams(temperature=0.1).greedy
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.temperature = 1.0


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"temperature": float("inf")}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"top_k": True}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_p": float("nan")}, "top_p"),
        ({"top_p": True}, "top_p"),
    ],
)
def test_bad_params_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        SamplingParams(**kwargs)


@pytest.mark.parametrize(
    "logits, match",
    [
        (torch.tensor([1, 2, 3]), "floating-point"),
        (torch.tensor([1.0, float("nan")]), "NaN"),
        (torch.tensor([1.0, float("inf")]), r"\+inf"),
        (torch.tensor([[0.0, 1.0], [-math.inf, -math.inf]]), "all -inf"),
    ],
)
def test_bad_logits(logits, match):
    with pytest.raises(ValueError, match=match):
        warp(logits, SamplingParams(temperature=1.0))
