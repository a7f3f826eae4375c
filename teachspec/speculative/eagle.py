"""The EAGLE drafter: guesses from the target's own features, through a one-layer head (`speculate="eagle"`).

The head (`teachspec.models.eagle`) reads, at token position t, the target's feature f_{t-1} and the embedding of
x_t, and predicts f_t; the target's LM head turns that into q. So the drafter depends on the target in a way no
draft model does: it can only start where the target has already computed features. The engine hands it the
target's last hidden state after every pass (`observe`), for the committed tokens only.

Its cache holds one entry per token position, from `start` (the first position whose predecessor has a feature)
up to the last committed token, every entry built from *real* features. Drafting then feeds the head its own
guesses, f^ in place of f, one entry per guess (or per tree level); those entries are dropped after the step
(`roll_back`), even for accepted guesses, whose real features the target has just computed: the next step rebuilds
them from those. That is EAGLE's scheme (Li et al. 2024, arXiv:2401.15077, Section 4).

With a reduced draft vocabulary (`EagleHead.draft_vocab`, EAGLE-3) q is computed over V' tokens only, by the
target's LM-head rows for them. Guesses are drawn, and trees grown, over those V' entries; each guess is then mapped
to its full-vocabulary id by the table, and the q handed to verification is widened to the full vocabulary with 0
everywhere else, once per step (`widen`). So a guess outside the draft vocabulary never happens, and the rule
judges every guess by exactly the q it was drawn from.

The draft vocabulary is used for greedy guesses, where only the head's top token matters: the tokens outside it are
seldom the target's choice (with the bundled head, 1,024 of 4,096 tokens hold 0.90 of the target's held-out tokens,
and the first guess's greedy agreement falls only from 0.731 to 0.723). Sampled, every token outside it is mass
q cannot offer, and acceptance falls by about that share (alpha 0.84 -> 0.72 at temperature 1, measured side by
side), far more than the smaller read-out saves; so by default a sampled guess reads q over the whole vocabulary
(`reduce_sampled = False`). Either way q is exactly what the guess was drawn from.

The first step of a request drafts nothing: the target has not yet read the prompt, so there is no feature to
start from. One plain step later there is. A prefix reused from the radix cache has no stored features either, so
the head starts at the first position the target computes (it never sees the cached prefix itself; the features
it reads carry that prefix's information, as the target read it).
"""

from __future__ import annotations

import time

import torch
from transformers import PreTrainedModel

from teachspec import kv
from teachspec.models.eagle import EagleHead, linear
from teachspec.sampling import SamplingParams, sample, warp
from teachspec.speculative.drafters import Proposal, TreeProposal, grow_dynamic, grow_static
from teachspec.speculative.tree import TokenTree


def widen(q: torch.Tensor, vocab: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """q over a draft vocabulary, (..., V'), entry i being token vocab[i], as a distribution over the full
    vocabulary, (..., vocab_size): the same numbers at the table's ids and 0 at every other token (never drawn, so
    never to be judged)."""
    full = q.new_zeros(*q.shape[:-1], vocab_size)
    full[..., vocab.to(q.device)] = q
    return full


class EagleDrafter:
    """Chains (`propose`), static trees (`propose_tree`) and EAGLE-2's dynamic trees (`propose_dynamic`) from an
    EAGLE head over `target`'s features."""

    name = "eagle"
    reads_features = True  # the engine passes the target's hidden states to `observe`
    reduce_sampled = False  # sampled guesses over the draft vocabulary too (see the module docstring)

    def __init__(self, head: EagleHead, target: PreTrainedModel, vocab_size: int):
        self.head, self.vocab_size = head, vocab_size
        self.embed, self.full_lm_head = target.get_input_embeddings(), head.lm_head(target, whole=True)
        self.draft_vocab, self.draft_lm_head = head.draft_vocab, head.lm_head(target)  # (V',) ids, or None
        if self.draft_vocab is not None:
            self.draft_ids = head.vocab_ids(vocab_size)  # checked against the pair's vocabulary; entry -> id
        self.read_out(None)
        self.reset()

    def read_out(self, params: SamplingParams | None) -> None:
        """Choose q's vocabulary for the next proposal: the draft vocabulary when the head has one and the guesses
        are greedy (or `reduce_sampled`), else the whole vocabulary."""
        reduced = self.draft_vocab is not None and (params is None or params.greedy or self.reduce_sampled)
        self.vocab, self.lm_head = (self.draft_vocab, self.draft_lm_head) if reduced else (None, self.full_lm_head)

    def reset(self, cache=None, ids: list[int] | None = None) -> None:
        """A new sequence. A leased draft cache belongs to a draft model, never to this head: it is not used."""
        self.cache = kv.new_cache(self.head.layers)
        self.first: int | None = None  # position of the first real feature held
        self.features: torch.Tensor | None = None  # (m, H): f_first .. f_{first + m - 1}, a view of `room`
        self.room: torch.Tensor | None = None
        self.real = 0  # cache entries built from real features (the rest are this step's guesses)

    @property
    def start(self) -> int:
        """The position of the cache's first entry: it reads the first real feature, of the position before."""
        return self.first + 1

    def observe(self, first: int, features: torch.Tensor) -> None:
        """The target's features of positions first .. first + len(features) - 1, from a pass; those of guesses
        that are not committed go at the next `roll_back`. They are written into spare room that doubles when full
        (as `kv.GrowingLayer` does for keys and values), so a step copies its new features, not all of them."""
        if self.features is None:
            self.first, self.features = first, features[:0]
        keep, n = first - self.first, first - self.first + len(features)
        if self.room is None or self.room.shape[0] < n:
            room = features.new_empty(max(2 * n, 64), features.shape[-1])  # (room, H)
            room[:keep] = self.features[:keep]
            self.room = room
        self.room[keep:n] = features
        self.features = self.room[:n]  # (m, H): f_first .. f_{first + m - 1}

    def _q_logits(self, f_hat: torch.Tensor) -> torch.Tensor:
        """q's logits, (..., V') over the draft vocabulary (the full vocabulary's V without one)."""
        logits = linear(self.lm_head, f_hat.to(self.lm_head.weight.dtype))  # a bfloat16 head, the target's read-out
        return (logits if self.vocab is not None else logits[..., :self.vocab_size]).float()

    def token(self, i: int) -> int:
        """The full-vocabulary id of entry i of q."""
        return self.draft_ids[i] if self.vocab is not None else i

    def widen(self, q: torch.Tensor) -> torch.Tensor:
        """q over this proposal's vocabulary as a distribution over the full vocabulary (`widen`)."""
        return q if self.vocab is None else widen(q, self.vocab, self.vocab_size)

    def _run(self, features: torch.Tensor, tokens: list[int], positions: list[int], mask=None) -> torch.Tensor:
        """One head pass on top of the cache: entry j reads features[j] and tokens[j]; returns f^ (n, H)."""
        dev = self.head.device
        ids = torch.tensor([tokens], dtype=torch.long, device=dev)
        pos = torch.tensor([positions], dtype=torch.long, device=dev)
        return self.head(features[None], self.embed(ids), pos, cache=self.cache, attention_mask=mask)[0]

    def _sync(self, ids: list[int]) -> torch.Tensor | None:
        """Feed the entries up to the last committed token from real features; return f^ there (what the head
        guesses the target's feature at the root will be), or None while no feature of position len(ids) - 2
        is known (the first step)."""
        n = len(ids)
        if self.features is None or self.first + len(self.features) < n - 1:
            return None
        kv.crop_to(self.cache, self.real)
        todo = range(self.start + self.real, n)  # at least the last committed token: `roll_back` keeps it out
        out = self._run(self.features[todo.start - 1 - self.first:n - 1 - self.first], ids[todo.start:n],
                        list(todo))
        self.real = n - self.start
        return out[-1]

    def roll_back(self, ids: list[int]) -> None:
        """Drop this step's guessed entries, and the features of positions that were not committed (a target
        pass reads every guess; `observe` is handed them all)."""
        if self.first is not None:
            self.features = self.features[:max(0, len(ids) - 1 - self.first)]
            self.real = max(0, min(self.real, len(ids) - 1 - self.start))
            kv.crop_to(self.cache, self.real)

    def keep_path(self, n_before: int, path: list[int]) -> None:
        pass  # every tree node read a guessed feature: the engine's `roll_back` next drops them all

    def choose(self, q: torch.Tensor, params: SamplingParams, generator) -> int:
        return int(q.argmax()) if params.greedy else int(sample(q, generator))

    def propose(self, ids: list[int], k: int, params: SamplingParams, generator,
                stop_below: float | None = None) -> Proposal:
        """Up to k guesses, one head pass each: the guess's f^ is fed back as the next entry's feature."""
        t0 = time.perf_counter()
        f_hat = self._sync(ids)
        if f_hat is None:
            return Proposal([], None, 0, time.perf_counter() - t0)
        self.read_out(params)
        tokens, qs, n = [], [], len(ids)
        for i in range(k):
            logits = self._q_logits(f_hat)  # (V',)
            if params.greedy:  # the head's argmax: a certain guess, judged as a point mass (q = None), as a
                x = int(logits.argmax())  # one-hot q would be, without building one
            else:
                q = warp(logits, params)  # the same warping the target's p gets, over the draft vocabulary
                x = self.choose(q, params, generator)
                qs.append(q)
            tokens.append(self.token(x))  # x is an entry of q; the guess is its token id
            if i + 1 == k or (stop_below is not None and float(logits.softmax(-1)[x]) < stop_below):
                break
            f_hat = self._run(f_hat[None], [tokens[-1]], [n + i])[-1]
        q = self.widen(torch.stack(qs)) if qs else None  # (k, V): once a step, not once a guess
        return Proposal(tokens, q, len(tokens), time.perf_counter() - t0)

    def _feed(self, ids: list[int], f_root: torch.Tensor):
        """One head pass over new tree nodes (those before them are cached): node i reads its parent's f^ and its
        own token, and sees the committed entries and its own ancestors (`kv.tree_mask`); their logits."""
        f_hats, n_ctx = [f_root], len(ids) - self.start  # f^ of every node fed, root first; committed entries

        def feed(parents: list[int], tokens: list[int], nodes: range) -> torch.Tensor:
            mask, positions = kv.tree_mask(self.head.layers, n_ctx, n_ctx, tuple(parents), nodes)
            features = torch.stack([f_hats[parents[i]] for i in nodes])
            # a tree grows over entries of q: node i (never the root) holds entry tokens[i]
            out = self._run(features, [self.token(tokens[i]) for i in nodes], (positions + self.start).tolist(),
                            mask)
            f_hats.extend(out)
            return self._q_logits(out)
        return feed

    def propose_tree(self, ids: list[int], shape: tuple[int, ...], params: SamplingParams,
                     generator) -> TreeProposal:
        """A static tree (`grow_static`), one head pass a level."""
        return self._tree(ids, params, lambda logits, feed: grow_static(logits, ids[-1], shape, params, generator,
                                                                        feed))

    def propose_dynamic(self, ids: list[int], depth: int, params: SamplingParams, generator, width: int = 3,
                        nodes: int = 10) -> TreeProposal:
        """EAGLE-2's dynamic tree (`grow_dynamic`), one head pass a level."""
        return self._tree(ids, params, lambda logits, feed: grow_dynamic(logits, ids[-1], depth, params, generator,
                                                                         feed, width, nodes))

    def _tree(self, ids: list[int], params: SamplingParams, grow) -> TreeProposal:
        t0 = time.perf_counter()
        f_root = self._sync(ids)
        if f_root is None:  # no feature yet: no guess (the first step)
            return TreeProposal(TokenTree((-1,), (ids[-1],)), None, 0, time.perf_counter() - t0)
        self.read_out(params)
        grown = grow(self._q_logits(f_root)[None], self._feed(ids, f_root))
        tree, q = grown.tree, grown.q  # the tree's guesses are entries of q (the root is ids[-1] itself)
        if self.vocab is not None:
            tree = TokenTree(tree.parents, (tree.tokens[0], *map(self.token, tree.tokens[1:])))
            q = None if q is None else self.widen(q)  # (nodes, V)
        return TreeProposal(tree, q, grown.passes, time.perf_counter() - t0, grown.kind)
