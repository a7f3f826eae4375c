"""Small transformers models built from configs (no hub, no download), random weights, in milliseconds; saved to disk
for `from_pretrained`; an instruct-style tokenizer; and the check that a draft's cache holds only committed tokens.
Shared by the tests that need a real model other than the bundled pair (tests/conftest.py's `model_dir` saves one)."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import processors
from transformers import AutoTokenizer, FalconConfig, FalconForCausalLM, Gemma2Config, Gemma2ForCausalLM, GPT2Config, \
    GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, OPTConfig, OPTForCausalLM, \
    Phi3Config, Phi3ForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from teachspec.models import BUNDLED

TOKENIZER_DIR = BUNDLED["tiny"]


def build_model(arch: str, vocab_size: int = 4096, seed: int = 0, layers: int = 2, hidden: int = 64):
    """A random-weight causal LM of the given architecture, small enough to run in milliseconds."""
    torch.manual_seed(seed)
    # a wide init makes the random models' distributions peaked, like trained ones, rather than near uniform
    common = dict(vocab_size=vocab_size, bos_token_id=0, eos_token_id=0, pad_token_id=0, initializer_range=0.2)
    if arch == "llama":
        cfg = LlamaConfig(hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, **common)
        return LlamaForCausalLM(cfg).eval()
    if arch == "qwen2":
        cfg = Qwen2Config(hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, **common)
        return Qwen2ForCausalLM(cfg).eval()
    if arch == "qwen3-window":  # `train --draft windowed`'s kind: the first layer sees only the last two tokens
        cfg = Qwen3Config(hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers, head_dim=16,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                          use_sliding_window=True, sliding_window=2,
                          layer_types=["sliding_attention"] + ["full_attention"] * (layers - 1), **common)
        return Qwen3ForCausalLM(cfg).eval()
    if arch == "gpt2":
        cfg = GPT2Config(n_embd=hidden, n_layer=layers, n_head=4, n_positions=512, **common)
        return GPT2LMHeadModel(cfg).eval()
    heads = dict(num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    if arch == "qwen3":
        return Qwen3ForCausalLM(Qwen3Config(hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                                            head_dim=16, **heads, **common)).eval()
    if arch == "gemma2":  # alternating sliding (a window of 4) and full layers, with Gemma's logit soft-capping
        cfg = Gemma2Config(hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=max(layers, 2),
                           head_dim=16, sliding_window=4, query_pre_attn_scalar=16, **heads, **common)
        return Gemma2ForCausalLM(cfg).eval()
    if arch == "mistral":  # every layer sees a window of 4 tokens
        return MistralForCausalLM(MistralConfig(hidden_size=hidden, intermediate_size=4 * hidden,
                                                num_hidden_layers=layers, sliding_window=4, **heads, **common)).eval()
    if arch == "phi3":
        return Phi3ForCausalLM(Phi3Config(hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                                          **heads, **common)).eval()
    if arch == "opt":
        cfg = OPTConfig(hidden_size=hidden, ffn_dim=4 * hidden, num_hidden_layers=layers, num_attention_heads=4,
                        word_embed_proj_dim=hidden, max_position_embeddings=512, init_std=0.2,
                        **{k: v for k, v in common.items() if k != "initializer_range"})
        return OPTForCausalLM(cfg).eval()
    if arch == "falcon":
        cfg = FalconConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4, num_kv_heads=2,
                           new_decoder_architecture=True, max_position_embeddings=512, **common)
        return FalconForCausalLM(cfg).eval()
    raise ValueError(arch)


def save_model(path: Path, arch: str, vocab_size: int = 4096, seed: int = 0, tokenizer=True, **kw) -> Path:
    build_model(arch, vocab_size, seed, **kw).save_pretrained(path)
    if tokenizer:
        AutoTokenizer.from_pretrained(TOKENIZER_DIR).save_pretrained(path)
    return path


def chat_tokenizer():
    """The bundled tokenizer made to look like an instruct model's: a BOS it adds to every encoding, ChatML's turn
    markers as special tokens, and a chat template (4099 tokens in all)."""
    tok = AutoTokenizer.from_pretrained(TOKENIZER_DIR)
    tok.add_special_tokens({"bos_token": "<s>", "additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    bos = tok.convert_tokens_to_ids("<s>")
    tok._tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                                  special_tokens=[("<s>", bos)])
    tok.chat_template = ("{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                         "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return tok


def assert_draft_holds_committed_tokens(r, pair) -> None:
    """After a step: the draft model's cache holds a prefix of the committed tokens (never a rejected guess), and its
    keys and values equal the draft's own fresh prefill of that prefix."""
    from teachspec import kv

    cache, held = r.drafter.cache, r.drafter.cached
    assert kv.length(cache) == len(held) <= len(r.ids) - 1 and held == r.ids[:len(held)]
    fresh = kv.new_cache(pair.draft)
    kv.forward(pair.draft, held, fresh, 1, pair.vocab_size)
    for ours, theirs in zip(cache.layers, fresh.layers):
        assert torch.allclose(ours.keys, theirs.keys, atol=1e-5)
        assert torch.allclose(ours.values, theirs.values, atol=1e-5)
