"""Drafters: where the k guessed tokens come from.

A drafter looks at the committed tokens and proposes up to k >= 1 more, together with q, the distribution each token
was drawn from (or None when the proposal is certain, a point mass). The acceptance rule is only exact when q is
*exactly* what the token was sampled from, so a model drafter warps its logits with the same `SamplingParams` as
the target (temperature, top-k, top-p) and returns that warped q.

- `ModelDrafter`: a small LM with its own KV cache (Leviathan et al. 2023; Chen et al. 2023). It also grows
  trees of guesses, static shapes and EAGLE-2's dynamic tree; sampled, a node's children are drawn *without
  replacement* (`draw_without_replacement`), so siblings are distinct and a second guess is never wasted on the
  token the first already offered.
- `NgramDrafter`: prompt lookup: find the latest earlier occurrence of the context's last n tokens and propose
  what followed it (Saxena 2023). No model at all; pays off when the output copies the input.
- `oracle`: the target itself as its own draft: alpha = 1, the upper bound a perfect draft would reach.
- `AdversarialDrafter`: proposes the token the draft model finds *least* likely, so alpha is near 0: what bad
  guesses cost.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel

from teachspec import kv
from teachspec.sampling import SamplingParams, sample, warp
from teachspec.speculative.tree import Kind, TokenTree
from teachspec.validate import check_int


@dataclass
class TreeProposal:
    tree: TokenTree  # node 0 is the last committed token; every other node a guess
    q: torch.Tensor | None  # (nodes, vocab): q[i] the distribution node i's children were drawn from; None: certain
    passes: int
    seconds: float
    kind: Kind = "independent"  # how each node's children were drawn from q[i]: what `verify_tree` must be told


@dataclass
class Proposal:
    tokens: list[int]  # the drafted ids, at most k of them
    q: torch.Tensor | None  # (len(tokens), vocab): the distribution each was sampled from; None: point masses
    passes: int  # draft forward passes spent
    seconds: float


def draw_without_replacement(q: torch.Tensor, b: int, generator) -> list[list[int]]:
    """b distinct tokens from each row of q (rows, vocab), in the order drawn: the first from q, each next one from
    q without the tokens drawn before it, renormalised; that is what `verify_tree(kind="without_replacement")`
    judges them by. A row with fewer than b tokens of q > 0 gives all of those.

    Gumbel-top-k (Vieira 2014; Kool et al. 2019, arXiv:1903.06059): add independent Gumbel noise -log(-log u) to
    log q and take the b largest keys, largest first. The largest is a sample of q (the Gumbel-max trick) and,
    given which token it was, the other keys are still independent Gumbels added to log q, so the next largest is
    the same trick on q without it. One uniform per vocabulary entry, every row at once."""
    u = 1.0 - torch.rand(q.shape, generator=generator, dtype=torch.float64, device=q.device)  # (rows, vocab) in (0, 1]
    keys = (q.double().log() - (-u.log()).log()).masked_fill(q <= 0, -math.inf)  # log q + Gumbel; q = 0: never
    top = keys.topk(min(b, q.shape[-1]), dim=-1)  # (rows, b), largest first
    return [[x for x, key in zip(xs, ks) if key > -math.inf] for xs, ks in zip(top.indices.tolist(),
                                                                            top.values.tolist())]


@dataclass
class Grown:
    """A tree grown from a drafter's logits: the tree, q (None: certain guesses), the draft passes, how the
    children were drawn, how many nodes (from node 0) were fed to the drafter, and for a dynamic tree, each kept
    fed node's index in the order fed (`rows`)."""
    tree: TokenTree
    q: torch.Tensor | None
    passes: int
    kind: Kind
    fed: int = 0
    rows: dict[int, int] = field(default_factory=dict)


Feed = Callable[[list[int], list[int], range], torch.Tensor]  # (parents, tokens, nodes) -> their logits (n, V)


def grow_static(logits: torch.Tensor, root: int, shape: tuple[int, ...], params: SamplingParams, generator,
                feed: Feed) -> Grown:
    """A static tree, shape[d] children for every node at depth d (Medusa's and EAGLE's static trees), from the
    root's logits (1, V); `feed` runs the drafter over each new level but the deepest. A node's children are drawn
    from its q without replacement (recursive rejection sampling verifies them, Jeon et al. 2024); under greedy
    decoding, where q is one-hot, they are the b tokens the drafter's logits rank highest, proposed as certain
    guesses (q = None), so the target's argmax is found among them when it is there.

    Why not independent draws (SpecInfer)? The rule is exact either way, but a child drawn with replacement
    repeats an earlier sibling with probability q(x_1) (and more), and a repeat is wasted: x_1 is rejected only
    where p'(x_1) < q(x_1), so the residual the next sibling is judged by is 0 at x_1. Distinct siblings always
    offer the target something new."""
    parents, tokens, qs, level, passes = [-1], [root], {}, [0], 1
    for d, b in enumerate(shape):
        q = warp(logits, params)  # (len(level), V), the same warping the target's p gets
        picks = logits.topk(b).indices.tolist() if params.greedy else draw_without_replacement(q, b, generator)
        grown = []
        for node, row, children in zip(level, q, picks):
            qs[node] = row
            parents += [node] * len(children)
            tokens += children
            grown += range(len(tokens) - len(children), len(tokens))
        level = grown
        if d + 1 < len(shape):  # the deepest level has no children to draft: it is never fed
            logits = feed(parents, tokens, range(level[0], level[-1] + 1))
            passes += 1
    q = None if params.greedy else torch.stack([qs.get(i, torch.zeros_like(qs[0])) for i in range(len(tokens))])
    return Grown(TokenTree(tuple(parents), tuple(tokens)), q, passes, "without_replacement", fed=level[0])


def grow_dynamic(logits: torch.Tensor, root: int, depth: int, params: SamplingParams, generator, feed: Feed,
                 width: int = 3, nodes: int = 10) -> Grown:
    """EAGLE-2's dynamic tree (Li et al. 2024, arXiv:2406.16858): `depth` levels, one drafter pass a level. Each
    level draws `width` children for every node it expands, then expands the `width` most *confident* of them,
    confidence being the product of the draft's probabilities along the path; at the end only the `nodes`
    most *valuable* guesses are kept.

    Greedy: the children are the `width` likeliest tokens, certain guesses (q = None), and a guess's value is
    its confidence. Certain guesses are exact however they were chosen.

    Sampled: the children are drawn from q without replacement and judged so. Then the guesses kept must not
    be chosen by the drawn tokens themselves: a sample kept because it is likely is no longer a sample of q,
    and the output would be biased. So a child's value is fixed *before* it is drawn: its parent's confidence
    times the draft's mass not yet drawn at the parent (the draft's own chance that the next token is none of
    the earlier siblings). It is never above its parent's value or its earlier sibling's, and everything that
    depends on the drawn token (its confidence, its later siblings' and descendants' values) is never above
    it; so whether a child is kept is decided by guesses ranked above it, none of which depends on it. Every
    node keeps its first children in the order drawn, and each next one is kept or not before it is looked
    at: a stopping rule, which the multi-draft rule allows (`verify_tree`'s induction over the children)."""
    # the nodes fed, numbered in the order fed (node i's keys sit at row i after the committed ones); every
    # child drawn is a guess (value, parent node, token, log confidence), in the order drawn; fed_as: the node
    # a guess was fed as, if it was
    parents, tokens, confidence, qs = [-1], [root], [0.0], {}
    guesses, fed_as, frontier, passes = [], {}, [0], 1
    for d in range(depth):
        first = len(guesses)
        if params.greedy:
            log_p = logits.log_softmax(-1)
            for node, row, children in zip(frontier, log_p, log_p.topk(width).indices.tolist()):
                guesses += [(confidence[node] + lp, node, x, confidence[node] + lp)
                            for x, lp in zip(children, row[children].tolist())]
        else:
            q = warp(logits, params)  # (len(frontier), V), the same warping the target's p gets
            for node, row, children in zip(frontier, q, draw_without_replacement(q, width, generator)):
                qs[node], left = row, 1.0  # left: the draft's mass not yet drawn at this node
                for x, q_x in zip(children, row[children].tolist()):
                    value = confidence[node] + (math.log(left) if left > 0 else -math.inf)
                    guesses.append((value, node, x, min(value, confidence[node] + math.log(q_x))))
                    left -= q_x
        if d + 1 == depth:
            break
        by_confidence = sorted(range(first, len(guesses)), key=lambda g: -guesses[g][3])  # ties: drawn first
        start = len(tokens)
        for g in sorted(by_confidence[:width]):
            fed_as[g] = len(tokens)
            _, parent, x, c = guesses[g]
            parents.append(parent)
            tokens.append(x)
            confidence.append(c)
        frontier = list(range(start, len(tokens)))
        logits = feed(parents, tokens, range(start, len(tokens)))  # (width, V)
        passes += 1
    # the `nodes` most valuable guesses, numbered in the order drawn: every parent before its children, and a
    # node's children tried in the order they were drawn, which is what they are judged by
    kept = sorted(sorted(range(len(guesses)), key=lambda g: -guesses[g][0])[:nodes])  # ties: parents, drawn first
    new = {g: i for i, g in enumerate(kept, start=1)}
    number = {0: 0} | {node: new[g] for g, node in fed_as.items() if g in new}  # fed node -> its new number
    rows = {new[g]: fed_as[g] for g in kept if g in fed_as}
    tree = TokenTree((-1, *(number[guesses[g][1]] for g in kept)), (root, *(guesses[g][2] for g in kept)))
    if params.greedy:
        return Grown(tree, None, passes, "independent", rows=rows)
    zeros = torch.zeros_like(qs[0])
    q = torch.stack([qs[0]] + [qs.get(fed_as.get(g), zeros) for g in kept])  # (nodes + 1, V); leaves' unread
    return Grown(tree, q, passes, "without_replacement", rows=rows)


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
        """A static tree (`grow_static`), grown level by level: one draft pass per level over all of the level's
        nodes, each seeing only its own ancestors (`kv.tree_mask`)."""
        t0 = time.perf_counter()
        grown = grow_static(self._root_logits(ids), ids[-1], shape, params, generator, self._feed(ids))
        self._rows = {i: i for i in range(1, grown.fed)}  # node -> its row after the committed ones, if it was fed
        self._tokens = list(grown.tree.tokens)
        return TreeProposal(grown.tree, grown.q, grown.passes, time.perf_counter() - t0, grown.kind)

    def propose_dynamic(self, ids: list[int], depth: int, params: SamplingParams, generator, width: int = 3,
                        nodes: int = 10) -> TreeProposal:
        """EAGLE-2's dynamic tree (`grow_dynamic`), one draft pass a level."""
        t0 = time.perf_counter()
        grown = grow_dynamic(self._root_logits(ids), ids[-1], depth, params, generator, self._feed(ids), width,
                             nodes)
        self._rows = grown.rows
        self._tokens = list(grown.tree.tokens)
        return TreeProposal(grown.tree, grown.q, grown.passes, time.perf_counter() - t0, grown.kind)

    def _root_logits(self, ids: list[int]) -> torch.Tensor:
        feed = self._sync(ids)
        logits = kv.forward(self.model, feed, self.cache, 1, self.vocab_size)  # (1, V): what follows the root
        self.cached += feed
        return logits

    def _feed(self, ids: list[int]):
        """One draft pass over tree nodes `nodes` (those before them are cached): their logits, (len(nodes), V)."""
        def feed(parents: list[int], tokens: list[int], nodes: range) -> torch.Tensor:
            return kv.forward_tree(self.model, ids, tuple(parents), tuple(tokens), self.cache, self.vocab_size,
                                   nodes=nodes)
        return feed

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
