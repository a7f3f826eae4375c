"""Suffix decoding: guesses from what followed the same words before, in this request and in earlier ones
(SuffixDecoding, Oliaro et al., arXiv:2411.04975). No draft model at all.

Two suffix trees (teachspec/speculative/suffix_tree.py) hold what can be repeated:

    the request's own     its prompt and what it has written so far: a request that quotes its prompt, or repeats
                          itself, finds the words here (prompt lookup finds the same, for the prompt alone)
    the engine's          the outputs of earlier requests, kept across requests (`SuffixCache`, one per engine),
                          bounded in tokens: the least recently used output goes first, as in the radix cache.
                          Agents, programs and code edits write the same things again and again: this is where the
                          course's two ideas meet, a cache that saves passes rather than prefill

At each step both trees match the longest suffix of the context and grow their likeliest continuations (a chain, or
a tree of `shape`); the guess with the larger score, the sum of its path probabilities (the paper's expected
accepted tokens), is proposed. A short match is weak evidence, so a guess is cut to `factor` times the match
length (the paper's MAX_SPEC = alpha * p). The guesses are certain tokens (q = None), which the chosen-token rule
judges exactly at any temperature; nothing is sampled, so a step costs no draft pass.

`HybridDrafter` (speculate="hybrid") takes the trees' guess when they are confident and the draft model's
otherwise, step by step, so that text never seen before loses nothing to them.
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from teachspec.events import EventLog
from teachspec.speculative.drafters import Proposal, TreeProposal
from teachspec.speculative.suffix_tree import Guess, SuffixTree
from teachspec.speculative.tree import TokenTree
from teachspec.validate import check_int

DEPTH = 24           # tokens a suffix may hold: vLLM's default `suffix_decoding_max_tree_depth`
CACHE_TOKENS = 65_536  # the engine's tree of earlier outputs, at most this many tokens
FACTOR = 4.0         # guesses per matched token: the paper's alpha in MAX_SPEC = alpha * p (see SuffixDrafter)
LONGEST = 16         # the hybrid's suffix guesses may run this long whatever k the draft model is given


@dataclass
class SuffixCache:
    """Earlier requests' outputs in one suffix tree, at most `tokens` tokens, least recently used out first; a
    request's output joins it as it is written. Given `events`, the tree records its nodes and matches there, for
    `RadixTreeView` to draw: `engine.learnt["suffix"] = SuffixCache(events=EventLog())` before the first request."""
    tokens: int = CACHE_TOKENS
    depth: int = DEPTH
    events: EventLog | None = None
    tree: SuffixTree = field(init=False)
    used: OrderedDict = field(init=False, default_factory=OrderedDict)  # sequence id -> None, least recent first
    _ids: itertools.count = field(init=False, default_factory=itertools.count)

    def __post_init__(self):
        check_int("tokens", self.tokens, 1)
        self.tree = SuffixTree(self.depth, self.events)

    def new_id(self) -> int:
        return next(self._ids)

    def extend(self, seq_id: int, tokens: list[int]) -> bool:
        """Add a request's new tokens, evicting the least recently used outputs to make room; False when the
        sequence cannot be kept (longer than the whole cache), and the cache is left as it was."""
        held = len(self.tree.sequences.get(seq_id, ()))
        if held + len(tokens) > self.tokens:
            return False
        while len(self.tree) + len(tokens) > self.tokens:
            oldest = next(s for s in self.used if s != seq_id)
            self.tree.remove(oldest)
            del self.used[oldest]
        if seq_id in self.tree:
            self.tree.extend(seq_id, tokens)
        else:
            self.tree.add(seq_id, tokens)
        self.used[seq_id] = None
        self.used.move_to_end(seq_id)
        return True


class SuffixDrafter:
    """speculate="suffix": guesses from the request's own suffix tree and the engine's `SuffixCache`.

    How long a guess may be: at most k (16 by default, `teachspec.speculate`), at most `factor` guesses per
    matched token, and only tokens whose path probability is at least `min_prob`. The paper's cap is
    MAX_SPEC = alpha * p for a match of p tokens; `factor` is its alpha. Replaying the greedy outputs of the
    bench's workloads through the drafter (no model needed: a guess is accepted up to its first wrong token),
    factor 4 gave more tokens per target pass than 1 or 2 on every one of them, novel text included (agentic
    4.13 at k = 8 and 4.75 at k = 16, against 3.72 and 4.04 with factor 1), and min_prob 0.1 or 0.3 hardly
    mattered; on two CPU cores a pass over 17 positions costs about 1.5 over one, so the longer guesses pay
    (teachspec/bench/README.md, `teachspec bench speculative --workload`)."""

    name = "suffix"

    def __init__(self, cache: SuffixCache | None = None, factor: float = FACTOR, min_prob: float = 0.1):
        if not isinstance(factor, (int, float)) or isinstance(factor, bool) or not factor > 0:
            raise ValueError(f"factor must be a number > 0 (guesses per matched token), got {factor!r}")
        if not isinstance(min_prob, (int, float)) or not 0.0 <= min_prob <= 1.0:
            raise ValueError(f"min_prob must be a probability in [0, 1], got {min_prob!r}")
        self.cache = cache if cache is not None else SuffixCache()
        self.factor, self.min_prob = float(factor), float(min_prob)
        self.reset()

    def reset(self, cache=None, ids: list[int] | None = None) -> None:
        """A new request: an empty tree of its own, a new sequence in the engine's cache."""
        self.own = SuffixTree(self.cache.depth)
        self.seen = 0          # tokens of the request the trees hold
        self.prompt = None     # tokens of the prompt, known at the first proposal
        self.seq_id = self.cache.new_id()
        self.shared = True     # its output still goes into the engine's cache

    def roll_back(self, ids: list[int]) -> None:
        pass  # the trees hold committed tokens only

    def keep_path(self, n_before: int, path: list[int]) -> None:
        pass

    def propose(self, ids: list[int], k: int, params=None, generator=None, stop_below: float | None = None) -> Proposal:
        t0 = time.perf_counter()
        guess = self.guess(ids, (1,) * k)
        return Proposal(list(guess.tokens[1:]), None, 0, time.perf_counter() - t0)

    def propose_tree(self, ids: list[int], shape: tuple[int, ...], params=None, generator=None) -> TreeProposal:
        t0 = time.perf_counter()
        guess = self.guess(ids, tuple(shape))
        return TreeProposal(TokenTree(guess.parents, guess.tokens), None, 0, time.perf_counter() - t0)

    def guess(self, ids: list[int], shape: tuple[int, ...]) -> Guess:
        """The better of the two trees' guesses after `ids` (see the module docstring), the trees first brought up
        to date with `ids`."""
        self._see(ids)
        guesses = [tree.guess(ids, shape, min_prob=self.min_prob, factor=self.factor)
                   for tree in (self.own, self.cache.tree)]
        return max(guesses, key=lambda g: (sum(g.prob[1:]), g.match))

    def _see(self, ids: list[int]) -> None:
        """Put the request's tokens not yet seen into its own tree, and what it wrote into the engine's cache."""
        if self.prompt is None:
            self.prompt = len(ids)
            self.own.add("request", ids)
        elif len(ids) > self.seen:
            self.own.extend("request", ids[self.seen:])
        if self.shared and len(ids) > max(self.seen, self.prompt):
            written = ids[max(self.seen, self.prompt):]
            self.shared = self.cache.extend(self.seq_id, written)
        self.seen = len(ids)


class HybridDrafter:
    """speculate="hybrid": the suffix trees' guess when they are confident, the draft model's otherwise, decided
    step by step. Text the trees have seen goes at the price of no draft pass; novel text, where they know
    nothing, loses nothing to them, since the draft model guesses it as it would alone.

    Confident means the suffix guess's score, the sum of its path probabilities (the tokens it expects to have
    accepted), reaches `threshold`. k is the draft model's, whose every guess costs a pass; a chain from the trees
    costs no pass and may run to `longest` tokens (still at most `factor` per matched token), as speculate="suffix"
    would guess it. The draft model's cache catches up on the steps it sat out at its next
    proposal (`ModelDrafter` feeds whatever committed tokens it has not seen)."""

    name = "hybrid"

    def __init__(self, suffix: SuffixDrafter, model, threshold: float = 1.0, longest: int = LONGEST):
        if not isinstance(threshold, (int, float)) or isinstance(threshold, bool) or not threshold >= 0:
            raise ValueError(f"threshold must be a number >= 0 (expected accepted guesses), got {threshold!r}")
        self.suffix, self.model, self.threshold = suffix, model, float(threshold)
        self.longest = check_int("longest", longest, 1)
        self.last: str | None = None  # which one proposed the step being judged

    def reset(self, cache=None, ids: list[int] | None = None) -> None:
        self.suffix.reset()
        self.model.reset(cache, ids)
        self.last = None

    def roll_back(self, ids: list[int]) -> None:
        self.model.roll_back(ids)

    def keep_path(self, n_before: int, path: list[int]) -> None:
        if self.last == "model":  # only the draft model's tree left rows in its cache
            self.model.keep_path(n_before, path)

    def propose(self, ids: list[int], k: int, params, generator, stop_below: float | None = None) -> Proposal:
        t0 = time.perf_counter()
        guess = self.suffix.guess(ids, (1,) * max(k, self.longest))
        if sum(guess.prob[1:]) >= self.threshold:
            self.last = "suffix"
            return Proposal(list(guess.tokens[1:]), None, 0, time.perf_counter() - t0)
        self.last = "model"
        return self.model.propose(ids, k, params, generator, stop_below)

    def propose_tree(self, ids: list[int], shape: tuple[int, ...], params, generator) -> TreeProposal:
        t0 = time.perf_counter()
        guess = self.suffix.guess(ids, tuple(shape))
        if sum(guess.prob[1:]) >= self.threshold:
            self.last = "suffix"
            return TreeProposal(TokenTree(guess.parents, guess.tokens), None, 0, time.perf_counter() - t0)
        self.last = "model"
        return self.model.propose_tree(ids, shape, params, generator)
