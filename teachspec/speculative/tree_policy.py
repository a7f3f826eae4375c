"""Choosing the tree: which shape of guesses pays best, from what the engine has measured (`tree="adaptive"`).

A wider tree catches more of the target's choices at each depth, a deeper one more tokens per pass, and both cost:
the target pass grows with the number of nodes (on a CPU soon: a few flops per byte, notebook 1), and the draft
spends one pass per level. The policy keeps, with exponential forgetting (weight `decay` per step):

- h[d][r]: the chance that the rank-r child of a depth-d node is accepted once its earlier siblings were rejected,
  counted over every child verification tried (`TreeVerdict.nodes`);
- t(n): seconds of a target pass over n nodes, measured where n was used and a least-squares line between;
- the draft's seconds per level.

Before each step it picks, among `candidates` (no guess at all, chains, and trees), the shape with the most
expected tokens per second, `theory.tree_tokens_per_second` (expected tokens: Sequoia's sum over nodes of the
chance each is emitted). With one child per level and t constant this is the chain policy's Theorem 3.8. Every
`probe_every` steps it tries the runner-up instead, so that the estimates next to its choice do not go stale.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from teachspec.speculative.tree import TokenTree, TreeVerdict
from teachspec.theory import static_tree, tree_tokens_per_second

CANDIDATES = ((), (1,), (1, 1), (1, 1, 1), (1, 1, 1, 1), (1,) * 6, (2,), (2, 1), (2, 2), (2, 2, 1), (3, 1, 1),
              (2, 2, 1, 1), (3, 2, 1), (3, 2, 2, 1), (4, 2, 2, 1))
# the first steps time passes over 1, 3, 7 and 11 nodes and see children of every rank; t(n) for the other sizes is
# read off the line through those until a shape of that size is used
WARMUP = ((), (1, 1), (2, 2, 1), (3, 2, 2, 1))


@dataclass
class AdaptiveTree:
    candidates: tuple[tuple[int, ...], ...] = CANDIDATES
    decay: float = 0.98
    probe_every: int = 16  # this often, try the runner-up instead of the best, so its estimates stay fresh
    warmup: tuple[tuple[int, ...], ...] = WARMUP
    tried: dict[tuple[int, int], float] = field(default_factory=dict)  # (depth, rank) -> decayed tries
    accepted: dict[tuple[int, int], float] = field(default_factory=dict)
    passes: dict[int, list[float]] = field(default_factory=dict)  # nodes -> [decayed seconds, decayed count]
    level_s: list[float] = field(default_factory=lambda: [0.0, 0.0])  # draft: [decayed seconds, decayed levels]
    steps: int = 0
    last: tuple[int, ...] = ()

    def __post_init__(self):
        if not 0 < self.decay < 1:
            raise ValueError(f"decay must be in (0, 1), got {self.decay!r}")
        for shape in self.candidates + self.warmup:
            static_tree(shape)  # refuses a shape that is not a tuple of ints >= 1

    def acceptance(self) -> list[list[float]]:
        """h[d][r], each shrunk towards 1/2 by one pseudo-try, so a rarely tried child does not swing the choice."""
        depth = 1 + max((d for d, _ in self.tried), default=0)
        rank = 1 + max((r for _, r in self.tried), default=0)
        return [[(self.accepted.get((d, r), 0.0) + 0.5) / (self.tried.get((d, r), 0.0) + 1) for r in range(rank)]
                for d in range(depth)]

    def pass_s(self, n: int) -> float:
        """Seconds of a target pass over n nodes: measured when n was used, else a line through what was."""
        if self.passes.get(n, [0, 0])[1] > 0:
            s, c = self.passes[n]
            return s / c
        pts = [(m, s / c, c) for m, (s, c) in self.passes.items() if c > 0]
        if not pts:
            return 1.0
        w = sum(c for *_, c in pts)
        mn, mt = sum(m * c for m, _, c in pts) / w, sum(t * c for _, t, c in pts) / w
        var = sum(c * (m - mn) ** 2 for m, _, c in pts)
        slope = max(0.0, sum(c * (m - mn) * (t - mt) for m, t, c in pts) / var) if var > 0 else 0.0
        return max(1e-9, mt + slope * (n - mn))

    def tokens_per_s(self, shape: tuple[int, ...]) -> float:
        per_level = self.level_s[0] / self.level_s[1] if self.level_s[1] else 0.0
        return tree_tokens_per_second(static_tree(shape), self.acceptance(), self.pass_s, per_level * len(shape))

    def next_shape(self) -> tuple[int, ...]:
        if self.steps < len(self.warmup):
            shape = self.warmup[self.steps]
        else:
            ranked = sorted(self.candidates, key=self.tokens_per_s, reverse=True)
            shape = ranked[1] if self.steps % self.probe_every == 0 and len(ranked) > 1 else ranked[0]
        self.last = shape
        return shape

    def update(self, tree: TokenTree, verdict: TreeVerdict, levels: int, draft_s: float,
               target_s: float | None) -> None:
        """What one step measured: its child verifications, its draft levels and, unless the pass also read the
        prompt (`target_s` None), the pass over its nodes."""
        d = self.decay
        self.steps += 1
        for table in (self.tried, self.accepted):
            for key in table:
                table[key] *= d
        for v in self.passes.values():
            v[0], v[1] = d * v[0], d * v[1]
        self.level_s = [d * self.level_s[0] + draft_s, d * self.level_s[1] + levels]
        for node in verdict.nodes:
            key = (node.depth - 1, tree.children[node.parent].index(node.node))
            self.tried[key] = self.tried.get(key, 0.0) + 1
            self.accepted[key] = self.accepted.get(key, 0.0) + (node.decision == "accept")
        if target_s is not None:
            s, c = self.passes.get(len(tree.tokens), [0.0, 0.0])
            self.passes[len(tree.tokens)] = [s + target_s, c + 1]

    def __repr__(self) -> str:
        return f"AdaptiveTree(tree={self.last})"
