"""Packed linear layers (teachspec.models.packed) change how the models compute, never what: in float32 and in
bfloat16, checked against `nn.Linear`'s own result, and again after a weight is replaced or edited in place."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import AutoModelForCausalLM

from helpers.models import build_model
from teachspec import kv
from teachspec.models import BUNDLED, load_pair
from teachspec.models.eagle import lower
from teachspec.models.packed import MIN_WEIGHTS, PackedLinear, available, pack, unpack

pytestmark = pytest.mark.skipif(not available(), reason="oneDNN's packed linear is not in this build of torch")

IDS = torch.arange(3, 43).view(1, -1)  # (1, 40)


def plain_target() -> nn.Module:
    return AutoModelForCausalLM.from_pretrained(BUNDLED["tiny"] / "target", dtype=torch.float32).eval()


def test_the_bundled_pair_loads_packed_and_computes_what_the_plain_model_does():
    pair = load_pair()
    packed = [m for m in pair.target.modules() if isinstance(m, PackedLinear)]
    assert len(packed) == 6 * 7 + 1  # every projection of every layer, and the output layer
    reference = plain_target()
    with torch.inference_mode():
        for n in (1, 4, 40):  # one row, a verification's few, a prefill's many
            a, b = kv.new_cache(pair.target), kv.new_cache(reference)
            got = kv.forward(pair.target, IDS[0, :n], a, n, pair.vocab_size)
            want = kv.forward(reference, IDS[0, :n], b, n, pair.vocab_size)
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-5)


def test_small_layers_stay_plain_and_the_state_dict_and_tied_weights_are_unchanged():
    model = build_model("llama", hidden=32, layers=1)  # output layer 4096 x 32 = 2^17 weights; the rest smaller
    before = {k: v.clone() for k, v in model.state_dict().items()}
    pack(model)
    kinds = {name: type(m) for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    assert kinds.pop("lm_head") is PackedLinear and model.lm_head.weight.numel() == MIN_WEIGHTS
    assert set(kinds.values()) == {nn.Linear}
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    tied = build_model("gpt2", hidden=64)  # GPT-2 ties its output layer to the token embedding
    pack(tied)
    assert isinstance(tied.lm_head, PackedLinear) and tied.lm_head.weight is tied.transformer.wte.weight


def test_a_weight_edited_in_place_is_repacked():
    model, reference = pack(plain_target()), plain_target()
    with torch.inference_mode():
        model(IDS)  # packs every layer
    with torch.no_grad():
        for m in (model, reference):
            m.model.layers[0].mlp.down_proj.weight.mul_(-0.5)
            m.lm_head.weight.add_(0.25)
    with torch.inference_mode():
        torch.testing.assert_close(model(IDS).logits, reference(IDS).logits, atol=1e-4, rtol=1e-5)


def test_gradients_take_the_plain_path():
    model = pack(plain_target())
    with torch.inference_mode():
        model(IDS)
    loss = model(IDS, labels=IDS).loss
    loss.backward()
    assert model.lm_head.weight.grad is not None and model.model.layers[0].mlp.up_proj.weight.grad.abs().sum() > 0


def test_layers_with_a_bias_compute_what_the_plain_ones_do():
    model, reference = build_model("qwen2", hidden=384, layers=1), build_model("qwen2", hidden=384, layers=1)
    with torch.no_grad():  # Qwen2's q, k and v projections have a bias, initialised to zero
        for m in (model, reference):
            torch.manual_seed(1)
            for name in ("q_proj", "k_proj", "v_proj"):
                getattr(m.model.layers[0].self_attn, name).bias.normal_()
    pack(model)
    assert isinstance(model.model.layers[0].self_attn.q_proj, PackedLinear)
    with torch.inference_mode():  # the two kernels round differently: ~1e-4 on logits of this size (up to ~20)
        torch.testing.assert_close(model(IDS).logits, reference(IDS).logits, atol=1e-3, rtol=1e-5)


def test_unpack_and_pack_again():
    model, reference = pack(plain_target()), plain_target()
    with torch.inference_mode():
        want = reference(IDS).logits
        model(IDS)
        assert type(unpack(model).lm_head) is nn.Linear
        torch.testing.assert_close(model(IDS).logits, want, atol=1e-4, rtol=1e-5)
        assert type(pack(model).lm_head) is PackedLinear
        torch.testing.assert_close(model(IDS).logits, want, atol=1e-4, rtol=1e-5)


def test_a_model_whose_copies_would_be_too_large_stays_plain():
    model = build_model("llama", hidden=32, layers=1)  # one packable layer, the output layer: 2^17 float32 weights
    assert type(pack(model, max_bytes=4 * MIN_WEIGHTS - 1).lm_head) is nn.Linear
    assert type(pack(model, max_bytes=4 * MIN_WEIGHTS).lm_head) is PackedLinear


# -- one layer, float32 and bfloat16 ------------------------------------------------------------------------------

def packed_layer(dtype: torch.dtype, bias: bool = True, seed: int = 0) -> tuple[PackedLinear, nn.Linear]:
    """A 384 -> 1024 `PackedLinear` in `dtype` and a plain `nn.Linear` with the same weights (its trusted peer)."""
    torch.manual_seed(seed)
    plain = nn.Linear(384, 1024, bias=bias, dtype=dtype)
    layer = nn.Linear(384, 1024, bias=bias, dtype=dtype)
    layer.load_state_dict(plain.state_dict())
    layer.__class__ = PackedLinear
    return layer, plain


def assert_same(layer: nn.Module, plain: nn.Module, x: torch.Tensor) -> None:
    """The two layers agree on every row of x: to float32's rounding in float32 and to bfloat16's (8 bits) in
    bfloat16 (the two kernels sum in float32 in different orders, then round)."""
    with torch.inference_mode():
        got, want = layer(x), plain(x)
    assert got.dtype == want.dtype == x.dtype
    tolerance = dict(atol=1e-4, rtol=1e-5) if x.dtype == torch.float32 else dict(atol=1e-2, rtol=1.6e-2)
    torch.testing.assert_close(got, want, **tolerance)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [True, False])
def test_a_packed_layer_computes_what_nn_linear_does(dtype, bias):
    layer, plain = packed_layer(dtype, bias)
    for rows in (1, 4, 40):  # one row, a verification's few, a prefill's many
        assert_same(layer, plain, torch.randn(1, rows, 384, dtype=dtype))
    assert layer.packed is not None and layer.packed_from[0] == layer.weight.data_ptr()  # the packed kernel ran


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("track_edits", [True, False])
def test_a_replaced_weight_is_packed_again(dtype, track_edits):
    layer, plain = packed_layer(dtype)
    layer.track_edits = track_edits
    x = torch.randn(1, 4, 384, dtype=dtype)
    assert_same(layer, plain, x)
    new = torch.randn_like(layer.weight)
    layer.weight, plain.weight = nn.Parameter(new), nn.Parameter(new.clone())
    assert_same(layer, plain, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_weight_edited_in_place_is_packed_again_while_edits_are_tracked(dtype):
    layer, plain = packed_layer(dtype)
    x = torch.randn(1, 4, 384, dtype=dtype)
    assert_same(layer, plain, x)
    with torch.no_grad():
        for m in (layer, plain):
            m.weight.mul_(-2)
    assert_same(layer, plain, x)


def test_a_lowered_layer_does_not_track_edits_until_packed_again():
    """`eagle.lower`'s layers are for inference: an in-place edit goes unseen (no version read per call) until the
    copy is made again; unpacking leaves a plain bfloat16 `nn.Linear` that computes the same."""
    layer, plain = packed_layer(torch.float32)
    lower(layer)
    plain.to(torch.bfloat16)
    assert type(layer) is PackedLinear and layer.weight.dtype == torch.bfloat16 and not layer.track_edits
    x = torch.randn(1, 4, 384, dtype=torch.bfloat16)
    assert_same(layer, plain, x)
    with torch.inference_mode():
        before = layer(x)
        with torch.no_grad():
            layer.weight.mul_(-2)
        assert torch.equal(layer(x), before)  # the stale copy, as documented
    unpack(layer)
    plain.weight.data.mul_(-2)
    assert type(layer) is nn.Linear and layer.weight.dtype == torch.bfloat16
    assert_same(layer, plain, x)
    assert type(pack(layer)) is PackedLinear and layer.track_edits  # packed again, edits tracked again
    assert_same(layer, plain, x)
