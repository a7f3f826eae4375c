"""Token trees: several guesses per position, checked in one target pass, and the rule that keeps them exact.

A chain of k guesses ends at its first rejection. A tree offers the target several candidates per position. Node 0,
the root, is the last committed token; every other node is a drafted token whose parent is the token before it, so
each path down from the root is a chain of guesses. One target pass scores every node at once (a tree attention
mask lets each node see the context and its own ancestors: SpecInfer, Miao et al. 2024, arXiv:2305.09781; Medusa,
Cai et al. 2024, arXiv:2401.10774) and gives p[i], the target's distribution of the token that follows node i. q[i]
is the distribution node i's children were drawn from.

The rule at one node, multi-draft speculative sampling. Start with p' = p[node], q' = q[node] and try the children
x_1 .. x_b in order:

    accept x_j with probability  min(1, p'(x_j) / q'(x_j))     (draw u_j ~ U[0, 1), accept if u_j < that)
        -> x_j is emitted, and the rule moves down to x_j with p' = p[x_j], q' = q[x_j]
    on rejection:  p' <- norm(max(0, p' - q'))                 (the residual, as in a chain)
                   q' <- norm(q' with x_j removed)             (only for children drawn without replacement)

If every child is rejected, one token is drawn from the last p' and the step ends. If the path reaches a leaf, the
bonus is drawn from p[leaf]. A chain is the tree with one child per node, and then this is `verify` (Leviathan et
al. 2023, Algorithm 1).

Why it is exact. Trying x_1 is one step of ordinary speculative sampling of p' with proposal q': it emits x with
probability min(p'(x), q'(x)), and when it rejects it must emit a sample of r = norm(max(0, p' - q')) instead
(`verify`'s docstring has the one-line proof). The remaining children do exactly that: they are a fresh speculative
sampling of r, *provided each child is judged by the distribution it was really drawn from, given the siblings
tried before it*:

- children drawn independently from q (SpecInfer's multi-step speculative sampling): x_2 was drawn from q whatever
  x_1 was, so q' stays q;
- children drawn without replacement, a sample of b distinct tokens (recursive speculative decoding, Jeon et al.
  2024, arXiv:2402.14160; the first EAGLE's sampled trees, Li et al. 2024, arXiv:2401.15077; the bundled head's
  sampled trees here): x_2 was drawn from q with x_1 removed and renormalised, so that is its q'. Judging it by q
  instead would use a proposal it was not drawn from, and the output would be biased;
- children chosen, not drawn (q = None: the b most likely tokens of the draft, as EAGLE-2's trees keep even when
  sampling, prompt lookup's several matches):
  each x_j is its own point mass, so it is accepted with probability p'(x_j), and its rejection removes x_j from
  p'. Judging chosen children by the without-replacement rule is a bug that greedy output never shows: with
  p = [1/2, 1/3, 1/6], q = [1/4, 1/4, 1/2] and the top two of q chosen, it emits [2/3, 0, 1/3].

By induction over the children the token leaving a node is distributed as p[node], and by induction over the depth
the whole emitted sequence is distributed as the target's own samples. Greedy decoding needs no uniforms: follow the
target's argmax down the tree (the first child that is the argmax is accepted); the argmax at the node where the
path stops is the correction, or the bonus at a leaf. That is plain greedy decoding, however the tree was drafted.

The generator is used as `verify` uses it: one float64 uniform per drafted node, u[i - 1] for node i, all drawn up
front (most go unused), then one token from the final distribution. So on a chain `verify_tree` and `verify` agree
token for token. Like `verify`, the rule runs in float64 whatever the inputs' dtype, and it never changes its inputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch

from teachspec.sampling import sample
from teachspec.speculative.verify import _check_distributions, _check_generator, _describe, residual  # shared
from teachspec.validate import check_int

Kind = Literal["independent", "without_replacement"]
KINDS = ("independent", "without_replacement")


@dataclass(frozen=True, slots=True)
class TokenTree:
    """A drafted tree, its nodes numbered so that every parent comes before its children.

    parents[i] is the node whose next token node i guesses, -1 for the root; tokens[i] is node i's token. tokens[0]
    is the last committed token: the target pass reads it, to give p[0], but nothing verifies it.
    """

    parents: tuple[int, ...]
    tokens: tuple[int, ...]
    children: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)  # in the order tried
    depth: tuple[int, ...] = field(init=False, repr=False, compare=False)  # root 0; position id = root's + depth

    def __post_init__(self) -> None:
        for name in ("parents", "tokens"):
            value = getattr(self, name)
            if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
                raise TypeError(f"{name} must be a sequence of ints, one per node (e.g. TokenTree(parents=(-1, 0), "
                                f"tokens=(7, 8))), got {type(value).__name__} {value!r}")
        parents = tuple(check_int(f"parents[{i}]", v) for i, v in enumerate(self.parents))
        tokens = tuple(check_int(f"tokens[{i}]", v, 0) for i, v in enumerate(self.tokens))
        if not parents or parents[0] != -1:
            raise ValueError(f"parents[0] must be -1 (node 0 is the root), got {parents[:1] or 'no nodes'}")
        if len(tokens) != len(parents):
            raise ValueError(f"tokens must hold one token per node, {len(parents)}, got {len(tokens)}")
        children: list[list[int]] = [[] for _ in parents]
        depth = [0]
        for i, parent in enumerate(parents[1:], start=1):
            if not 0 <= parent < i:
                raise ValueError(f"parents[{i}] must be a node numbered before it, in [0, {i}), got {parent}")
            children[parent].append(i)
            depth.append(depth[parent] + 1)
        object.__setattr__(self, "parents", parents)  # frozen: the checked tuples replace what was passed
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "children", tuple(map(tuple, children)))
        object.__setattr__(self, "depth", tuple(depth))

    @classmethod
    def chain(cls, root: int, draft: Sequence[int]) -> TokenTree:
        """The tree with one child per node: the chain `verify` checks."""
        return cls(parents=tuple(range(-1, len(draft))), tokens=(root, *draft))


@dataclass(slots=True)
class NodeRecord:
    """One child tried: the numbers a student checks by hand (verify's PositionRecord, for a node of a tree)."""

    node: int  # the child's index in the tree
    parent: int
    depth: int
    token: int  # x, the child's token
    q: float  # q'(x): the proposal the child is judged by, after its rejected siblings (1.0 for a point mass)
    p: float  # p'(x): the target's probability, or the residual's after rejected siblings
    ratio: float  # p / q; inf when q = 0
    u: float | None  # the uniform; accepted iff u < min(1, ratio) (and q > 0); None under greedy decoding
    decision: Literal["accept", "reject"]
    residual: torch.Tensor | None = None  # (vocab,) float64 p' after this rejection: what the next sibling sees
    resampled: int | None = None  # the token emitted instead, on the last record when every child was rejected


@dataclass(slots=True)
class TreeVerdict:
    path: list[int]  # the accepted nodes, root excluded, from depth 1 down: the KV rows to keep after the root's
    tokens: list[int]  # emitted: the path's tokens, then the resampled or bonus token (len(path) + 1 of them)
    nodes: list[NodeRecord] = field(default_factory=list)  # every child tried, in the order tried
    bonus: int | None = None  # drawn from p at the last accepted node, when the path reached a leaf
    resampled: int | None = None  # drawn from the last residual when every child of the last node was rejected
    # (greedy: the target's argmax at that node, the bonus likewise)

    @property
    def accepted(self) -> int:
        return len(self.path)


# -- the rule at one node ----------------------------------------------------------------------------------------

def verify_children(
    p: torch.Tensor, q: torch.Tensor | None, tree: TokenTree, node: int, u: Sequence[float], kind: Kind
) -> tuple[int | None, list[NodeRecord], torch.Tensor | None]:
    """Try the children of `node` in order, child i with uniform u[i - 1].

    p: (vocab,) the target's distribution after the node; q: (vocab,) the distribution its children were drawn
    from, or None for children proposed with certainty.
    Returns the accepted child (None when all were rejected), the records of the children tried, and when all were
    rejected the last residual p', which the emitted token is drawn from. A function of u alone, so a test can
    integrate over u exactly: child j decides u_j < min(1, ratio_j), and ratio_j depends only on earlier decisions.
    """
    target = p.double()  # p', the distribution the next token must follow; float64 as in `verify`
    proposal = None if q is None else q.double()  # q', what the next child was drawn from
    records = []
    for child in tree.children[node]:
        x = tree.tokens[child]
        q_child = proposal if proposal is not None else _certain(target, x)
        p_x, q_x = torch.stack([target[x], q_child[x]]).tolist()  # exact Python floats, in one read
        ratio = p_x / q_x if q_x > 0 else math.inf
        record = NodeRecord(node=child, parent=node, depth=tree.depth[child], token=x, q=q_x, p=p_x, ratio=ratio,
                            u=u[child - 1], decision="accept")
        records.append(record)
        if q_x > 0 and record.u < min(1.0, ratio):  # never a child q' could not have drawn, nor one p' rules out
            return child, records, None
        record.decision = "reject"
        target = record.residual = residual(target, q_child)
        if kind == "without_replacement" and proposal is not None:
            proposal = _without(proposal, x)
    return None, records, target


def _certain(like: torch.Tensor, x: int) -> torch.Tensor:
    """The point mass at x, for a child proposed with certainty (verify's `point_mass`, for one token)."""
    mass = torch.zeros_like(like)
    mass[x] = 1.0
    return mass


def _without(q: torch.Tensor, x: int) -> torch.Tensor:
    """norm(q with x removed): what the next child drawn without replacement was drawn from.

    All zeros when nothing is left (a node with more children than q has tokens): such a child has q'(x) = 0, so
    it is rejected, and max(0, p' - 0) leaves p' as it was."""
    kept = q.clone()
    kept[x] = 0.0
    mass = kept.sum()
    return kept / mass.where(mass > 0, 1.0)


# -- the rule over a tree ------------------------------------------------------------------------------------------

def verify_tree(
    p: torch.Tensor, q: torch.Tensor | None, tree: TokenTree, generator: torch.Generator | None,
    greedy: bool = False, kind: Kind = "independent", check: bool = True,
) -> TreeVerdict:
    """Run the multi-draft rule down a drafted tree.

    p: (n_nodes, vocab) the target's distribution after each node (after the same warping as q).
    q: (n_nodes, vocab) the distribution each node's children were drawn from (rows of leaves are not read), or
       None for children proposed with certainty.
    kind: how each node's children were drawn from q: "independent" (with replacement) or "without_replacement".
    greedy: follow the target's argmax instead; q is then only read for the records, and no uniform is drawn.
    check=False skips validating the inputs, for a caller that built them itself (the engine, at every step).
    """
    _check_generator(generator)
    if check:
        _check(p, q, tree, greedy, kind)
    if greedy:
        return _follow_argmax(p, q, tree)
    u = torch.rand(len(tree.tokens) - 1, generator=generator, dtype=torch.float64, device=p.device).tolist()
    node, path, records = 0, [], []
    while tree.children[node]:
        child, tried, final = verify_children(p[node], None if q is None else q[node], tree, node, u, kind)
        records += tried
        if child is None:
            resampled = tried[-1].resampled = sample(final, generator).item()
            return TreeVerdict(path, [tree.tokens[n] for n in path] + [resampled], records, resampled=resampled)
        path.append(child)
        node = child
    bonus = sample(p[node], generator).item()  # p at the leaf, already computed by the same pass: free
    return TreeVerdict(path, [tree.tokens[n] for n in path] + [bonus], records, bonus=bonus)


def _follow_argmax(p: torch.Tensor, q: torch.Tensor | None, tree: TokenTree) -> TreeVerdict:
    """Greedy decoding down the tree: accept the first child that is the target's argmax."""
    best = p.argmax(-1).tolist()  # (n_nodes,) the target's choice after each node, ties to the lowest id as in warp
    node, path, records = 0, [], []
    while True:
        for child in tree.children[node]:
            x = tree.tokens[child]
            p_x = p[node, x].item()
            q_x = 1.0 if q is None else q[node, x].item()
            records.append(NodeRecord(node=child, parent=node, depth=tree.depth[child], token=x, q=q_x, p=p_x,
                                      ratio=p_x / q_x if q_x > 0 else math.inf, u=None,
                                      decision="accept" if x == best[node] else "reject"))
            if x == best[node]:
                path.append(child)
                node = child
                break
        else:  # no child is the argmax, or this is a leaf
            tokens = [tree.tokens[n] for n in path] + [best[node]]
            if tree.children[node]:
                records[-1].resampled = best[node]
                return TreeVerdict(path, tokens, records, resampled=best[node])
            return TreeVerdict(path, tokens, records, bonus=best[node])


# -- input checks ------------------------------------------------------------------------------------------------

def _check(p: torch.Tensor, q: torch.Tensor | None, tree: TokenTree, greedy: bool, kind: str) -> None:
    if not isinstance(tree, TokenTree):
        raise TypeError(f"tree must be a TokenTree, got {type(tree).__name__}")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(map(repr, KINDS))}, got {kind!r}")
    if not isinstance(greedy, bool):
        raise TypeError(f"greedy must be True or False, got {greedy!r}")
    n = len(tree.tokens)
    if not isinstance(p, torch.Tensor) or p.dim() != 2 or not p.is_floating_point() or p.shape[0] != n \
            or p.shape[1] == 0:
        raise ValueError(f"p must be a floating-point tensor of shape (n_nodes={n}, vocab), one row per node of "
                         f"the tree, got {_describe(p)}")
    if q is not None:
        if not isinstance(q, torch.Tensor) or not q.is_floating_point() or q.shape != p.shape:
            raise ValueError(f"q must be None or a floating-point tensor of shape {tuple(p.shape)} like p, got "
                             f"{_describe(q)}")
        if q.device != p.device:
            raise ValueError(f"q is on {q.device} and p on {p.device}: they must be on one device")
    vocab = p.shape[1]
    for i, x in enumerate(tree.tokens):
        if x >= vocab:
            raise ValueError(f"tree.tokens[{i}] must be a token id in [0, vocab={vocab}), got {x}")
    if kind == "without_replacement":
        for node, kids in enumerate(tree.children):
            tokens = [tree.tokens[c] for c in kids]
            if len(set(tokens)) < len(tokens):
                raise ValueError(f"node {node}'s children repeat a token, {tokens}: children drawn without "
                                 f"replacement are distinct (kind='independent' allows repeats)")
    _check_distributions("p", p)
    if q is not None:
        _check_distributions("q", q[[i for i, kids in enumerate(tree.children) if kids]])  # leaves' rows unread
