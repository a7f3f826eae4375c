"""KV-cache handling on top of transformers' `DynamicCache` (the v5 API).

A causal LM's cache holds, for every layer, the keys and values of every token it has seen:
`cache.layers[i].keys` is `(batch, heads, tokens, head_dim)`. Decoding appends one token per forward pass;
speculation appends k + 1 and then must forget the rejected ones (`crop_to`); prefix reuse glues cached slices
in front of a new suffix. Every function here keeps one invariant: the cache holds exactly the committed tokens.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel


def new_cache(model: PreTrainedModel) -> DynamicCache:
    return DynamicCache(config=model.config)


def length(cache: DynamicCache) -> int:
    return cache.get_seq_length()


def crop_to(cache: DynamicCache, n: int) -> None:
    """Keep the first n tokens. transformers v5's `crop` takes a negative count of tokens to remove."""
    extra = cache.get_seq_length() - n
    if extra < 0:
        raise ValueError(f"cannot crop a cache of {cache.get_seq_length()} tokens to n={n}: it would have to grow")
    if extra:
        cache.crop(-extra)


@torch.inference_mode()
def forward(model: PreTrainedModel, ids: list[int] | torch.Tensor, cache: DynamicCache, last: int,
            vocab_size: int) -> torch.Tensor:
    """Run `ids` through the model on top of `cache` (which grows by len(ids)); return the float32 logits of
    the last `last` positions, sliced to the pair's shared vocabulary: `(last, vocab_size)`."""
    if not torch.is_tensor(ids):
        ids = torch.tensor(ids, dtype=torch.long)
    ids = ids.to(model.device).view(1, -1)
    out = model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=last)
    return out.logits[0, -last:, :vocab_size].float()
