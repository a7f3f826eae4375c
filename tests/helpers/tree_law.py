"""The multi-draft rule's exact law over a token tree, by enumeration in float64, and the classic multi-draft bugs.

A step drafts a tree of a fixed shape from a toy draft model (`Model`, over helpers/exact.py's `make_table` tables):
a node's children i.i.d. from q, without replacement from q, or the draft's b most likely tokens proposed with
certainty (`draws`). `StepLaw` is the law of what one step emits, drafts and uniforms integrated exactly; `max_error`
the largest gap between it (completed by the target's own samples after the step stops) and the target's law.
`mutant` is tree.py's `verify_children` with one line changed; `MUTANTS` the classic bugs, each such a line.
Used by tests/speculative/test_verify_tree.py, test_chosen_children.py (which plants its bug in `draws`, looked up
here by `StepLaw`) and test_tree_sampling.py.
"""

import inspect
import itertools
import math
import sys
import types
from collections import defaultdict
from dataclasses import dataclass, field

import torch

import teachspec.speculative.tree as tree_module
from teachspec.speculative.tree import TokenTree, verify_children

torch.set_num_threads(1)


REJECT = 1 - 2.0**-53  # the largest float64 below 1: a child whose acceptance chance is below 1 is rejected


# -- toy models: make_table's tables (helpers/exact.py) over a small vocabulary ------------------------------------

@dataclass
class Model:
    table: torch.Tensor
    cache: dict = field(default_factory=dict)

    @property
    def vocab(self) -> int:
        return self.table.shape[-1]

    def __call__(self, context: tuple[int, ...]) -> torch.Tensor:
        return self.table[len(context) % 3, context[-2], context[-1]]  # (vocab,)

    def probs(self, context: tuple[int, ...]) -> list[float]:
        if context not in self.cache:
            self.cache[context] = self(context).double().tolist()
        return self.cache[context]

    def probability(self, context: tuple[int, ...], seq: tuple[int, ...]) -> float:
        """The target's own probability of sampling seq after context."""
        prob = 1.0
        for j, y in enumerate(seq):
            prob *= self.probs(context + seq[:j])[y]
        return prob


PROMPT = (1, 2)


# -- drafting: what a draft model proposes at a node, with its probability -------------------------------------------

def draws(q: list[float], b: int, kind: str) -> list[tuple[tuple[int, ...], float]]:
    """Every tuple of b children the draft can propose from q, with its probability.

    "independent": i.i.d. from q. "without_replacement": x_1 from q, x_2 from q without x_1 renormalised, and so
    on; once q has nothing left, the remaining children are the smallest unused tokens (q gives them 0: a top-b
    pick from a distribution with fewer than b tokens). "certain": the b most likely tokens, with probability 1.
    """
    vocab = len(q)
    if kind == "certain":
        return [(tuple(sorted(range(vocab), key=lambda x: -q[x])[:b]), 1.0)]
    if kind == "independent":
        return [(xs, math.prod(q[x] for x in xs)) for xs in itertools.product(range(vocab), repeat=b)
                if all(q[x] > 0 for x in xs)]
    out = [((), 1.0)]
    for _ in range(b):
        grown = []
        for xs, weight in out:
            left = [0.0 if x in xs else q[x] for x in range(vocab)]
            mass = sum(left)
            if mass > 0:
                grown += [(xs + (x,), weight * left[x] / mass) for x in range(vocab) if left[x] > 0]
            else:
                grown.append((xs + (min(set(range(vocab)) - set(xs)),), weight))
        out = grown
    return out


def shape_of(parents: tuple[int, ...]) -> tuple:
    """The tree's shape as nested tuples: a node is the tuple of its children's shapes."""
    children = TokenTree(parents, (0,) * len(parents)).children

    def build(node: int) -> tuple:
        return tuple(build(c) for c in children[node])

    return build(0)


def depth_of(shape: tuple) -> int:
    return 1 + max(map(depth_of, shape)) if shape else 0


# -- the exact law of one step ---------------------------------------------------------------------------------------

class StepLaw:
    """Probability of each token sequence one step emits, drafts and uniforms integrated exactly."""

    def __init__(self, target: Model, drafter: Model, kind: str, judge=verify_children):
        self.target, self.drafter, self.kind, self.judge = target, drafter, kind, judge
        self.memo: dict = {}

    def __call__(self, context: tuple[int, ...], shape: tuple) -> dict[tuple[int, ...], float]:
        if (context, shape) not in self.memo:
            self.memo[(context, shape)] = self._at(context, shape)
        return self.memo[(context, shape)]

    def _at(self, context: tuple[int, ...], shape: tuple) -> dict[tuple[int, ...], float]:
        p = self.target(context)
        if not shape:  # a leaf: the bonus, from p
            return {(y,): prob for y, prob in enumerate(self.target.probs(context)) if prob > 0}
        b, certain = len(shape), self.kind == "certain"
        rule = "without_replacement" if certain else self.kind  # proposals made with certainty are distinct
        q = None if certain else self.drafter(context)
        out = defaultdict(float)
        for xs, weight in draws(self.drafter.probs(context), b, self.kind):
            tree = TokenTree((-1,) + (0,) * b, (context[-1],) + xs)
            child, records, final = self.judge(p, q, tree, 0, [REJECT] * b, rule)
            reach = weight  # the chance of these children, with every child so far rejected
            for record, sub in zip(records, shape):
                a = min(1.0, record.ratio) if record.q > 0 else 0.0
                if a > 0:
                    for seq, prob in self(context + (record.token,), sub).items():
                        out[(record.token,) + seq] += reach * a * prob
                reach *= 1 - a
            if child is None:  # every child rejected: one token from the final residual
                assert len(records) == b
                for y, prob in enumerate(final.tolist()):
                    out[(y,)] += reach * prob
            else:  # forced to reject, a child was accepted anyway: only right if its chance was 1
                assert reach == 0 and records[-1].node == child
        return out


def max_error(target: Model, drafter: Model, parents: tuple[int, ...], kind: str, judge=verify_children) -> float:
    """Largest gap, over m = 1 .. depth + 1 and all m-token sequences, between the step's law (completed by the
    target's own samples after it stops) and the target's."""
    shape = shape_of(parents)
    law = StepLaw(target, drafter, kind, judge)(PROMPT, shape)
    assert math.isclose(sum(law.values()), 1.0, abs_tol=1e-12)
    vocab, worst = target.vocab, 0.0
    for m in range(1, depth_of(shape) + 2):
        completed = defaultdict(float)
        for emitted, prob in law.items():
            if len(emitted) >= m:
                completed[emitted[:m]] += prob
            else:
                for rest in itertools.product(range(vocab), repeat=m - len(emitted)):
                    completed[emitted + rest] += prob * target.probability(PROMPT + emitted, rest)
        for seq in itertools.product(range(vocab), repeat=m):
            worst = max(worst, abs(completed[seq] - target.probability(PROMPT, seq)))
    return worst


# -- mutants: the classic multi-draft bugs, each planted in the implementation ----------------------------------------

def mutant(old: str, new: str):
    """tree.py's verify_children with one line changed."""
    source = inspect.getsource(tree_module)
    assert source.count(old) == 1, f"the line this mutant changes is no longer in tree.py: {old!r}"
    module = types.ModuleType("teachspec_tree_mutant")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    try:
        exec(compile(source.replace(old, new), tree_module.__file__, "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return module.verify_children


MUTANTS = {
    # every sibling judged by the node's p, not by the residual its rejected siblings left
    "residual not updated between siblings": (
        "p_x, q_x = torch.stack([target[x], q_child[x]]).tolist()",
        "p_x, q_x = torch.stack([p.double()[x], q_child[x]]).tolist()",
        ["independent", "without_replacement"],
    ),
    # the next child judged by q, although it was drawn from q without the rejected one
    "rejected token not removed from q": (
        "proposal = _without(proposal, x)",
        "pass",
        ["without_replacement"],
    ),
    # every child rejected, and the token drawn from p instead of the last residual
    "correction drawn from p": (
        "return None, records, target",
        "return None, records, p.double()",
        ["independent", "without_replacement", "certain"],
    ),
}
