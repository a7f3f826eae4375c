"""KV-cache handling on top of transformers' `DynamicCache` (the v5 API).

A causal LM's cache holds, for every layer, the keys and values of every token it has seen:
`cache.layers[i].keys` is `(batch, heads, tokens, head_dim)`. Decoding appends one token per forward pass;
speculation appends k + 1 and then must forget the rejected ones (`crop_to`); prefix reuse glues cached slices
in front of a new suffix. Every function here keeps one invariant: the cache holds exactly the committed tokens.
"""

from __future__ import annotations

import functools
import inspect

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer


class GrowingLayer(DynamicLayer):
    """One layer's keys and values, appended in place into spare room that doubles when full.

    transformers' `DynamicLayer` concatenates on every update, so each decode step copies the whole cache (1,700
    tokens of the bundled target are 31 MB a step): decoding slows as the context grows. Here an update writes
    only the new tokens, and the room is copied only when it doubles, as a Python list grows. `keys` and `values`
    stay what transformers reads: views of the first n positions. Cropping (transformers' own `crop`) just
    shortens those views, and the next update overwrites the forgotten positions. A layer handed tensors it does
    not own (a reused prefix glued in by `assemble`) copies them into fresh room before its first write, so
    nothing stored elsewhere is ever written into.
    """

    def __init__(self):
        super().__init__()
        self.room: tuple[torch.Tensor, torch.Tensor] | None = None  # (keys, values), each (B, heads, room, d)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = self.keys.shape[-2] if self.keys.dim() == key_states.dim() else 0  # a fresh layer holds an empty 1-D tensor
        new = key_states.shape[-2]
        room = self.room
        if room is None or room[0].data_ptr() != self.keys.data_ptr() or room[0].shape[-2] < n + new:
            shape = (*key_states.shape[:-2], max(2 * (n + new), 64), key_states.shape[-1])  # (B, heads, room, d)
            room = (key_states.new_empty(shape), value_states.new_empty(shape))
            if n:
                room[0][..., :n, :], room[1][..., :n, :] = self.keys, self.values
            self.room = room
        room[0][..., n:n + new, :], room[1][..., n:n + new, :] = key_states, value_states
        self.keys, self.values = room[0][..., :n + new, :], room[1][..., :n + new, :]
        return self.keys, self.values


def new_cache(model: PreTrainedModel) -> DynamicCache:
    """An empty cache for `model`, its attention layers growing in place (`GrowingLayer`).

    Sliding-window layers keep every token too: the attention mask applies the window, and rolling back rejected
    guesses needs the keys a rolling window would already have dropped."""
    cache = DynamicCache(config=model.config)
    cache.layers = [GrowingLayer() if type(layer) in (DynamicLayer, DynamicSlidingWindowLayer) else layer
                    for layer in cache.layers]
    return cache


def length(cache: DynamicCache) -> int:
    return cache.get_seq_length()


def crop_to(cache: DynamicCache, n: int) -> None:
    """Keep the first n tokens. transformers v5's `crop` takes a negative count of tokens to remove."""
    extra = cache.get_seq_length() - n
    if extra < 0:
        raise ValueError(f"cannot crop a cache of {cache.get_seq_length()} tokens to n={n}: it would have to grow")
    if extra:
        cache.crop(-extra)


@functools.cache
def cache_keyword(model_class: type) -> str:
    """The keyword a model's `forward` takes its cache by: `cache` from transformers 5.24 on, `past_key_values`
    before (5.24 still accepts the old name, with a warning that it goes in 5.40). Read once per model class
    from the signature, so every transformers 5.x the package declares runs the same code."""
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


@torch.inference_mode()
def forward(model: PreTrainedModel, ids: list[int] | torch.Tensor, cache: DynamicCache, last: int,
            vocab_size: int, features: bool = False):
    """Run `ids` through the model on top of `cache` (which grows by len(ids)); return the float32 logits of
    the last `last` positions, sliced to the pair's shared vocabulary: `(last, vocab_size)`. With `features`,
    also the last hidden state (what the LM head reads) at every position fed: `(len(ids), hidden)`, for an
    EAGLE head (`teachspec.models.eagle`)."""
    ids = torch.as_tensor(ids, dtype=torch.long, device=model.device).view(1, -1)  # (1, n)
    out = model(input_ids=ids, use_cache=True, logits_to_keep=last, output_hidden_states=features,
                **{cache_keyword(type(model)): cache})
    logits = out.logits[0, -last:, :vocab_size].float()
    return (logits, out.hidden_states[-1][0]) if features else logits


# -- slices of a cache, for reuse across requests ----------------------------------------------------------------

class KVSlice:
    """The keys and values of a run of n tokens, for every layer of one model: `layers[i] = (keys, values)`, each
    `(1, heads, n, head_dim)`.

    Slicing copies a piece that is less than a quarter of the memory it views, so a small piece never keeps a
    large cache alive; a larger piece stays a view of that memory (a finished request's whole new KV, stored as it
    is, costs no copy: that is most of what the cache would add to a request that reuses nothing). A quarter, not
    a half, because a `GrowingLayer` keeps up to twice its tokens' room."""

    def __init__(self, layers: list[tuple[torch.Tensor, torch.Tensor]]):
        self.layers = layers

    def __len__(self) -> int:
        return self.layers[0][0].shape[2]

    def __getitem__(self, index: slice) -> "KVSlice":
        if not isinstance(index, slice) or index.step not in (None, 1):
            raise TypeError(f"a KVSlice takes contiguous slices like kv[a:b], got {index!r}")
        pieces = []
        for k, v in self.layers:
            k, v = k[:, :, index], v[:, :, index]
            if 4 * k.nbytes < k.untyped_storage().nbytes():
                k, v = k.clone(), v.clone()
            pieces.append((k, v))
        return KVSlice(pieces)

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes + v.nbytes for k, v in self.layers)


def view(cache: DynamicCache, start: int, stop: int) -> KVSlice:
    """Tokens [start, stop) of a cache, without copying: slice the view to get a copy you may keep."""
    return KVSlice([(layer.keys[:, :, start:stop], layer.values[:, :, start:stop]) for layer in cache.layers])


def assemble(model: PreTrainedModel, pieces: list[KVSlice]) -> DynamicCache:
    """A fresh cache holding the pieces one after another (a reused prefix, node by node along a tree path).

    The layers are filled directly rather than through `cache.update`, which would copy the glued prefix a second
    time (it concatenates onto an empty tensor), and a single piece is not copied at all: a cache never writes
    into its tensors, it only replaces them (the next forward pass concatenates, `crop_to` slices), so sharing
    the stored piece is safe. Reusing a long prefix thus costs at most one copy of it before the next pass."""
    cache = new_cache(model)
    if pieces:
        for i, layer in enumerate(cache.layers):
            keys = [p.layers[i][0] for p in pieces]  # each (1, heads, n, head_dim)
            values = [p.layers[i][1] for p in pieces]
            keys = keys[0] if len(keys) == 1 else torch.cat(keys, dim=2)  # (1, heads, sum of n, head_dim)
            values = values[0] if len(values) == 1 else torch.cat(values, dim=2)
            layer.lazy_initialization(keys, values)
            layer.keys, layer.values = keys, values
    return cache


# -- a tree of guesses in one pass --------------------------------------------------------------------------------

def depths(parents: tuple[int, ...]) -> list[int]:
    """Each node's depth in a tree whose parents come before their children; the root's is 0."""
    depth = [0] * len(parents)
    for i in range(1, len(parents)):
        depth[i] = depth[parents[i]] + 1
    return depth


def tree_mask(model: PreTrainedModel, n_ctx: int, held: int, parents: tuple[int, ...], nodes: range):
    """The attention mask that lets one pass check a tree of guesses (SpecInfer, Medusa). The queries are the
    committed tokens the cache lacks (ids[held:n_ctx]), then the tree's nodes `nodes`; the keys are the committed
    tokens, then nodes 1 .. nodes.stop - 1 (node i at key n_ctx + i - 1: nodes before `nodes` are already cached,
    as when a draft model grows a tree level by level). Committed tokens see the context causally; each node sees
    the context and its own ancestors, nothing of its siblings or cousins. A (1, 1, queries, keys) float mask, 0
    where attention is allowed and the dtype's minimum where not; with sliding-window layers the window is applied
    by position (the root's plus the depth) too, as a {"full_attention": ..., "sliding_attention": ...} pair when
    only some layers slide."""
    dev, dtype = model.device, next(model.parameters()).dtype
    m, depth = n_ctx - held, depths(parents)
    allowed = torch.zeros(m + len(nodes), n_ctx + nodes.stop - 1, dtype=torch.bool, device=dev)
    allowed[:m, :n_ctx] = torch.ones(m, n_ctx, dtype=torch.bool, device=dev).tril(held)
    allowed[m:, :n_ctx] = True
    for row, i in enumerate(nodes, start=m):
        j = i
        while j > 0:  # node i and its ancestors; the root is the last committed token, already visible
            allowed[row, n_ctx + j - 1] = True
            j = parents[j]
    key_positions = torch.tensor(list(range(n_ctx)) + [n_ctx - 1 + d for d in depth[1:nodes.stop]], device=dev)
    positions = torch.cat([key_positions[held:n_ctx], key_positions[n_ctx + nodes.start - 1:]])  # the queries

    def as_mask(a: torch.Tensor) -> torch.Tensor:
        return torch.zeros(1, 1, *a.shape, dtype=dtype, device=dev).masked_fill(~a, torch.finfo(dtype).min)

    config = model.config.get_text_config(decoder=True)
    window, types = getattr(config, "sliding_window", None), getattr(config, "layer_types", None)
    if not window or (types is not None and "sliding_attention" not in types):
        return as_mask(allowed), positions
    windowed = allowed & (positions[:, None] - key_positions[None, :] < window)
    if types is None or set(types) == {"sliding_attention"}:
        return as_mask(windowed), positions
    return {"full_attention": as_mask(allowed), "sliding_attention": as_mask(windowed)}, positions


@torch.inference_mode()
def forward_tree(model: PreTrainedModel, ids: list[int], parents: tuple[int, ...], tokens: tuple[int, ...],
                 cache: DynamicCache, vocab_size: int, nodes: range | None = None, features: bool = False):
    """One pass over the committed tokens the cache lacks and the tree nodes `nodes` (all but the root by default)
    of a tree of guesses laid after them: node 0, the root, is ids[-1]; node i's parent is parents[i]. Each node's
    position is the root's plus its depth, not its index in the flattened tree. Returns the float32 logits at the
    last committed token (the root), when it is among the queries, and at every node of `nodes`:
    `(queries, vocab_size)`. The cache grows by every query; `keep` then compacts it to the accepted path. With
    `features`, also the last hidden state at every query, `(queries, hidden)`, as `forward` gives it."""
    nodes = range(1, len(parents)) if nodes is None else nodes
    n_ctx = len(ids)
    held = min(length(cache), n_ctx)  # committed tokens cached (a growing tree's earlier levels come after them)
    mask, positions = tree_mask(model, n_ctx, held, parents, nodes)
    x = torch.tensor([ids[held:] + [tokens[i] for i in nodes]], dtype=torch.long, device=model.device)  # (1, q)
    last = len(nodes) + (1 if n_ctx > held else 0)  # the root's logits too, when the root is fed now
    out = model(input_ids=x, attention_mask=mask, position_ids=positions.view(1, -1), use_cache=True,
                logits_to_keep=last, output_hidden_states=features, **{cache_keyword(type(model)): cache})
    logits = out.logits[0, -last:, :vocab_size].float()
    return (logits, out.hidden_states[-1][0]) if features else logits


@torch.inference_mode()
def keep(cache: DynamicCache, rows: list[int]) -> None:
    """Keep only the given token rows of every layer, in that order (after a tree pass: the committed tokens, then
    the accepted path's nodes); the rows of rejected branches are gone."""
    index = None
    for layer in cache.layers:
        if index is None:
            index = torch.tensor(rows, dtype=torch.long, device=layer.keys.device)
        keys, values = layer.keys.index_select(2, index), layer.values.index_select(2, index)
        room = layer.room if isinstance(layer, GrowingLayer) else None
        if room is not None and room[0].data_ptr() == layer.keys.data_ptr():  # back into its own room, in place
            room[0][..., :len(rows), :], room[1][..., :len(rows), :] = keys, values
            keys, values = room[0][..., :len(rows), :], room[1][..., :len(rows), :]
        layer.keys, layer.values = keys, values
