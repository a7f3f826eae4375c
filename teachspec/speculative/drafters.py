"""Drafters: where the k guessed tokens come from.

A drafter looks at the committed tokens and proposes up to k >= 1 more, together with q, the distribution each token
was drawn from (or None when the proposal is certain, a point mass). The acceptance rule is only exact when q is
*exactly* what the token was sampled from, so a model drafter warps its logits with the same `SamplingParams` as
the target (temperature, top-k, top-p) and returns that warped q.

- `ModelDrafter`: a small LM with its own KV cache (Leviathan et al. 2023; Chen et al. 2023).
- `NgramDrafter`: prompt lookup: find the latest earlier occurrence of the context's last n tokens and propose
  what followed it (Saxena 2023). No model at all; pays off when the output copies the input.
- `oracle`: the target itself as its own draft: alpha = 1, the upper bound a perfect draft would reach.
- `AdversarialDrafter`: proposes the token the draft model finds *least* likely, so alpha is near 0: what bad
  guesses cost.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from teachspec import kv
from teachspec.checks import check_int
from teachspec.sampling import SamplingParams, sample, warp
from teachspec.speculative.tree import TokenTree


@dataclass
class TreeProposal:
    tree: TokenTree  # node 0 is the last committed token; every other node a guess
    q: torch.Tensor | None  # (nodes, vocab): q[i] the distribution node i's children were drawn from; None: certain
    passes: int
    seconds: float


@dataclass
class Proposal:
    tokens: list[int]  # the drafted ids, at most k of them
    q: torch.Tensor | None  # (len(tokens), vocab): the distribution each was sampled from; None: point masses
    passes: int  # draft forward passes spent
    seconds: float


class ModelDrafter:
    """A draft LM that keeps a KV cache of the committed tokens (plus its own unverified guesses).

    After each step the engine rolls it back (`roll_back`): the cache is cut to the longest prefix it shares with the
    committed tokens, so rejected guesses are forgotten. Each proposal checks that again first (a cache handed in
    from the radix tree starts the same way), so the cache holds exactly committed tokens when drafting starts.
    """

    name = "model"

    def __init__(self, model: PreTrainedModel, vocab_size: int):
        self.model, self.vocab_size = model, vocab_size
        self.reset()

    def reset(self, cache=None, ids: list[int] | None = None) -> None:
        """Start a new sequence, optionally from a cache that already holds `ids` (a reused prefix)."""
        self.cache = cache if cache is not None else kv.new_cache(self.model)
        self.cached: list[int] = list(ids or [])
        self.synced = len(self.cached)  # cached[:synced] is known to equal the committed tokens

    def _sync(self, ids: list[int]) -> list[int]:
        """Crop the cache to what it shares with `ids`; return the tokens still to feed (always at least one)."""
        n = self.synced
        while n < min(len(self.cached), len(ids) - 1) and self.cached[n] == ids[n]:
            n += 1
        n = min(n, len(ids) - 1)
        kv.crop_to(self.cache, n)
        del self.cached[n:]
        self.synced = n
        return ids[n:]

    def roll_back(self, ids: list[int]) -> None:
        """After a step: forget the guesses that were not committed. The cache is cut back to the longest prefix
        it shares with the committed `ids` (accepted guesses stay, a rejected one and those after it go), at most
        len(ids) - 1 tokens: the last committed token is fed with the next proposal."""
        self._sync(ids)

    def fill(self, ids: list[int]) -> None:
        """Make the cache hold exactly `ids` (to store it for reuse): drop stale guesses, feed what is missing."""
        feed = self._sync(ids + [0])[:-1]  # sync as if one more token followed, then feed all but that one
        if feed:
            kv.forward(self.model, feed, self.cache, 1, self.vocab_size)
            self.cached += feed

    def choose(self, q: torch.Tensor, params: SamplingParams, generator) -> int:
        return int(q.argmax()) if params.greedy else int(sample(q, generator))

    def propose(self, ids: list[int], k: int, params: SamplingParams, generator,
                stop_below: float | None = None) -> Proposal:
        """Up to k guesses; with `stop_below`, stop after a guess whose q falls below it (a confidence stop)."""
        t0 = time.perf_counter()
        feed = self._sync(ids)
        tokens, qs = [], []
        for _ in range(k):
            logits = kv.forward(self.model, feed, self.cache, 1, self.vocab_size)[0]
            self.cached += feed
            q = warp(logits, params)  # (vocab,), the same warping the target's p gets
            x = self.choose(q, params, generator)
            tokens.append(x)
            qs.append(q)
            feed = [x]  # the last guess is not fed: if it is accepted, the next proposal feeds it
            # confidence stop: the draft's own (unwarped) belief in its guess; under greedy q is one-hot and says
            # nothing. A doubtful guess is kept, but guessing past it is likely waste.
            if stop_below is not None and float(logits.softmax(-1)[x]) < stop_below:
                break
        return Proposal(tokens, self.q_of(qs, tokens), len(tokens), time.perf_counter() - t0)

    def q_of(self, qs: list[torch.Tensor], tokens: list[int]) -> torch.Tensor | None:
        return torch.stack(qs)  # (k, vocab)

    def propose_tree(self, ids: list[int], shape: tuple[int, ...], params: SamplingParams, generator) -> TreeProposal:
        """A static tree, shape[d] children for every node at depth d (Medusa's and EAGLE's static trees), grown
        level by level: one draft pass per level over all of the level's nodes, each seeing only its own ancestors
        (`kv.tree_mask`). A node's children are drawn independently from its q (SpecInfer's rule verifies them);
        under greedy decoding, where q is one-hot, they are the b tokens the draft's logits rank highest, proposed
        as certain guesses (q = None), so the target's argmax is found among them when it is there."""
        t0 = time.perf_counter()
        feed = self._sync(ids)
        logits = kv.forward(self.model, feed, self.cache, 1, self.vocab_size)  # (1, V): what follows the root
        self.cached += feed
        parents, tokens, qs, level, passes = [-1], [ids[-1]], {}, [0], 1
        for d, b in enumerate(shape):
            grown = []
            for node, row in zip(level, logits):
                q = warp(row, params)
                qs[node] = q
                children = row.topk(b).indices.tolist() if params.greedy else \
                    [int(sample(q, generator)) for _ in range(b)]
                parents += [node] * len(children)
                tokens += children
                grown += range(len(tokens) - len(children), len(tokens))
            level = grown
            if d + 1 < len(shape):  # the deepest level has no children to draft: it is never fed
                logits = kv.forward_tree(self.model, ids, tuple(parents), tuple(tokens), self.cache, self.vocab_size,
                                         nodes=range(level[0], level[-1] + 1))
                passes += 1
        self._rows = {i: i for i in range(1, level[0])}  # node -> its row after the committed ones, if it was fed
        self._tokens = tokens
        q = None if params.greedy else torch.stack([qs.get(i, torch.zeros_like(qs[0])) for i in range(len(tokens))])
        return TreeProposal(TokenTree(tuple(parents), tuple(tokens)), q, passes, time.perf_counter() - t0)

    def propose_dynamic(self, ids: list[int], depth: int, width: int = 3, nodes: int = 10) -> TreeProposal:
        """EAGLE-2's dynamic tree: `depth` levels, each expanding the `width` nodes with the highest path confidence
        (the product of the draft's probabilities along the path) into their `width` likeliest children, one draft
        pass a level; then only the `nodes` most confident guesses are kept (a child is never more confident than
        its parent, so every kept node's ancestors are kept). The children are chosen, not sampled: certain
        guesses (q = None), for which the rule is exact at any temperature."""
        t0 = time.perf_counter()
        feed = self._sync(ids)
        logits = kv.forward(self.model, feed, self.cache, 1, self.vocab_size)  # (1, V)
        self.cached += feed
        # the nodes fed so far, numbered in the order fed (so node i's keys sit at row i after the committed ones);
        # the other candidates stay leaves and are numbered after them, at the end
        parents, tokens, score, frontier, leaves, passes = [-1], [ids[-1]], [0.0], [0], [], 1
        for d in range(depth):
            grown = [(score[node] + lq, node, x) for node, row in zip(frontier, logits.log_softmax(-1))
                     for lq, x in zip(*(t.tolist() for t in row.topk(width)))]
            grown.sort(reverse=True)
            expand, leaves = grown[:width], leaves + grown[width:]
            if d + 1 == depth:
                leaves += expand
                break
            start = len(tokens)
            parents += [node for _, node, _ in expand]
            tokens += [x for _, _, x in expand]
            score += [s for s, _, _ in expand]
            frontier = list(range(start, len(tokens)))
            logits = kv.forward_tree(self.model, ids, tuple(parents), tuple(tokens), self.cache, self.vocab_size,
                                     nodes=range(start, len(tokens)))
            passes += 1
        fed = len(tokens)
        parents += [node for _, node, _ in leaves]
        tokens += [x for _, _, x in leaves]
        score += [s for s, _, _ in leaves]
        keep = [0] + sorted(sorted(range(1, len(tokens)), key=score.__getitem__, reverse=True)[:nodes])
        new = {old: i for i, old in enumerate(keep)}
        self._rows = {new[old]: old for old in keep[1:] if old < fed}
        self._tokens = [tokens[old] for old in keep]
        tree = TokenTree(tuple(-1 if old == 0 else new[parents[old]] for old in keep), tuple(self._tokens))
        return TreeProposal(tree, None, passes, time.perf_counter() - t0)

    def keep_path(self, n_before: int, path: list[int]) -> None:
        """After a tree step: keep the committed tokens' rows and those of the accepted nodes the draft has fed;
        every other branch's keys and values leave the cache."""
        fed = [i for i in path if i in self._rows]
        kv.keep(self.cache, list(range(n_before)) + [n_before - 1 + self._rows[i] for i in fed])
        self.cached = self.cached[:n_before] + [self._tokens[i] for i in fed]


class OracleDrafter(ModelDrafter):
    """The target drafting for itself (with a cache of its own): q = p, so every guess is accepted."""

    name = "oracle"


class AdversarialDrafter(ModelDrafter):
    """Proposes the draft model's least likely token, with certainty: accepted with probability p(x) ~ 0."""

    name = "adversary"

    def choose(self, q: torch.Tensor, params: SamplingParams, generator) -> int:
        return int(q.argmin())

    def q_of(self, qs: list[torch.Tensor], tokens: list[int]) -> torch.Tensor | None:
        return None  # a deterministic choice is a point mass, whatever the draft's softmax says


class NgramDrafter:
    """Prompt lookup: match the last n tokens (n from n_max down to n_min) earlier in the context and propose the
    k tokens that followed the most recent match, continuing a match that ends near the present as a repeat.
    A proposal is certain (q = None)."""

    name = "ngram"

    def __init__(self, n_max: int = 3, n_min: int = 1):
        self.n_max = check_int("n_max", n_max, 1)
        self.n_min = check_int("n_min", n_min, 1)
        if self.n_min > self.n_max:
            raise ValueError(f"n_min must be <= n_max, got n_min={n_min}, n_max={n_max}")

    def reset(self, cache=None, ids: list[int] | None = None) -> None:
        pass  # nothing to remember between steps

    def roll_back(self, ids: list[int]) -> None:
        pass  # no cache: a rejected guess leaves nothing behind

    def propose_tree(self, ids: list[int], shape: tuple[int, ...], params=None, generator=None) -> TreeProposal:
        """Several matches become several branches: what followed each earlier occurrence of the context's last
        n tokens (the most recent first, n from n_max down), merged into a tree of at most len(shape) levels with
        at most shape[d] children per node at depth d. Every guess is certain (q = None)."""
        t0 = time.perf_counter()
        parents, tokens = [-1], [ids[-1]]
        children: dict[tuple[int, int], int] = {}  # (parent node, token) -> node
        for follow in self._matches(ids):
            node = 0
            for d, token in enumerate(ids[follow:follow + len(shape)]):
                if (node, token) not in children:
                    if sum(1 for (n, _) in children if n == node) >= shape[d]:
                        break  # this node has all the branches its depth allows
                    children[(node, token)] = len(tokens)
                    parents.append(node)
                    tokens.append(token)
                node = children[(node, token)]
        return TreeProposal(TokenTree(tuple(parents), tuple(tokens)), None, 0, time.perf_counter() - t0)

    def keep_path(self, n_before: int, path: list[int]) -> None:
        pass  # no cache

    def _matches(self, ids: list[int]) -> list[int]:
        """Where the text after each earlier match of the suffix starts: longest n first, most recent first."""
        seq, found = torch.tensor(ids, device="cpu"), []
        for n in range(min(self.n_max, len(ids) - 1), self.n_min - 1, -1):
            windows = seq[:-1].unfold(0, n, 1)  # (len - n, n)
            starts = (windows == seq[-n:]).all(-1).nonzero().flatten().tolist()
            found += [s + n for s in reversed(starts) if s + n not in found]
        return found

    def propose(self, ids: list[int], k: int, params: SamplingParams, generator,
                stop_below: float | None = None) -> Proposal:
        t0 = time.perf_counter()
        seq = torch.tensor(ids, device="cpu")  # bookkeeping on token ids: the CPU, whatever the models' device
        for n in range(min(self.n_max, len(ids) - 1), self.n_min - 1, -1):
            windows = seq[:-1].unfold(0, n, 1)  # (len - n, n): every earlier n-gram, excluding the suffix itself
            starts = (windows == seq[-n:]).all(-1).nonzero().flatten()
            if len(starts):
                follow = int(starts[-1]) + n  # the most recent match; propose what came after it
                # A match that ends near the present has fewer than k tokens after it: the text is then taken to
                # repeat with period len(ids) - follow (an overlapping copy, as in LZ77), so a loop is guessed
                # k tokens ahead rather than only as far as the match reaches.
                after = ids[follow:]
                tokens = (after * -(-k // len(after)))[:k]
                return Proposal(tokens, None, 0, time.perf_counter() - t0)
        return Proposal([], None, 0, time.perf_counter() - t0)


Drafter = ModelDrafter | NgramDrafter  # what the engine asks for guesses: reset, propose(_tree), roll_back, name
