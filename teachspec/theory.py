"""Theory: how many tokens a speculation step yields, and what that buys in wall time.

Leviathan et al. 2023 ("Fast Inference from Transformers via Speculative Decoding", Section 3) model a step with
two numbers:

    alpha  the acceptance rate: the chance a drafted token is accepted, E[sum_x min(p(x), q(x))]
           (Corollary 3.6); for one position beta = sum(min(p, q)) = 1 - TV(p, q)
    c      the cost ratio: time of one draft forward pass / time of one target forward pass

Treating acceptances as independent with probability alpha, the step emits token i + 1 exactly when the first i
drafts were all accepted, which happens with probability alpha^i. Summing over i = 0 .. k gives Equation (1),

    E[tokens per step] = 1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha)     (k + 1 when alpha = 1)

and since a step costs k draft passes plus one target pass, i.e. k c + 1 target passes, the expected wall-time
improvement over plain decoding is (Theorem 3.8)

    speedup = (1 - alpha^(k+1)) / ((1 - alpha) (k c + 1)).

Example: alpha = 0.8, c = 0.05, k = 4 gives 3.3616 tokens per step and a 2.80x speedup; the best k there is 8,
giving 3.09x.

Trees. A token tree (`speculative.tree`) offers several guesses per position, and the multi-draft rule tries a
node's children in order. Describe acceptance by h[d][r]: the chance that the child of rank r (0 = tried first) of a
node at depth d (0 = the root) is accepted, given that the node was reached and its r earlier siblings were rejected.
The children's chances of being *the* accepted one are then h[d][0], (1 - h[d][0]) h[d][1], ..., and a node's token
is emitted exactly when every step of its path is, so, as Sequoia (Chen et al. 2024, arXiv:2402.12374, the
"positional acceptance" assumption) sums it,

    E[tokens per target pass] = sum over nodes v of  prod over the steps (d, r) of v's path of
                                                     h[d][r] (1 - h[d][0]) ... (1 - h[d][r-1]),

the root's empty product counting the one token every pass emits (the correction or the bonus). A chain of k with
h = alpha is Eq. (1) again: 1 + alpha + ... + alpha^k. Adding a node adds a term >= 0, so a bigger tree never
expects fewer tokens; whether it pays depends on what its pass costs, which on a CPU grows with the number of
nodes sooner than on a GPU: `tree_tokens_per_second` divides by a measured cost. The formula is exact when p and
q are the same at every node and the children are drawn independently: then h[d][r] = sum(min(p_r, q)), where p_r
is the residual after r rejections, whichever tokens were rejected. Elsewhere h is a model, as alpha is in Eq. (1):
children drawn without replacement (the engine's draft model) or proposed with certainty are judged by a q' that
depends on which siblings came before, so h[d][r] is then an average, measured (`speculative/tree_policy.py`).

For a static tree (every node at depth d has b_d children) the sum has a closed form. The chance that *some* child
of a reached depth-d node is accepted is A_d = 1 - (1 - h[d][0]) ... (1 - h[d][b_d - 1]), and a token is emitted at
depth D exactly when one was at every depth before it, so

    E[tokens per target pass] = 1 + A_0 + A_0 A_1 + ... + A_0 A_1 ... A_(D-1)          (`static_tree_expected_tokens`)

Eq. (1) with alpha at depth d replaced by A_d: widening a level raises its A_d, deepening adds a term.

Batches. When b requests share every pass, a step verifies b (k + 1) positions: `batch_speedup` divides Eq. (1) by
k c + cost(b (k + 1)) / cost(b), a pass-cost curve's ratio in place of Theorem 3.8's 1 (section "batches" below),
and `batch_crossover` finds the smallest batch at which that falls below 1: where speculation stops paying.

Every function takes plain floats and returns a float; alpha and c may also be numpy arrays (elementwise), except
in the batch functions, which take one of each. The tree
functions take a tree as its parents (`TokenTree.parents`, or `static_tree`), or a static tree as its shape.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence

import numpy as np
import torch

FloatOrArray = float | np.ndarray  # alpha and c may be arrays, evaluated elementwise


def expected_tokens(alpha: FloatOrArray, k: int) -> FloatOrArray:
    """Expected tokens emitted per step with draft length k: (1 - alpha^(k+1)) / (1 - alpha), Eq. (1)."""
    a = _alpha(alpha)
    _k("k", k)
    # The geometric sum itself: no 0/0 at alpha = 1, where it gives k + 1.
    return _out(sum(a**i for i in range(k + 1)))


def speedup(alpha: FloatOrArray, k: int, c: FloatOrArray) -> FloatOrArray:
    """Expected wall-time improvement over plain decoding (Theorem 3.8); k = 0 is plain decoding, 1.0."""
    return _out(np.asarray(expected_tokens(alpha, k)) / (k * _c(c) + 1))


def optimal_k(alpha: FloatOrArray, c: FloatOrArray, k_max: int = 16) -> int | np.ndarray:
    """The draft length in 0 .. k_max with the largest speedup; ties go to the shorter draft.

    k = 0 (plain decoding) wins when drafting cannot pay for itself, e.g. when alpha <= c.
    """
    _k("k_max", k_max)
    speedups = np.stack([np.asarray(speedup(alpha, k, c)) for k in range(k_max + 1)])  # (k_max+1, ...)
    best = speedups.argmax(axis=0)
    return int(best) if best.ndim == 0 else best


def speedup_bound(alpha: FloatOrArray, c: FloatOrArray) -> FloatOrArray:
    """(1 + alpha) / (1 + c): the speedup of k = 1, a lower bound on the best speedup.

    Only meaningful when alpha > c (the corollary to Theorem 3.8): then some k beats plain decoding,
    and the best one does at least this well. When alpha <= c the value is <= 1 and drafting may not pay.
    """
    return _out((1 + _alpha(alpha)) / (1 + _c(c)))


def alpha_from_distributions(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """beta = sum(min(p, q)) over the last dim: the chance a token sampled from q is accepted (Corollary 3.6)."""
    if not isinstance(p, torch.Tensor) or not isinstance(q, torch.Tensor) or p.shape != q.shape:
        raise ValueError(
            f"p and q must be tensors of the same shape (..., vocab), got {_shape(p)} and {_shape(q)}"
        )
    return torch.minimum(p, q).sum(-1)



# -- trees -------------------------------------------------------------------------------------------------------

Acceptance = float | Sequence[float | Sequence[float]]  # alpha, or h[d] per depth, or h[d][r] per depth and rank


def static_tree(branching: Sequence[int]) -> tuple[int, ...]:
    """The parents of the static tree a shape such as (3, 2, 2, 1) names: every node at depth d has branching[d]
    children (Medusa's and SGLang's fixed trees). Breadth first, so parents come before their children; () is the
    root alone (no guess at all) and (1,) * k a chain of k."""
    parents, level = [-1], [0]
    for b in _branching(branching):
        start = len(parents)
        parents += [node for node in level for _ in range(b)]
        level = list(range(start, len(parents)))
    return tuple(parents)


def tree_expected_tokens(parents: Sequence[int], acceptance: Acceptance) -> float:
    """Expected tokens emitted per target pass over the tree: the sum over its nodes of the chance each is
    emitted (module docstring; Sequoia's F(T)).

    parents: each node's parent, -1 for the root (node 0), parents numbered before their children.
    acceptance: h[d][r] as in the module docstring; one number alpha for every depth and rank, or one entry per
    depth (a number, or a list over ranks). Depths beyond the list repeat its last entry, ranks beyond a row its
    last number, so [[0.8, 0.3]] says "0.8 for a first child, 0.3 for every later one, at every depth".
    """
    depth, rank = _tree(parents)
    table = _acceptance(acceptance)
    n = len(parents)
    emitted = [1.0] * n  # the chance each node's token is emitted; the root stands for the token every pass emits
    all_rejected = [1.0] * n  # per node: the chance that every child of it tried so far was rejected
    for i in range(1, n):  # parents first, so emitted[parent] is known
        parent = parents[i]
        row = table[min(depth[parent], len(table) - 1)]
        h = row[min(rank[i], len(row) - 1)]
        emitted[i] = emitted[parent] * all_rejected[parent] * h
        all_rejected[parent] *= 1 - h
    return math.fsum(emitted)


def static_tree_expected_tokens(branching: Sequence[int], acceptance: Acceptance) -> float:
    """tree_expected_tokens(static_tree(branching), acceptance) in closed form, 1 + A_0 + A_0 A_1 + ... with
    A_d = 1 - prod over r < branching[d] of (1 - h[d][r]) (module docstring): a few multiplications per depth
    instead of a walk over every node, for a policy that weighs many shapes before every step."""
    table = _acceptance(acceptance)
    total, reach = 1.0, 1.0  # reach: the chance that a token is emitted at every depth so far
    for d, b in enumerate(_branching(branching)):
        row = table[min(d, len(table) - 1)]
        all_rejected = 1.0
        for r in range(b):
            all_rejected *= 1 - row[min(r, len(row) - 1)]
        reach *= 1 - all_rejected  # A_d
        total += reach
    return total


def tree_tokens_per_second(
    parents: Sequence[int], acceptance: Acceptance, pass_s: Callable[[int], float], draft_s: float = 0.0
) -> float:
    """Expected tokens per second of steps that draft this tree and verify it in one target pass:

        tree_expected_tokens(parents, acceptance) / (draft_s + pass_s(len(parents)))

    pass_s(n): measured seconds of a target pass over n nodes (1 is plain decoding: the root alone).
    draft_s: seconds to draft the tree (0 for prompt lookup). The tree with the most tokens per second wins, the
    root alone (plain decoding) and chains included. With pass_s constant and draft_s = k c pass_s for a chain of
    k, the ratio to plain decoding is Theorem 3.8's speedup."""
    _tree(parents)
    n = len(parents)
    if isinstance(draft_s, bool) or not isinstance(draft_s, numbers.Real) or not math.isfinite(draft_s) \
            or draft_s < 0:
        raise ValueError(f"draft_s must be a finite number of seconds >= 0, got {draft_s!r}")
    seconds = pass_s(n)
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) or not math.isfinite(seconds) \
            or seconds <= 0:
        raise ValueError(f"pass_s({n}) must return a finite number of seconds > 0, got {seconds!r}")
    return tree_expected_tokens(parents, acceptance) / (draft_s + seconds)


# -- batches -----------------------------------------------------------------------------------------------------
#
# A serving engine runs b requests in every target pass. Plain decoding then costs one pass over b positions per
# b tokens; speculation with draft length k costs k draft passes over b positions and one target pass over
# b (k + 1) positions (vLLM's docs: "the effective batch size becomes BS * K"), for b E[tokens](alpha, k) tokens.
# Theorem 3.8 of Leviathan et al. 2023 (arXiv:2211.17192) charges the target pass 1 whatever it verifies; with
# the pass cost measured or modelled instead (as lecture 4 does at b = 1), the speedup at batch b is
#
#     E[tokens](alpha, k) / (k c + cost(b (k + 1)) / cost(b))
#
# where c is a draft pass over a target pass, both over b positions (`batch_c` derives it from c at b = 1 and the
# draft's own pass-cost curve, as lecture 13 does). While cost stays flat (the pass is bound by
# reading the weights) this is Theorem 3.8; once b (k + 1) passes the knee, where arithmetic catches up with the
# reading, every guessed position costs real compute, and far enough past it the best k is 0. SmartSpec (Liu et al. 2024,
# arXiv:2406.14066) chooses k per batch from the same trade, its cost a linear model of the batch's tokens;
# MagicDec (Chen et al. 2024, arXiv:2408.11049) points out that at long contexts the pass also reads every
# request's KV cache, which keeps it memory-bound, so cost(b (k + 1)) / cost(b) stays near 1 at large batches.

def batch_speedup(alpha: float, k: int, c: float, pass_cost: Callable[[int], float], b: int = 1,
                  draft_cost: Callable[[int], float] | None = None) -> float:
    """Expected speedup of speculation over plain decoding when b requests share every pass: Leviathan et al. 2023,
    Theorem 3.8, with the target pass over b (k + 1) positions costing what `pass_cost` says instead of 1 (the
    comment above), E[tokens](alpha, k) / (k c_b + pass_cost(b (k + 1)) / pass_cost(b)).

    pass_cost(n): the time (any unit) of one target pass over n positions, measured or modelled; only its ratios
    matter. c: a draft pass over b positions divided by a target pass over b, unless draft_cost is given.
    draft_cost(n): the time of one draft pass over n positions (same unit as pass_cost); then c is the ratio at
    b = 1 and c_b follows both curves (`batch_c`). k = 0 is plain decoding, 1.0; with pass_cost constant (and no
    draft_cost) it is Theorem 3.8's `speedup(alpha, k, c)`."""
    _k("k", k)
    _batch("b", b)
    alpha = _scalar("alpha", alpha)
    _callable("pass_cost", pass_cost)
    c_b = batch_c(c, b, pass_cost, draft_cost) if draft_cost is not None else _scalar("c", c, _c)
    if k == 0:
        return 1.0
    plain, verify = _cost(pass_cost, b), _cost(pass_cost, b * (k + 1))
    return float(expected_tokens(alpha, k)) / (k * c_b + verify / plain)


def batch_c(c: float, b: int, pass_cost: Callable[[int], float], draft_cost: Callable[[int], float]) -> float:
    """c at batch b from c at b = 1 and both pass-cost curves (lecture 13):

        c_b = c (draft_cost(b) / draft_cost(1)) / (pass_cost(b) / pass_cost(1)).

    The draft's pass grows with b at its own rate: a model as small as a draft is mostly fixed costs (kernel
    launches, Python), so its pass stays flat longer than the target's, and c_b usually falls as b grows."""
    c = _scalar("c", c, _c)
    _batch("b", b)
    _callable("pass_cost", pass_cost)
    _callable("draft_cost", draft_cost, "draft")
    return c * (_cost(draft_cost, b, "draft_cost") / _cost(draft_cost, 1, "draft_cost")) / (
        _cost(pass_cost, b) / _cost(pass_cost, 1))


def batch_optimal_k(alpha: float, c: float, pass_cost: Callable[[int], float], b: int = 1, k_max: int = 16,
                    draft_cost: Callable[[int], float] | None = None) -> int:
    """The draft length in 0 .. k_max with the largest `batch_speedup` at batch b; ties go to the shorter draft, so
    0 (plain decoding) means no k pays at this batch.

    This is SmartSpec's choice (Liu et al. 2024, arXiv:2406.14066, Section 4): k per batch to maximise goodput,
    accepted plus bonus tokens per second. Per request and step, the tokens are Eq. (1)'s E[tokens](alpha, k), the
    time k c_b + pass_cost(b (k + 1)) / pass_cost(b) plain passes, so `batch_speedup` is goodput(k) / goodput(0)
    and the k that maximises one maximises the other. (SmartSpec models the time as linear in the batch's tokens,
    fitted at start; here it is any curve, measured.)"""
    _k("k_max", k_max)
    speedups = [batch_speedup(alpha, k, c, pass_cost, b, draft_cost) for k in range(k_max + 1)]
    return max(range(k_max + 1), key=lambda k: (speedups[k], -k))


def batch_crossover(alpha: float, c: float, pass_cost: Callable[[int], float], *, k: int | None = None,
                    batches: Sequence[int] | None = None, b_max: int | None = None, k_max: int = 16,
                    draft_cost: Callable[[int], float] | None = None) -> int | None:
    """The smallest batch b at which speculation stops paying: `batch_speedup` < 1 at draft length k, or, with
    k = None, at every k in 1 .. k_max (the best k, SmartSpec's goodput choice, is then 0: `batch_optimal_k`).
    None when speculation pays at every batch looked at.

    batches: the batches to look at, e.g. the ones a server was measured at (1, 2, 4, ..., 128); else every b in
    1 .. b_max (default 1024), for which pass_cost (and draft_cost) must answer at every n up to b_max (k + 1)
    (`k_max + 1` with k = None): a model, or a measured curve interpolated. A measured curve need not be monotone,
    so b is the first batch that loses, not one after which every batch loses. c and draft_cost as in
    `batch_speedup`. Every argument is checked before any pass cost is asked for.

    Example: alpha = 0.8, c = 0.05, a pass flat up to 64 positions and n / 64 beyond (`max(1, n / 64)`): at k = 3
    speculation stops paying at b = 45, where a step's 180 positions cost 2.81 plain passes and its guesses 0.15
    more, against Eq. (1)'s 2.95 tokens; at its best k, at b = 57."""
    alpha = _scalar("alpha", alpha)
    c = _scalar("c", c, _c)
    _callable("pass_cost", pass_cost)
    if draft_cost is not None:
        _callable("draft_cost", draft_cost, "draft")
    if k is not None and (isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1):
        raise ValueError(f"k must be an int >= 1 (a draft length), or None for the best k at each batch, got {k!r}")
    _k("k_max", k_max)
    if k is None and k_max < 1:
        raise ValueError(f"k_max must be >= 1 when k is None (the best of k = 1 .. k_max), got {k_max!r}")
    if batches is not None and b_max is not None:
        raise ValueError(f"give batches or b_max, not both (got batches={batches!r} and b_max={b_max!r})")
    if batches is None:
        b_max = 1024 if b_max is None else b_max
        _batch("b_max", b_max)
        looked_at = range(1, b_max + 1)
    else:
        if isinstance(batches, (str, bytes)) or not isinstance(batches, Sequence) or not batches:
            raise ValueError(f"batches must be a non-empty sequence of ints >= 1, got {batches!r}")
        for i, b in enumerate(batches):
            _batch(f"batches[{i}]", b)
        looked_at = sorted(set(batches))
    ks = [k] if k is not None else range(1, k_max + 1)
    for b in looked_at:
        if all(batch_speedup(alpha, j, c, pass_cost, b, draft_cost) < 1 for j in ks):
            return int(b)
    return None


def _cost(pass_cost: Callable[[int], float], n: int, name: str = "pass_cost") -> float:
    t = pass_cost(n)
    if isinstance(t, bool) or not isinstance(t, numbers.Real) or not math.isfinite(t) or t <= 0:
        raise ValueError(f"{name}({n}) must return a finite time > 0, got {t!r}")
    return float(t)


def _callable(name: str, f: object, model: str = "target") -> None:
    if not callable(f):
        raise ValueError(f"{name} must be a function of the positions in a {model} pass, got {f!r}")


def _batch(name: str, b: object) -> None:
    if isinstance(b, bool) or not isinstance(b, numbers.Integral) or b < 1:
        raise ValueError(f"{name} must be an int >= 1 (requests in the batch), got {b!r}")


def _scalar(name: str, x: float, check: Callable | None = None) -> float:
    """One plain number (not an array: the batch functions take one alpha and one c), checked as alpha or c."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise ValueError(f"{name} must be one number, got {x!r}")
    return float((check or _alpha)(float(x)))


# -- checks ------------------------------------------------------------------------------------------------------

def _alpha(alpha: FloatOrArray) -> FloatOrArray:
    a = _number_array("alpha", alpha, "in [0, 1]")
    if not _all((a >= 0) & (a <= 1)):
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    return a


def _c(c: FloatOrArray) -> FloatOrArray:
    a = _number_array("c", c, ">= 0 (draft pass time / target pass time)")
    if not _all(np.isfinite(a) & (a >= 0)):
        raise ValueError(f"c must be a finite number >= 0 (draft pass time / target pass time), got {c!r}")
    return a


def _k(name: str, k: int) -> None:
    if not isinstance(k, numbers.Integral) or isinstance(k, bool) or k < 0:
        raise ValueError(f"{name} must be an int >= 0, got {k!r}")


def _branching(branching: Sequence[int]) -> list[int]:
    """A static tree's shape: one int >= 1 per depth."""
    if isinstance(branching, (str, bytes)) or not isinstance(branching, Sequence):
        raise ValueError(f"branching must be a sequence of ints >= 1, one per depth, got {branching!r}")
    for d, b in enumerate(branching):
        if type(b) is not int and (isinstance(b, bool) or not isinstance(b, numbers.Integral)) or b < 1:
            raise ValueError(f"branching[{d}] must be an int >= 1 (children per node at depth {d}), got {b!r}")
    return list(branching)


def _tree(parents: Sequence[int]) -> tuple[list[int], list[int]]:
    """Each node's depth and rank (its place among its siblings), checking that parents describe a tree."""
    if isinstance(parents, (str, bytes)) or not isinstance(parents, Sequence) or not parents or parents[0] != -1:
        raise ValueError(f"parents must be a sequence starting with -1 (node 0 is the root), got {parents!r}")
    depth, rank, children = [0], [0], [0] * len(parents)
    for i, parent in enumerate(parents[1:], start=1):
        if isinstance(parent, bool) or not isinstance(parent, numbers.Integral) or not 0 <= parent < i:
            raise ValueError(f"parents[{i}] must be a node numbered before it, an int in [0, {i}), got {parent!r}")
        depth.append(depth[parent] + 1)
        rank.append(children[parent])
        children[parent] += 1
    return depth, rank


def _acceptance(acceptance: Acceptance) -> list[list[float]]:
    """h as rows of floats, one row per depth, each in [0, 1]."""
    if isinstance(acceptance, np.ndarray):  # a policy's measured table
        acceptance = acceptance.tolist()
    rows = [acceptance] if isinstance(acceptance, numbers.Real) else acceptance
    if isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence) or not rows:
        raise ValueError(f"acceptance must be a number in [0, 1] or a non-empty list of them per depth (or of lists "
                         f"per rank), got {acceptance!r}")
    table = []
    for d, row in enumerate(rows):
        if type(row) is list and row and all(type(h) is float and 0 <= h <= 1 for h in row):
            table.append(row)  # the common case, a policy's measured row, without the slower checks below
            continue
        row = [row] if isinstance(row, numbers.Real) else row
        if isinstance(row, (str, bytes)) or not isinstance(row, Sequence) or not row:
            raise ValueError(f"acceptance[{d}] must be a number in [0, 1] or a non-empty list of them per rank, "
                             f"got {row!r}")
        for r, h in enumerate(row):
            if isinstance(h, bool) or not isinstance(h, numbers.Real) or not 0 <= h <= 1:
                raise ValueError(f"acceptance[{d}][{r}] must be a number in [0, 1], got {h!r}")
        table.append([float(h) for h in row])
    return table


def _number_array(name: str, x: FloatOrArray, allowed: str) -> FloatOrArray:
    """One number as a float, anything else as a float array."""
    if isinstance(x, (bool, np.bool_)):
        raise ValueError(f"{name} must be a number {allowed}, got {x!r}")
    if isinstance(x, (int, float)):
        # stays a Python float: on one number numpy's per-call overhead would be most of the work, and the live
        # stats strip (widgets/measure.py) asks for a speedup at every step of a running generation
        return float(x)
    try:
        return np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number {allowed}, got {x!r}") from None


def _all(mask: bool | np.ndarray) -> bool:
    return bool(mask.all()) if isinstance(mask, np.ndarray) else bool(mask)


def _out(x: FloatOrArray) -> FloatOrArray:
    """A float for scalar inputs, the array otherwise."""
    x = np.asarray(x)
    return float(x) if x.ndim == 0 else x


def _shape(x: object) -> str:
    return str(tuple(x.shape)) if isinstance(x, torch.Tensor) else type(x).__name__
