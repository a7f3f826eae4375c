"""Tree policies: the shape of guesses a tree step drafts, as a k policy gives a chain's length.

Every tree policy answers `next_shape()` before a step (the most children per node at each depth) and hears
`update(...)` after a tree step or `update_chain(...)` after a chain one; `dynamic` says the drafter grows EAGLE-2's
tree of its most confident paths to that depth instead of a static shape, and `learns` whether the engine may run a
chain the policy chose as a chain step. `make_tree_policy` turns `tree=` into one:

    (3, 2, 2, 1)   FixedTree     the same shape every step
    "dynamic"      DynamicTree   EAGLE-2's dynamic tree, DYNAMIC_DEPTH levels deep
    "adaptive"     AdaptiveTree  the shape with the most expected tokens per second, below

Choosing the tree: which shape of guesses pays best, from what the engine has measured (`tree="adaptive"`).

A wider tree catches more of the target's choices at each depth, a deeper one more tokens per pass, and both cost:
the target pass grows with the number of nodes (on a CPU soon: a few flops per byte, notebook 1), and the draft
spends one pass per level, dearer the more nodes the level holds. Before each step the policy picks, among
`candidates` (no guess at all, every chain up to 8 guesses, and trees), the shape with the most expected tokens
per second,

    rate(shape) = E[tokens | shape] / (o + draft_s(shape) + t(n)),       n = the shape's nodes, root included

(`theory.tree_tokens_per_second`, o counted with the drafting). E is Sequoia's sum over nodes of the chance each
is emitted, from h[d][r], which for a static shape is 1 + A_0 + A_0 A_1 + ..., A_d the chance that some child at
depth d is accepted (`theory.static_tree_expected_tokens`); with one child per level and t constant the rate is the
chain policy's Theorem 3.8. Every ingredient is measured, with exponential forgetting (weight `decay` per step for
acceptance, which changes with the text; `cost_decay` for timings, which change at once when another program takes
the cores):

- h[d][r]: the chance that the rank-r child of a depth-d node is accepted once its earlier siblings were rejected,
  counted over every child verification tried (`TreeVerdict.nodes`), and shrunk by `prior` pseudo-tries towards a
  neighbour's: a first child's towards the depth above's, a later sibling's towards its elder's squared (it is
  tried only where the draft's likelier guesses failed). A child seldom tried borrows a rate, a modest one: a tree
  has to earn its place by measurement, so the policy does not spend its first steps on big trees;
- t(n): seconds of a target pass over n nodes: the mean of the passes timed at n, shrunk towards a least-squares
  line through every size's mean by `prior` pseudo-passes. A size timed rarely leans on the line, so one timing
  on a busy machine does not decide for it or against it; a size timed often has its own mean, which the line
  cannot give (on a CPU a pass costs about the same for a few nodes, then rises). n = 1 is the root alone: plain
  decoding's own pass;
- draft_s = a * passes + b * nodes fed: a least-squares fit of the drafting seconds of every step to the number
  of draft passes (the tree's depth) and the nodes those passes read (every node but the deepest level's);
- o: the rest of a step (verifying, keeping the accepted path's cache, recording, choosing), measured apart for
  chains and for trees: the engine runs a chain the policy chose as a chain step (`Engine._chain_step`: a causal
  pass, the cache cut back instead of compacted to a path, one position judged at a time), which costs less of the
  engine's own work than a tree step does. Leaving o out would undervalue deep shapes, which pay it over more
  tokens.

Exploration is kept cheap, and a cold policy starts from a good fixed choice, `start`: the chain of the drafter's
good constant k (its `start_k` in teachspec/speculate.py: (1, 1, 1) for the draft model). The warm-up is that chain,
a tree (2, 2, 1) once, then the chain again until each has a timed pass: two pass sizes and children of rank 1, from
which every other shape is extrapolated, at the price of one tree step. After it, every `probe_every` steps the
policy tries a *contender* instead of its choice: the shape predicted within `margin` of the best that it tried
least recently, so that the estimates next to its choice stay fresh and one unlucky timing does not write a shape
off for good. A shape predicted far worse (a big tree where passes are dear) is tried again only as the runner-up,
every fourth probe at most, so when trees do not pay the policy settles on a chain and stays there. Timings forget
fast (`cost_decay`), so when the cores get busier it leaves a big tree within a few dozen steps.

What it measured carries over between requests: the engine keeps one policy per drafter and sampling setting
(`Engine.adaptive`). Only what says nothing about drafting is left out: the drafter's first proposal of a request
also reads the prompt (a draft model's prefill, the EAGLE head's first entries), so the engine reports no drafting
time for it (`draft_s=None`), and the step's pass over a prompt is not timed either (`target_s=None`). Timed, the
first made drafting look several times dearer at the start of every request, and with timings forgotten within a
few dozen steps the policy spent each short request on shallow shapes, unlearning it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from teachspec.speculative.tree import TokenTree, TreeVerdict
from teachspec.theory import static_tree

DYNAMIC_DEPTH = 5  # tree="dynamic": levels grown (3 nodes expanded a level, 10 guesses kept: a CPU's pass is dear)

CHAINS = tuple((1,) * k for k in range(1, 9))
TREES = ((2,), (2, 1), (2, 1, 1), (2, 1, 1, 1), (2, 2), (2, 2, 1), (2, 2, 1, 1), (3, 1, 1), (3, 2, 1), (3, 2, 2, 1),
         (4, 2, 2, 1))
CANDIDATES = ((),) + CHAINS + TREES
TREE = (2, 2, 1)  # the warm-up's one tree: a pass over 11 nodes, children of rank 1


@functools.cache
def load(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(nodes, draft passes, nodes the draft feeds) of a static shape, root included: a draft model grows it one
    pass a level, each over the level above (the root's pass first; the deepest level is never fed)."""
    nodes, level = 1, 1
    for b in shape:
        level *= b
        nodes += level
    return nodes, len(shape), (nodes - level if shape else 0)


class FixedTree:
    """`tree=(3, 2, 2, 1)`: that shape, every step; it learns nothing."""
    dynamic: ClassVar[bool] = False
    learns: ClassVar[bool] = False

    def __init__(self, shape: tuple[int, ...]):
        static_tree(shape)  # refuses a shape that is not a sequence of ints >= 1
        self.shape = tuple(shape)

    def next_shape(self) -> tuple[int, ...]:
        return self.shape

    def update(self, *measured, **named) -> None:
        pass

    update_chain = update


class DynamicTree(FixedTree):
    """`tree="dynamic"`: EAGLE-2's tree, grown `depth` levels from the drafter's most confident paths (its shape
    says only how deep: the drafter chooses the nodes)."""
    dynamic: ClassVar[bool] = True

    def __init__(self, depth: int = DYNAMIC_DEPTH):
        super().__init__((depth,) * depth)


def make_tree_policy(tree: tuple[int, ...] | str | None, adaptive: Callable[[], AdaptiveTree]):
    """The tree policy `tree=` names (None: a chain, no tree policy); `adaptive()` gives the learnt one, which the
    engine keeps across requests."""
    if tree is None:
        return None
    if tree == "dynamic":
        return DynamicTree()
    if tree == "adaptive":
        return adaptive()
    return FixedTree(tree)


@dataclass
class AdaptiveTree:
    """Before each step `next_shape()`, the shape to draft; after it `update(...)`, what the step measured."""
    dynamic: ClassVar[bool] = False
    learns: ClassVar[bool] = True

    candidates: tuple[tuple[int, ...], ...] = CANDIDATES
    decay: float = 0.98  # acceptance counts: the text changes slowly
    cost_decay: float = 0.95  # timings: another program can take the cores from one step to the next
    probe_every: int = 12  # this often, try a contender instead of the best, so its estimates stay fresh
    margin: float = 0.1  # contenders: predicted within this fraction of the best
    prior: float = 4.0  # pseudo-observations by which each h and each size's pass time leans on its neighbours
    start: tuple[int, ...] = (1, 1, 1)  # a good fixed shape to start from, cold (`cold`)
    warmup: tuple[tuple[int, ...], ...] | None = None  # None: (start, TREE, start, start)
    tried: dict[tuple[int, int], float] = field(default_factory=dict)  # (depth, rank) -> decayed tries
    accepted: dict[tuple[int, int], float] = field(default_factory=dict)
    passes: dict[int, list[float]] = field(default_factory=dict)  # nodes -> [decayed seconds, decayed count]
    # the draft fit's decayed sums over steps of P*P, P*F, F*F, P*s, F*s (P passes, F nodes fed, s seconds)
    draft: dict[str, float] = field(default_factory=lambda: dict.fromkeys(("pp", "pf", "ff", "ps", "fs"), 0.0))
    overhead: list[float] = field(default_factory=lambda: [0.0, 0.0])  # trees: [decayed seconds, decayed steps]
    chain_overhead: list[float] = field(default_factory=lambda: [0.0, 0.0])  # chains (and no guess), the same
    used: dict[tuple[int, ...], int] = field(default_factory=dict)  # shape -> the last step it was chosen
    warmed: int = 0  # warm-up shapes whose step was timed
    steps: int = 0
    last: tuple[int, ...] = ()

    def __post_init__(self):
        for name in ("decay", "cost_decay"):
            if not 0 < getattr(self, name) < 1:
                raise ValueError(f"{name} must be in (0, 1), got {getattr(self, name)!r}")
        if not 0 <= self.margin < 1:
            raise ValueError(f"margin must be in [0, 1), got {self.margin!r}")
        if not self.prior > 0:
            raise ValueError(f"prior must be > 0 pseudo-observations, got {self.prior!r}")
        if not isinstance(self.probe_every, int) or self.probe_every < 1:
            raise ValueError(f"probe_every must be an int >= 1, got {self.probe_every!r}")
        if self.warmup is None:
            self.warmup = (self.start, TREE, self.start, self.start)
        for shape in self.candidates + self.warmup + (self.start,):
            static_tree(shape)  # refuses a shape that is not a tuple of ints >= 1

    @classmethod
    def cold(cls, start_k: int, **kwargs) -> AdaptiveTree:
        """A new policy starting from the chain of a drafter's good constant k (its `start_k` in the registry)."""
        return cls(start=(1,) * start_k, **kwargs)

    # -- the model ---------------------------------------------------------------------------------------------

    def acceptance(self) -> list[list[float]]:
        """h[d][r] for every depth and rank a candidate has, each shrunk by `prior` pseudo-tries towards a
        neighbour's rate: a later sibling's towards its elder's squared, a first child's towards the first child's
        one depth up (the root's first child: 1/2), as the chain policy shrinks each position towards the one
        before. A child rarely tried borrows a rate instead of swinging the choice on two or three tries."""
        depth = max(1, *(len(shape) for shape in self.candidates))
        rank = max((b for shape in self.candidates for b in shape), default=1)
        table = []
        for d in range(depth):
            row = []
            for r in range(rank):
                prior = row[-1] ** 2 if r else table[-1][0] if d else 0.5
                row.append((self.accepted.get((d, r), 0.0) + self.prior * prior) /
                           (self.tried.get((d, r), 0.0) + self.prior))
            table.append(row)
        return table

    def pass_s(self, n: int) -> float:
        """Seconds of a target pass over n nodes: the mean of the passes timed at n, shrunk towards a least-squares
        line through every size's mean by `prior` pseudo-passes (module docstring)."""
        return self.pass_curve()(n)

    def pass_curve(self):
        """pass_s as a function, the line fitted once."""
        pts = [(m, s / c, c) for m, (s, c) in self.passes.items() if c > 0]
        if not pts:
            return lambda n: 1.0  # nothing timed yet: every size alike
        w = sum(c for *_, c in pts)
        mn, mt = sum(m * c for m, _, c in pts) / w, sum(t * c for _, t, c in pts) / w
        var = sum(c * (m - mn) ** 2 for m, _, c in pts)
        slope = max(0.0, sum(c * (m - mn) * (t - mt) for m, t, c in pts) / var) if var > 0 else 0.0

        def pass_s(n: int) -> float:
            s, c = self.passes.get(n, [0.0, 0.0])
            return (s + self.prior * max(1e-9, mt + slope * (n - mn))) / (c + self.prior)
        return pass_s

    def draft_cost(self) -> tuple[float, float]:
        """(a, b): seconds per draft pass and per node fed, the least-squares fit of s ~ a P + b F. While the steps
        measured cannot tell the two apart (a chain feeds one node a pass: F = P), or the fit gives a negative
        term, it is seconds per pass alone."""
        pp, pf, ff, ps, fs = (self.draft[key] for key in ("pp", "pf", "ff", "ps", "fs"))
        det = pp * ff - pf * pf  # the normal equations' determinant
        if det > 1e-6 * pp * ff:
            a, b = (ps * ff - fs * pf) / det, (fs * pp - ps * pf) / det
            if a >= 0 and b >= 0:
                return a, b
        return (ps / pp if pp > 0 else 0.0), 0.0

    def rates(self, shapes=None) -> dict[tuple[int, ...], float]:
        """Expected tokens per second of each of `shapes` (the candidates by default),
        E / (overhead + a passes + b fed + t(n)), every estimate read once."""
        table, (a, b), pass_s = self.acceptance(), self.draft_cost(), self.pass_curve()
        o_tree, o_chain = (s / c if c else None for s, c in (self.overhead, self.chain_overhead))
        o_tree, o_chain = o_tree or o_chain or 0.0, o_chain or o_tree or 0.0  # each stands in for the other, unmeasured
        # E of a static shape is 1 + A_0 + A_0 A_1 + ..., A_d = 1 - (chance all b children at depth d are rejected)
        # (`theory.static_tree_expected_tokens`, written out here: the table is the policy's own, checked by
        # construction, and every candidate shares its products, so a step's choice costs tens of microseconds)
        rejected: dict[tuple[int, int], float] = {}  # (depth, children) -> chance that all are rejected

        def all_rejected(d: int, children: int) -> float:
            if (d, children) not in rejected:
                row = table[min(d, len(table) - 1)]  # depths and ranks past the table repeat its last
                rejected[d, children] = (1 - row[min(children - 1, len(row) - 1)]) * (
                    all_rejected(d, children - 1) if children > 1 else 1.0)
            return rejected[d, children]

        out = {}
        for shape in self.candidates if shapes is None else shapes:
            nodes, passes, fed = load(shape)
            total, reach = 1.0, 1.0
            for d, children in enumerate(shape):
                reach *= 1 - all_rejected(d, children)  # A_d
                total += reach
            o = o_chain if nodes == passes + 1 else o_tree  # a chain: one node per level
            out[shape] = total / (o + a * passes + b * fed + pass_s(nodes))
        return out

    def tokens_per_s(self, shape: tuple[int, ...]) -> float:
        return self.rates([shape])[shape]

    # -- choosing and measuring --------------------------------------------------------------------------------

    def next_shape(self) -> tuple[int, ...]:
        """The warm-up shapes until each has a timed pass, then the best shape or, every `probe_every` steps, the
        contender tried least recently (the runner-up every fourth probe when no shape is close)."""
        if self.warmed < len(self.warmup):
            shape = self.warmup[self.warmed]
        else:
            rates = self.rates()
            ranked = sorted(self.candidates, key=rates.get, reverse=True)
            shape = ranked[0]
            if self.steps % self.probe_every == 0 and len(ranked) > 1:
                close = [s for s in ranked[1:] if rates[s] >= (1 - self.margin) * rates[shape]]
                if close:
                    shape = min(close, key=lambda s: self.used.get(s, -1))  # ties: the better predicted
                elif self.steps % (4 * self.probe_every) == 0:
                    shape = ranked[1]
        self.used[shape] = self.steps
        self.last = shape
        return shape

    def update(self, tree: TokenTree, verdict: TreeVerdict, passes: int, draft_s: float | None,
               target_s: float | None, step_s: float | None = None) -> None:
        """What one tree step measured: its child verifications, its drafting (`passes` draft passes over every
        node above the deepest level, in `draft_s` seconds, unless the drafter also read the prompt: None) and,
        unless the pass also read the prompt (`target_s` None), the target pass over its nodes and, when the
        drafting was timed too, the whole step's `step_s` seconds, if given."""
        tried = [(node.depth - 1, tree.children[node.parent].index(node.node), node.decision == "accept")
                 for node in verdict.nodes]
        deepest = max(tree.depth)
        fed = sum(1 for depth in tree.depth if depth < deepest) if passes else 0
        self._measure(tried, len(tree.tokens), passes, fed, draft_s, target_s, step_s, self.overhead)

    def update_chain(self, k: int, accepted: int, passes: int, draft_s: float | None, target_s: float | None,
                     step_s: float | None = None) -> None:
        """What one chain step measured (the shape (1,) * k, run as a chain: `Engine._chain_step`): its first
        accepted + 1 guesses were judged (all k when every one was accepted), each the only child at its depth;
        the rest as `update`."""
        tried = [(d, 0, d < accepted) for d in range(min(k, accepted + 1))]
        self._measure(tried, k + 1, passes, k if passes else 0, draft_s, target_s, step_s, self.chain_overhead)

    def _measure(self, tried: list[tuple[int, int, bool]], nodes: int, passes: int, fed: int, draft_s: float | None,
                 target_s: float | None, step_s: float | None, overhead: list[float]) -> None:
        """Forget a little of everything, then add one step: `tried` its (depth, rank, accepted) verifications,
        `nodes` the target pass's nodes, `passes` and `fed` its drafting's, and the seconds, into `overhead`."""
        d, e = self.decay, self.cost_decay
        self.steps += 1
        for table, w in ((self.tried, d), (self.accepted, d), (self.draft, e)):
            for key in table:
                table[key] *= w
        for v in [*self.passes.values(), self.overhead, self.chain_overhead]:
            v[0], v[1] = e * v[0], e * v[1]
        for depth, rank, accepted in tried:
            self.tried[depth, rank] = self.tried.get((depth, rank), 0.0) + 1
            self.accepted[depth, rank] = self.accepted.get((depth, rank), 0.0) + accepted
        if draft_s is not None:
            for key, x, y in (("pp", passes, passes), ("pf", passes, fed), ("ff", fed, fed), ("ps", passes, draft_s),
                              ("fs", fed, draft_s)):
                self.draft[key] += x * y
        if target_s is not None:
            s, c = self.passes.get(nodes, [0.0, 0.0])
            self.passes[nodes] = [s + target_s, c + 1]
            if step_s is not None and draft_s is not None:
                overhead[0] += max(0.0, step_s - draft_s - target_s)
                overhead[1] += 1
            if self.warmed < len(self.warmup) and self.last == self.warmup[self.warmed]:
                self.warmed += 1

    def __repr__(self) -> str:
        return f"AdaptiveTree(tree={self.last})"
