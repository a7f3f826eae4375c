"""A suffix tree of token sequences that guesses what comes next from what came next before (SuffixDecoding,
Oliaro et al., arXiv:2411.04975).

Every sequence added (a request's prompt and output, or the outputs of earlier requests) puts each of its suffixes
into one trie, cut at `depth` tokens: the path root -> a -> b -> c exists once "a b c" occurred anywhere, and each
node counts its occurrences. So for a context ending in "a b", the children of the node a -> b are the tokens that
followed "a b" before, with counts, and

    P(next = t | "a b")  ~  count(a b t) / count(a b)                  (the paper's empirical probability D)

Guessing is two steps:

    match     a suffix of the context that is a path of the tree with something after it; a longer match is
              more specific, its continuation more likely the right one, but a path holds at most `depth`
              tokens, match and guess together, so every match is tried and the best guess kept
    grow      from the matched node, the most likely continuations: a chain (the likeliest child, again and
              again) or a tree (best first by path probability, the product of D along the path), at most
              `limit` guesses, where the paper makes the limit grow with the match length (a long match earns a
              long guess) and drops a guess whose path probability is below `min_prob`

The guesses are certain tokens, point masses, so the chosen-token rule (teachspec/speculative/tree.py) keeps the
output exactly the target's at any temperature.

A live request's sequence grows a token at a time: `extend` adds the new token to each of the `depth` suffixes
that end at it, O(depth) per token, keeping those suffixes' nodes (`_ends`) so nothing is walked again. `remove`
takes a sequence out again (its counts down, nodes at zero dropped), which is how a bounded tree evicts. There is
no torch here, as in the radix tree: token ids are ints.

Given an EventLog, the tree records itself as the radix cache does (teachspec/events.py), so `RadixTreeView`
draws it: an Insert for each node made (one token, `ids` its token), an Evict for each node a removal empties
(leaves first), and a Match for each guess, naming the matched suffix's path from the root and the nodes of the
branch it proposes (`proposed`), which the view highlights apart from the match.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass, field

from teachspec.events import EventLog, Evict, Insert, Match as MatchEvent
from teachspec.validate import check_int, check_token_ids


@dataclass(slots=True, eq=False)
class SuffixNode:
    id: int                                               # stable for the node's life, as in the radix cache
    count: int = 0                                        # how often the path root -> here occurred
    children: dict[int, "SuffixNode"] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SuffixMatch:
    length: int                                           # tokens of the context's end matched (0: none)
    node: SuffixNode                                            # where the match ends (the root when length is 0)
    path: tuple[int, ...] = (0,)                          # node ids root -> node


@dataclass(frozen=True, slots=True)
class Guess:
    """Guessed tokens as a tree: node i > 0 is tokens[i], its parent parents[i] (node 0, the root, is the last
    token of the context), prob[i] the path probability the tree gave it; a chain has parents (-1, 0, 1, 2, ...)."""
    parents: tuple[int, ...]
    tokens: tuple[int, ...]
    prob: tuple[float, ...]
    match: int                                            # the match length the guess grew from
    nodes: tuple[int, ...] = field(default=(), compare=False)  # the tree's node id of each guess (0: the match's)


class SuffixTree:
    """The suffixes of every sequence added, cut at `depth` tokens, counted (see the module docstring)."""

    def __init__(self, depth: int = 24, events: EventLog | None = None):
        self.depth = check_int("depth", depth, 2)
        self.events = events
        self._ids = itertools.count(1)
        self.root = SuffixNode(0)
        self.sequences: dict[object, list[int]] = {}      # id -> its tokens, as added
        self._ends: dict[object, list[SuffixNode]] = {}   # id -> nodes of its suffixes ending at its last token
        self._tokens = 0                                  # tokens held, summed over the sequences

    def __len__(self) -> int:
        """Tokens held, summed over the sequences."""
        return self._tokens

    def __contains__(self, seq_id: object) -> bool:
        return seq_id in self.sequences

    # -- building ------------------------------------------------------------------------------------------------

    def add(self, seq_id: object, tokens: list[int]) -> None:
        """A new sequence, all its tokens at once (an earlier request's output, a prompt)."""
        if seq_id in self.sequences:
            raise ValueError(f"sequence {seq_id!r} is in the tree already; extend it, or remove it first")
        tokens = check_token_ids("tokens", tokens)
        self.sequences[seq_id], self._ends[seq_id] = [], []
        self._grow(seq_id, tokens)

    def extend(self, seq_id: object, tokens: list[int]) -> None:
        """More tokens at the end of a sequence already added (a live request's new tokens)."""
        if seq_id not in self.sequences:
            raise KeyError(f"no sequence {seq_id!r} in the tree: add it first")
        self._grow(seq_id, check_token_ids("tokens", tokens))

    def _grow(self, seq_id: object, tokens: list[int]) -> None:
        ends = self._ends[seq_id]
        for t in tokens:
            # the suffixes ending at the new token: the new token alone, and each old suffix one longer, the
            # longest cut at `depth`
            ends = [self._child(self.root, t)] + [self._child(n, t) for n in ends[:self.depth - 1]]
            for n in ends:
                n.count += 1
        self._ends[seq_id] = ends
        self.sequences[seq_id].extend(tokens)
        self._tokens += len(tokens)

    def _child(self, node: SuffixNode, token: int) -> SuffixNode:
        child = node.children.get(token)
        if child is None:
            child = node.children[token] = SuffixNode(next(self._ids))
            if self.events is not None:
                self.events.emit(Insert, node=child.id, parent=node.id, tokens=1, cached=0, ids=[token])
        return child

    def remove(self, seq_id: object) -> list[int]:
        """Take a sequence out: every suffix path it added counts one less, and a node counted by nothing else goes.
        Returns its tokens."""
        if seq_id not in self.sequences:
            raise KeyError(f"no sequence {seq_id!r} in the tree")
        tokens = self.sequences.pop(seq_id)
        del self._ends[seq_id]
        self._tokens -= len(tokens)
        for i in range(len(tokens)):
            self._uncount(self.root, tokens[i:i + self.depth])
        return tokens

    def _uncount(self, node: SuffixNode, path: list[int]) -> None:
        for t in path:
            child = node.children[t]
            child.count -= 1
            if child.count == 0:
                del node.children[t]  # nothing else below it was counted: every path through it was this one
                if self.events is not None:
                    self._evicted(child, node)
                return
            node = child

    def _evicted(self, node: SuffixNode, parent: SuffixNode) -> None:
        """Evict events for `node` and everything under it, leaves first."""
        for t, child in node.children.items():
            self._evicted(child, node)
        self.events.emit(Evict, node=node.id, parent=parent.id, tokens=1)

    # -- guessing ------------------------------------------------------------------------------------------------

    def match(self, context: list[int]) -> SuffixMatch:
        """The longest suffix of `context`, at most depth - 1 tokens, that is a path of the tree with something
        after it (length 0 and the root when none is: no guess)."""
        return next(self.matches(context), SuffixMatch(0, self.root))

    def matches(self, context: list[int]):
        """Every suffix of `context` that is a path of the tree with something after it, longest first."""
        for length in range(min(self.depth - 1, len(context)), 0, -1):
            node, path = self.root, [0]
            for t in context[len(context) - length:]:
                node = node.children.get(t)
                if node is None:
                    break
                path.append(node.id)
            else:
                if node.children:  # a path that ends the tree has nothing to propose: try a shorter one
                    yield SuffixMatch(length, node, tuple(path))

    def guess(self, context: list[int], shape: tuple[int, ...], limit: int | None = None,
              min_prob: float = 0.1, factor: float | None = None) -> Guess:
        """Guessed tokens after `context`, best first by path probability: a guess at depth d (the root's children
        are at depth 0) has at most shape[d] children, so (1,) * k is a chain of at most k; at most `limit` guesses
        in all (None: as many as the shape holds), each with a path probability of at least `min_prob`; with
        `factor`, at most factor * m guesses from a match of m tokens (the paper's MAX_SPEC = alpha * p: a short
        match is weak evidence).

        A path holds at most `depth` tokens, match and guess together, so the longest match leaves the least room
        to guess: every match is tried, longest first, and the guess with the largest score (the sum of its path
        probabilities, the tokens it expects accepted) wins, the longer match on a tie."""
        if not isinstance(shape, tuple) or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 1
                                                   for b in shape):
            raise ValueError(f"shape must be a tuple of ints >= 1 (children per guess at each depth), got {shape!r}")
        limit = check_int("limit", sum(_prod(shape[:d + 1]) for d in range(len(shape))) if limit is None else limit, 0)
        if not 0.0 <= min_prob <= 1.0:
            raise ValueError(f"min_prob must be a probability in [0, 1], got {min_prob!r}")
        if factor is not None and not factor > 0:
            raise ValueError(f"factor must be > 0 (guesses per matched token), got {factor!r}")
        root = context[-1] if context else -1
        best, best_match = Guess((-1,), (root,), (1.0,), 0), None
        for m in self.matches(context):
            most = limit if factor is None else min(limit, math.ceil(factor * m.length))
            g = self._grow_guess(m, root, shape[:self.depth - m.length], most, min_prob)
            if sum(g.prob[1:]) > sum(best.prob[1:]):
                best, best_match = g, m
            if len(best.tokens) - 1 == limit and min(best.prob) == 1.0:
                break  # nothing can score more than a full guess of certain tokens
        if self.events is not None and best_match is not None:
            self.events.emit(MatchEvent, node=best_match.node.id, length=best_match.length,
                             path=list(best_match.path), proposed=list(best.nodes[1:]))
        return best

    def _grow_guess(self, m: SuffixMatch, root: int, shape: tuple[int, ...], limit: int, min_prob: float) -> Guess:
        """Best first from the matched node: a heap of (-path probability, order pushed, parent's index, token, its
        node, its depth)."""
        parents, tokens, prob, nodes = [-1], [root], [1.0], [m.node.id]
        heap, order = [], 0

        def offer(parent: int, node: SuffixNode, p: float, depth: int) -> None:
            nonlocal order
            if depth < len(shape):
                for t, child in self._likeliest(node, shape[depth]):
                    heapq.heappush(heap, (-p * child.count / node.count, order, parent, t, child, depth))
                    order += 1

        offer(0, m.node, 1.0, 0)
        while heap and len(tokens) - 1 < limit:
            p, _, parent, t, node, depth = heapq.heappop(heap)
            if -p < min_prob:
                break  # the heap gives the likeliest first: everything left is less likely still
            parents.append(parent)
            tokens.append(t)
            prob.append(-p)
            nodes.append(node.id)
            offer(len(tokens) - 1, node, -p, depth + 1)
        return Guess(tuple(parents), tuple(tokens), tuple(prob), m.length, tuple(nodes))

    @staticmethod
    def _likeliest(node: SuffixNode, n: int) -> list[tuple[int, SuffixNode]]:
        """The n most counted children of node; ties go to the smaller token id, so a guess is deterministic."""
        return sorted(node.children.items(), key=lambda kv: (-kv[1].count, kv[0]))[:n]


def _prod(xs: tuple[int, ...]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out
