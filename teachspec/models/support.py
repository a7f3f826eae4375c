"""Which models the engine can run: decoder-only models whose every cache layer is attention keys and values.

Speculation guesses k tokens, runs them through the target, and then *forgets* the rejected ones: the engine crops
both models' caches back to the committed tokens after every step (`teachspec.kv.crop_to`). An attention layer's
cache is a list of per-token keys and values, so forgetting is slicing. A recurrent layer (Mamba's state space,
the linear attention of Qwen3-Next, RWKV, RecurrentGemma's RG-LRU) folds every token into one state; the state
before a rejected guess is gone once the guess is folded in, and nothing can be cropped. Serving engines handle
such models by snapshotting the state per guess; this engine teaches the attention case and refuses the others at
load time, with one message, instead of failing inside transformers mid-generation.

An encoder-decoder model (T5, BART) is refused too: its decoder reads an encoder's output that the engine never
computes, and the radix tree indexes one token sequence, not two.

Two checks: the config (cheap, before any weights load, for names and paths), then a probe (for every model, also
ones already in memory): two tokens through an empty cache of the engine's kind, which must come back holding
exactly those two tokens in every layer.
"""

from __future__ import annotations

import torch
from transformers import PretrainedConfig, PreTrainedModel

# layer kinds whose cache is per-token keys and values (transformers' `config.layer_types`)
ATTENTION_LAYERS = {"full_attention", "sliding_attention", "chunked_attention"}
# model types that keep a recurrent state and declare no layer_types saying so
RECURRENT_TYPES = {"mamba", "mamba2", "falcon_mamba", "rwkv", "recurrent_gemma", "xlstm", "jamba", "bamba",
                   "zamba", "zamba2", "falcon_h1", "granitemoehybrid", "nemotron_h", "lfm2", "plamo2", "minimax"}


class UnsupportedModel(ValueError):
    """A model the engine cannot run, with the reason in words."""


def refusal(role: str, model_type: str, why: str) -> UnsupportedModel:
    return UnsupportedModel(
        f"{role}: model type {model_type!r} is not supported: {why}. Speculative decoding rolls the cache back "
        f"after every rejected guess, which needs a cache of per-token attention keys and values that can be "
        f"cropped token by token; use a decoder-only attention model (Llama, Qwen, Gemma, Mistral, Phi, GPT-2, "
        f"OPT, Falcon, ...)")


def check_config(config: PretrainedConfig, role: str) -> None:
    """Refuse, from the config alone, what the engine cannot roll back."""
    model_type = getattr(config, "model_type", "") or type(config).__name__
    if getattr(config, "is_encoder_decoder", False):
        raise refusal(role, model_type, "it is an encoder-decoder model, and the engine runs decoder-only models")
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    layer_types = getattr(text, "layer_types", None) or []
    other = sorted({t for t in layer_types if t not in ATTENTION_LAYERS})
    if other:
        raise refusal(role, model_type, f"its layers include {other}, which keep a recurrent state, not per-token "
                                        f"keys and values")
    if model_type in RECURRENT_TYPES or getattr(text, "model_type", "") in RECURRENT_TYPES:
        raise refusal(role, model_type, "its layers keep a recurrent state (a state-space or linear-attention "
                                        "layer), not per-token keys and values")


@torch.inference_mode()
def probe(model: PreTrainedModel, role: str) -> None:
    """Two tokens through an empty cache of the engine's kind: every layer must then hold exactly two tokens."""
    from teachspec import kv

    model_type = getattr(model.config, "model_type", type(model).__name__)
    cache = kv.new_cache(model)
    try:
        kv.forward(model, [0, 0], cache, 1, 1)
    except Exception as e:  # whatever transformers raises deep inside, said once, in the engine's words
        raise refusal(role, model_type, f"a forward pass on the engine's cache failed ({type(e).__name__}: "
                                        f"{str(e)[:200]})") from e
    lengths = [layer.keys.shape[-2] if isinstance(layer, kv.GrowingLayer) and layer.is_initialized
               and layer.keys is not None and layer.keys.dim() == 4 else 0 for layer in cache.layers]
    if set(lengths) != {2}:
        raise refusal(role, model_type, f"it did not store its keys and values in the engine's cache (tokens held "
                                        f"per layer after a two-token pass: {lengths})")
