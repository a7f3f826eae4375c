"""What the engine cannot roll back is refused at load_pair, in one message, before generation starts."""

import pytest
import torch
from transformers import AutoTokenizer, MambaConfig, MambaForCausalLM, Qwen3NextConfig, Qwen3NextForCausalLM, \
    T5Config, T5ForConditionalGeneration

from helpers.models import TOKENIZER_DIR, build_model
from teachspec import load_pair
from teachspec.models.support import UnsupportedModel, probe

SMALL = dict(vocab_size=4096, bos_token_id=0, eos_token_id=0, pad_token_id=0)


def mamba():
    return MambaForCausalLM(MambaConfig(hidden_size=64, state_size=8, num_hidden_layers=2, **SMALL)).eval()


def qwen3_next():
    """A hybrid: linear-attention (gated delta net) layers between full-attention ones."""
    cfg = Qwen3NextConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=16, linear_num_value_heads=2, linear_num_key_heads=2,
                          linear_key_head_dim=16, linear_value_head_dim=16, moe_intermediate_size=32,
                          shared_expert_intermediate_size=32, num_experts=2, num_experts_per_tok=1,
                          layer_types=["linear_attention", "full_attention"], **SMALL)
    return Qwen3NextForCausalLM(cfg).eval()


def t5():
    return T5ForConditionalGeneration(T5Config(d_model=64, d_ff=128, num_layers=1, num_heads=4, d_kv=16,
                                               decoder_start_token_id=0, **SMALL)).eval()


MESSAGE = r"model type '{}' is not supported: .*Speculative decoding rolls the cache back after every rejected guess"


@pytest.mark.parametrize("make, model_type, why", [
    (mamba, "mamba", "recurrent state"),
    (qwen3_next, "qwen3_next", r"layers include \['linear_attention'\]"),
    (t5, "t5", "encoder-decoder"),
])
def test_models_without_a_croppable_cache_are_refused_at_load_in_memory_and_from_a_folder(make, model_type, why,
                                                                                         tmp_path):
    tok = AutoTokenizer.from_pretrained(TOKENIZER_DIR)
    torch.manual_seed(0)
    model = make()
    with pytest.raises(UnsupportedModel, match=MESSAGE.format(model_type)) as refused:
        load_pair(target=model, tokenizer=tok)
    refused.match(why)
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    with pytest.raises(UnsupportedModel, match=MESSAGE.format(model_type)):
        load_pair(target=tmp_path / "m")
    with pytest.raises(UnsupportedModel, match=r"draft: model type"):  # as a draft too
        load_pair(target=build_model("llama"), draft=model, tokenizer=tok)


def test_the_probe_refuses_a_model_that_keeps_its_own_cache():
    """Whatever its config says, a model whose forward pass leaves the engine's cache empty is refused, and one
    that stores its keys and values there passes."""
    with pytest.raises(UnsupportedModel, match=r"did not store its keys and values in the engine's cache \(tokens "
                                               r"held per layer after a two-token pass: \[0, 0\]\)"):
        probe(mamba(), "target")
    probe(build_model("gemma2"), "target")


def test_in_memory_models_load_and_refuse_options_that_only_apply_to_names():
    tok = AutoTokenizer.from_pretrained(TOKENIZER_DIR)
    target, draft = build_model("llama", seed=1), build_model("llama", seed=2)
    pair = load_pair(target=target, draft=draft, tokenizer=tok)
    assert pair.target is target and pair.draft is draft and pair.vocab_size == 4096
    assert pair.eos == {0} and "LlamaForCausalLM" in pair.name
    with pytest.raises(ValueError, match=r"tokenizer=None: a target given as a model needs its tokenizer"):
        load_pair(target=target)
    with pytest.raises(ValueError, match=r"device='cpu' applies to models loaded by name"):
        load_pair(target=target, tokenizer=tok, device="cpu")
    with pytest.raises(TypeError, match=r"target must be a hub id, a local folder or a transformers model \(or None\), "
                                        r"got int 42"):
        load_pair(target=42, tokenizer=tok)


def test_from_pretrained_options_pass_through(model_dir):
    path = model_dir("qwen2")
    pair = load_pair(target=path, torch_dtype="bfloat16", trust_remote_code=False)
    assert pair.target.dtype == torch.bfloat16
    with pytest.raises(ValueError, match=r"dtype='float32' and torch_dtype='bfloat16' disagree"):
        load_pair(target=path, dtype="float32", torch_dtype="bfloat16")
    assert load_pair(target=path, device_map="cpu").target.device.type == "cpu"
