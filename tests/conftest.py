"""Shared fixtures: small transformers models built from configs (no hub, no download) and saved to disk."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, \
    Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from teachspec.models import BUNDLED

torch.set_num_threads(1)  # small models gain nothing from more threads
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
    raise ValueError(arch)


def save_model(path: Path, arch: str, vocab_size: int = 4096, seed: int = 0, tokenizer=True, **kw) -> Path:
    build_model(arch, vocab_size, seed, **kw).save_pretrained(path)
    if tokenizer:
        AutoTokenizer.from_pretrained(TOKENIZER_DIR).save_pretrained(path)
    return path


@pytest.fixture
def model_dir(tmp_path):
    """Factory: model_dir("llama", vocab_size=..., seed=...) -> a folder from_pretrained can open."""
    def make(arch: str, name: str | None = None, **kw) -> Path:
        return save_model(tmp_path / (name or arch), arch, **kw)
    return make
