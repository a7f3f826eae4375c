"""The graded parts of the eight assignments, judged here on answers computed where the student's code cannot reach.

Each assignment is graded in parts, one property each, so that one bug costs its part and not the whole exercise:

    judge("a1.decisions", definitions(nb), secret)   # returns the verdict line, or raises CheckFailed naming the
                                                     # case and the likely cause

The student's code runs in a child interpreter (`teachspec.course.sandbox`), defined from the notebook's text
(`teachspec.course.definitions`), never from a kernel the student's cells ran in. Three rules make a part hold:

- Its expected answers come from this file: small plain-Python references (tests/course/test_assignments.py checks each
  against the library's own implementation), on cases drawn from its own random numbers (`Draws`, SplitMix64),
  compared here. Nothing is stored that a student could read: the answers are computed at grading time.
- The visible cases come from a public seed (a student's `check` runs the same ones); the hidden cases from the
  course's secret (`teachspec.course.autograde`) and the submission's own code, drawn at grading time. A
  submission that hard-codes the answers to the cases it can know fails the others.
- It grades one thing. The other exercises an answer calls (`speculative_step` calls `residual`, `choose_k` calls
  `expected_speedup`, `rank_acceptance` calls `remove`, `best_hit_rate` calls `reused`, `grow` calls `confidence`
  and `rerank`, `longest_match` and `guess` call `followers`, `guess` calls `longest_match`, `route` calls `match`
  and `imbalanced`) are replaced in the child by correct ones while it is graded (`STAND_INS`).

In the child, teachspec itself is not importable (the import is refused, with the reason), but for the narrow
copies an exercise is offered (`OFFERS`: `sample`, say): handing the exercise to the library is closed as a class,
not a list of names. A part that needs a whole run judges it here and calls the student's code from it: assignment
8's `route` is the router of teachspec's simulator (`teachspec.routing.simulate`), one call a request, its routes
judged against the library's `cache_aware` on the same workload.

Statistical parts judge frequencies within 5.5 standard errors per token (`agrees`): a false fail about once in
2.6e7 tokens, and a part judges at most 16 tokens, visible and hidden together, so a correct answer fails a part less
than once in 1.6e6 gradings.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import inspect
import itertools
import math
import re
import textwrap
from fractions import Fraction
from pathlib import Path

import torch

from teachspec.course.definitions import Definitions
from teachspec.course.sandbox import Died, Limits, Raised, Remote, Sandbox, TimedOut

WIDTH = 76  # with "CheckFailed: " in front, a line of the verdict fits the 90 columns nbgrader validate prints


class CheckFailed(AssertionError):
    """A part's verdict, worded for the student: which case failed, what was expected and the likely cause.
    `causes` and `hidden` say it without the case, for a hidden case the student must not see."""

    def __init__(self, message: str, causes: tuple[str, ...] = (), hidden: str = ""):
        super().__init__(message)
        self.causes, self.hidden = causes, hidden


def fail(case: str, *causes: str, hidden: str = "") -> None:
    """Fail the part: `case` says which case and what came back, `causes` the likely cause (no case in them)."""
    raise CheckFailed(wrap(case, *causes), tuple(c for c in causes if c), hidden)


def wrap(*paragraphs: str) -> str:
    """Paragraphs filled to WIDTH columns, a blank line between them."""
    return "\n\n".join(textwrap.fill(" ".join(p.split()), WIDTH) for p in paragraphs if p)


# -- the grader's own random numbers ---------------------------------------------------------------------------

class Draws:
    """SplitMix64 (Steele, Lea, Flood 2014): a few lines of integer arithmetic, so that no random source the
    notebook can replace (torch's, numpy's, the random module's) decides which cases a part tries."""

    MASK = 2**64 - 1

    def __init__(self, seed: int):
        self.state = seed & self.MASK

    def bits(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & self.MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & self.MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & self.MASK
        return z ^ (z >> 31)

    def uniform(self) -> float:
        return (self.bits() >> 11) / 2.0**53  # [0, 1)

    def below(self, n: int) -> int:
        return self.bits() % n

    def pick(self, probs: list[float]) -> int:
        """A token drawn from probs (inverse CDF)."""
        u, total = self.uniform() * sum(probs), 0.0
        for x, p in enumerate(probs):
            total += p
            if u < total and p > 0:
                return x
        return max(x for x, p in enumerate(probs) if p > 0)

    def shuffled(self, xs) -> list:
        xs = list(xs)
        for i in range(len(xs) - 1, 0, -1):
            j = self.below(i + 1)
            xs[i], xs[j] = xs[j], xs[i]
        return xs

    def distribution(self, vocab: int, zeros: int = 0) -> list[float]:
        w = [self.uniform() ** 2 + 0.02 for _ in range(vocab)]
        for x in self.shuffled(range(vocab))[:zeros]:
            w[x] = 0.0
        return [v / sum(w) for v in w]

    def generator(self) -> torch.Generator:
        """A torch generator for the student's own uniforms, seeded from these draws."""
        return torch.Generator().manual_seed(self.bits() >> 1)


def seed_of(part: str, secret: bytes | None = None, code: str = "") -> int:
    """The seed of a part's cases: public for the visible ones; for the hidden ones, the course's secret and the
    submission's code. The code is in it so that a secret that leaks (a notebook's cell can read the course's file
    while it runs at autograde, and print it) is no use: a table of answers written for the cases a secret gives
    changes the code, and so the cases."""
    if secret is None:
        return int.from_bytes(hashlib.sha256(f"{part}/visible".encode()).digest()[:8], "big")
    key = secret + f"/{part}/hidden/".encode() + hashlib.sha256(code.encode()).digest()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big")


# -- calling the student's code ----------------------------------------------------------------------------------

def call(what: str, fn, *args, hints: dict | None = None):
    """fn(*args) over in the sandbox; an answer not written yet, a refused import, a crash, an exit or a call that
    does not come back becomes a verdict that says so (with a hint for the exception's type, from `hints`, where
    the likely cause is known)."""
    try:
        return fn(*args)
    except (Raised, TimedOut, Died) as e:
        explain(what, args, e, hints)


def call_many(what: str, fn: Remote, calls: list[tuple], hints: dict | None = None) -> list:
    """fn on each of `calls` in one message to the sandbox: a failure is explained with the call it failed on (and
    a hint, as `call` gives one)."""
    try:
        return fn.many(calls)
    except (Raised, TimedOut, Died) as e:
        explain(what, calls[getattr(e, "index", 0)], e, hints)


def explain(what: str, args: tuple, e: Exception, hints: dict | None) -> None:
    """The verdict for a call that did not answer: raised, did not return, or ended the interpreter."""
    if isinstance(e, TimedOut):
        fail(f"Your function did not return in {e.seconds:g} s on this case: {case(what, args)}. Look for a loop "
             f"that never ends for this input.", hidden=f"it did not return in {e.seconds:g} s")
    if isinstance(e, Died):
        fail(f"{what} stopped the grader's interpreter on this case: {case(what, args)}: {e.why}.",
             f"What it printed last: {e.output[-600:]}" if e.output.strip() else "", hidden=e.why)
    if "NotImplementedError" in e.kinds:
        fail(f"{what} still raises NotImplementedError: you have not written it yet. Replace `raise "
             f"NotImplementedError()` in the exercise cell with your code, run that cell, then run this check "
             f"again.", hidden="it still raises NotImplementedError")
    if "ImportError" in e.kinds and e.message.startswith("teachspec is not importable"):
        fail(f"{what}: {e.message}", hidden=e.message)
    if e.kinds[0] in ("SystemExit", "KeyboardInterrupt"):
        fail(f"{what} raised {e.kinds[0]} on this case: {case(what, args)}. A graded function must return its "
             f"answer; exiting is a failed part.", hidden=f"it raised {e.kinds[0]}")
    fail(f"{what} raised {e.kinds[0]}: {e.message} (on {case(what, args)})",
         next((h for k, h in (hints or {}).items() if k in e.kinds), ""), hidden=f"it raised {e.kinds[0]}")


def case(what: str, args: tuple) -> str:
    """A call as the student would write it, shortened."""
    text = f"{what.split('(')[0]}({', '.join(shown(a) for a in args)})"
    return text if len(text) <= 400 else text[:397] + "..."


def shown(v) -> str:
    if isinstance(v, torch.Tensor):
        return f"tensor({v.tolist()})"
    if isinstance(v, torch.Generator):
        return "generator"
    if isinstance(v, Remote):
        return "<your object>"
    return repr(v)


def close(a: float, b: float, tol: float = 1e-9) -> bool:
    return abs(a - b) <= tol * max(1.0, abs(b))


def fmt(xs) -> str:
    return "[" + ", ".join(f"{float(x):.4g}" for x in xs) + "]"


def written(what: str, out):
    """`out`, unless it is the None of an exercise whose code is still missing (Otter's copies hold `...` there)."""
    if out is None:
        fail(f"{what} returned None: its code is not written yet (the exercise cell still holds `...` or `raise "
             f"NotImplementedError()`), or it has no `return`.")
    return out


def floats(x, what: str) -> list[float]:
    """A returned tensor, list or number as a flat list of Python floats."""
    written(what, x)
    try:
        x = x.tolist() if hasattr(x, "tolist") else x
        x = x if isinstance(x, (list, tuple)) else [x]
        return [float(v) for v in x]
    except (TypeError, ValueError):
        fail(f"{what} must return numbers (a tensor or a list), got {x!r}")


def agrees(counts: list[int], probs: list[float], n: int) -> tuple[bool, int]:
    """Whether the observed counts of n draws agree with probs, every token within 5.5 standard errors (a false
    alarm about once in 10^7 tokens); and the token furthest off."""
    worst, worst_z = 0, -1.0
    for x, p in enumerate(probs):
        se = math.sqrt(max(p * (1 - p), 0.0) / max(n, 1))
        z = abs(counts[x] / max(n, 1) - p) / max(se, 1e-12)
        if abs(counts[x] / max(n, 1) - p) > 5.5 * se + 1e-9 and z > worst_z:
            worst, worst_z = x, z
    return worst_z < 0, worst


def frequencies(counts: list[int], n: int) -> list[float]:
    return [c / max(n, 1) for c in counts]


# -- a1: the acceptance rule -------------------------------------------------------------------------------------

def residual_of(p: list[float], q: list[float]) -> list[float]:
    """norm(max(0, p - q)); p itself when that has no mass."""
    r = [max(0.0, a - b) for a, b in zip(p, q)]
    return [v / sum(r) for v in r] if sum(r) > 0 else list(p)


def torch_residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The same, on tensors: what stands in for the student's `residual` while another part is graded."""
    r = (p.double() - q.double()).clamp(min=0.0)
    return r / r.sum() if r.sum() > 0 else p.double().clone()


def a1_residual(residual, draws: Draws, hidden: bool) -> None:
    cases = [([0.5, 0.3, 0.2], [0.2, 0.6, 0.2]), ([0.4, 0.4, 0.2], [0.1, 0.1, 0.8]), ([0.3, 0.7], [0.3, 0.7])]
    for _ in range(60 if hidden else 10):
        vocab = 3 + draws.below(5)
        cases.append((draws.distribution(vocab, draws.below(2)), draws.distribution(vocab, draws.below(2))))
    for p, q in cases:
        got = floats(call("residual", residual, torch.tensor(p, dtype=torch.float64),
                          torch.tensor(q, dtype=torch.float64)), "residual")
        want = residual_of(p, q)
        if len(got) == len(want) and all(close(a, b, 1e-6) for a, b in zip(got, want)):
            continue
        cause = ""
        if len(got) == len(want) and all(close(a, b, 1e-6) for a, b in zip(got, residual_of(q, p))):
            cause = "That is norm(max(0, q - p)): subtract q from p, not p from q."
        elif len(got) == len(want) and all(close(a, max(0.0, b - c), 1e-6) for a, b, c in zip(got, p, q)):
            cause = "That is max(0, p - q) unnormalised: divide by its sum so that it is a distribution."
        elif p == q or any(math.isnan(a) for a in got):
            cause = "When p = q, max(0, p - q) has no mass to normalise: return p itself."
        fail(f"residual(p={fmt(p)}, q={fmt(q)}): expected {fmt(want)}, got {fmt(got)}.", cause)


def step_args(p: list[list[float]], q: list[list[float]], draft: list[int], draws: Draws) -> tuple:
    return (torch.tensor(p, dtype=torch.float64), torch.tensor(q, dtype=torch.float64),
            torch.tensor(draft, dtype=torch.long), draws.generator())


def step(fn, p: list[list[float]], q: list[list[float]], draft: list[int], draws: Draws) -> list[int]:
    """One call of the student's speculative_step; its tokens as ints, checked for shape."""
    return tokens_of(call("speculative_step", fn, *step_args(p, q, draft, draws)), draft)


def tokens_of(out, draft: list[int]) -> list[int]:
    written("speculative_step", out)
    try:
        out = [int(t) for t in (out.tolist() if hasattr(out, "tolist") else out)]
    except (TypeError, ValueError):
        fail(f"speculative_step must return the emitted tokens as a list of ints, got {out!r}")
    k = len(draft)
    if not 1 <= len(out) <= k + 1 or out[:len(out) - 1] != draft[:len(out) - 1]:
        fail(f"speculative_step(draft={draft}) returned {out}: it must return the accepted guesses (a prefix of "
             f"the draft), then one more token, the resampled or the bonus one: 1 to k + 1 = {k + 1} tokens.")
    return out


def relabel(rows: list[list[float]], order: list[int]) -> list[list[float]]:
    return [[row[order[x]] for x in range(len(row))] for row in rows]


def count_law(p, q, decide) -> list[float]:
    """The law of the number of accepted guesses when guess i is drawn from q_i and accepted with chance
    decide(i, x), independently."""
    k, law, reach = len(q), [], 1.0
    for i in range(k):
        beta = sum(q[i][x] * decide(i, x) for x in range(len(q[i])))
        law.append(reach * (1 - beta))
        reach *= beta
    return law + [reach]


def shared_uniform_law(p, q) -> list[float]:
    """The same law when one uniform decides every position (k = 2): accepted twice iff u < both chances."""
    a = [[min(1.0, p[i][x] / q[i][x]) if q[i][x] > 0 else 0.0 for x in range(len(q[i]))] for i in range(2)]
    one = sum(q[0][x] * a[0][x] for x in range(len(q[0])))
    two = sum(q[0][x] * q[1][y] * min(a[0][x], a[1][y]) for x in range(len(q[0])) for y in range(len(q[1])))
    return [1 - one, one - two, two]


def runs(fn, p, q, n: int, draws: Draws) -> list[list[int]]:
    """n steps, each on a draft drawn from q, in one message to the sandbox."""
    drafts = [[draws.pick(row) for row in q] for _ in range(n)]
    outs = call_many("speculative_step", fn, [step_args(p, q, d, draws) for d in drafts])
    return [tokens_of(out, d) for out, d in zip(outs, drafts)]


def a1_decisions(fn, draws: Draws, hidden: bool) -> None:
    def hot(i: int) -> list[float]:
        return [1.0 if x == i else 0.0 for x in range(4)]

    # 1. greedy: one-hot p and q, so every decision is certain (which token follows is other parts' business)
    p = [hot(1), hot(2), hot(3)]
    for draft, accepted in (([1, 2], 2), ([1, 0], 1), ([3, 2], 0)):
        got = step(fn, p, [hot(x) for x in draft], draft, draws)
        if len(got) - 1 != accepted:
            cause = ("It accepted a guess p gives probability 0: accept x_i only when u_i < min(1, p_i(x_i) / "
                     "q_i(x_i)).") if len(got) - 1 > accepted else (
                     f"It rejected guess {len(got) - 1}, which p gives probability 1 there: is the ratio read from "
                     f"row i of p? x_i is judged by p_i; p_(i+1) is the row after it.")
            fail(f"Greedy case (p one-hot on [1, 2, 3] for the rows 0, 1, 2; draft {draft}, q one-hot on it): "
                 f"the rule accepts {accepted} of the guesses here, but yours returned {got}.", cause)
    # 2. a guess the target rules out, and one the draft could not have drawn, are always rejected
    for q_row, draft, why in (([1.0, 0.0, 0.0, 0.0], 0, "p_0(0) = 0: the target never emits it"),
                              ([0.0, 0.0, 0.0, 1.0], 1, "q_0(1) = 0: the draft could not have drawn it; p/q is "
                                                        "infinite there, so guard it (ratio 0 when q(x) = 0)")):
        for _ in range(10):
            got = step(fn, [[0.0, 0.5, 0.5, 0.0], [0.25] * 4], [q_row], [draft], draws)
            if len(got) != 1:
                fail(f"Draft [{draft}] with p_0 = [0, 0.5, 0.5, 0], q_0 = {fmt(q_row)}: it must be rejected, "
                     f"since {why}; your rule accepted it and returned {got}.")
    # 3. how many guesses are accepted: P(accept guess i) = sum_x min(p_i(x), q_i(x)), each with its own uniform
    p = [[0.3, 0.4, 0.2, 0.1], [0.2, 0.4, 0.1, 0.3], [0.05, 0.05, 0.45, 0.45]]
    q = [[0.1, 0.8, 0.05, 0.05], [0.1, 0.8, 0.05, 0.05]]
    order = draws.shuffled(range(4))
    p, q = relabel(p, order), relabel(q, order)
    n = 4000 if hidden else 2000
    counts = [0, 0, 0]
    for out in runs(fn, p, q, n, draws):
        counts[len(out) - 1] += 1

    def chance(rows):
        return lambda i, x: min(1.0, rows[i][x] / q[i][x]) if q[i][x] > 0 else 0.0

    want = count_law(p, q, chance(p))
    ok, _ = agrees(counts, want, n)
    if ok:
        return
    suspects = [  # (the law a classic bug gives, its likely cause)
        (shared_uniform_law(p, q), "That is the law of one uniform u shared by every position: draw a fresh u_i for "
                                   "each guess, or a lucky u accepts whole runs together."),
        (count_law(p, q, chance(p[1:])), "That is the law of reading the ratio from the next row: guess x_i is judged "
                                         "by p_i(x_i) / q_i(x_i), row i of p."),
        (count_law(p, q, lambda i, x: 1.0 if p[i][x] >= q[i][x] else 0.0),
         "That is the law of accepting exactly when p(x) >= q(x): accept with probability min(1, p/q), that is when "
         "a uniform u_i falls below it."),
        ([0.0, 0.0, 1.0], "Your rule accepted every guess: accept x_i only when u_i < min(1, p_i(x_i) / q_i(x_i))."),
    ]
    named = next((cause for law, cause in suspects if agrees(counts, law, n)[0]), "")
    fail(f"Over {n} steps with k = 2 and drafts drawn from q, the number of accepted guesses came out 0, 1, 2 with "
         f"frequencies {fmt(frequencies(counts, n))}; the rule accepts them with probabilities {fmt(want)}: guess "
         f"i with chance min(1, p_i(x_i) / q_i(x_i)), each with its own uniform, stopping at the first rejection.",
         named)


def a1_after_rejection(fn, draws: Draws, hidden: bool) -> None:
    p = [[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]]
    q = [[0.1, 0.1, 0.4, 0.4], [0.4, 0.4, 0.1, 0.1]]
    order = draws.shuffled(range(4))
    p, q = relabel(p, order), relabel(q, order)
    n = 4000 if hidden else 2000
    counts, seen = [[0] * 4, [0] * 4], [0, 0]
    for out in runs(fn, p, q, n, draws):
        i = len(out) - 1  # the position of the token after the accepted guesses
        if i < 2:  # a rejection at position i
            counts[i][out[i]] += 1
            seen[i] += 1
    if min(seen) < n // 20:
        fail(f"Over {n} steps with k = 2, a guess was rejected {seen[0]} times at position 0 and {seen[1]} times "
             f"at position 1, but about {n // 2} and {n // 4} rejections are expected (P(reject x_i) = 1 - sum_x "
             f"min(p_i(x), q_i(x)) = 0.5): a guess must be rejected when u_i >= min(1, p_i(x_i) / q_i(x_i)).")
    for i in range(2):
        want = residual_of(p[i], q[i])
        ok, worst = agrees(counts[i], want, seen[i])
        if ok:
            continue
        got = frequencies(counts[i], seen[i])
        named = ""
        if agrees(counts[i], p[i], seen[i])[0]:
            named = (f"That is p_{i} itself: after a rejection the token must come from the residual norm(max(0, "
                     f"p_i - q_i)), which gives back only the mass the draft under-proposed; p_{i} counts the mass "
                     f"accepted guesses already gave a second time.")
        elif i + 1 < len(p) and agrees(counts[i], residual_of(p[i + 1], q[i]), seen[i])[0]:
            named = f"That is the residual of the next row, p_{i + 1}: use p_{i}, the row of the rejected guess."
        fail(f"After a rejection at position {i} (over {seen[i]} rejections) token {worst} came out with frequency "
             f"{got[worst]:.3f}, but the residual norm(max(0, p_{i} - q_{i})) gives it {want[worst]:.3f}. Whole "
             f"distribution: expected {fmt(want)}, got {fmt(got)}.", named)


def a1_bonus(fn, draws: Draws, hidden: bool) -> None:
    p = [[0.4, 0.3, 0.2, 0.1], [0.2, 0.4, 0.3, 0.1], [0.1, 0.2, 0.4, 0.3]]
    order = draws.shuffled(range(4))
    p = relabel(p, order)
    q = [list(row) for row in p[:2]]  # q == p: min(1, p/q) = 1, every guess is accepted
    n = 4000 if hidden else 2000
    counts, seen = [0] * 4, 0
    for out in runs(fn, p, q, n, draws):
        if len(out) == 3:
            counts[out[2]] += 1
            seen += 1
    if seen < n // 4:
        fail(f"With q == p every guess must be accepted (min(1, p/q) = 1), but only {seen} of {n} steps accepted "
             f"both guesses and emitted the bonus token.")
    ok, worst = agrees(counts, p[2], seen)
    if not ok:
        got = frequencies(counts, seen)
        named = ("That is p_(k-1), the row of the last guess: the bonus comes from p_k, the row after it, which the "
                 "target pass computed for free.") if agrees(counts, p[1], seen)[0] else ""
        fail(f"The bonus token (both guesses accepted, q == p, {seen} steps): token {worst} came out with frequency "
             f"{got[worst]:.3f}, but p_k gives it {p[2][worst]:.3f}. Expected {fmt(p[2])}, got {fmt(got)}.", named)


# -- a2: the radix tree ------------------------------------------------------------------------------------------

def matched(tree, tokens) -> int:
    out = call("match_prefix", tree.match_prefix, tuple(tokens))
    if not isinstance(out, tuple) or len(out) != 2:
        fail(f"match_prefix({tuple(tokens)}) must return (length, node), got {out!r}")
    return out[0]


def node_of(tree, tokens):
    out = written("match_prefix", call("match_prefix", tree.match_prefix, tuple(tokens)))
    if not isinstance(out, tuple) or len(out) != 2:
        fail(f"match_prefix({tuple(tokens)}) must return (length, node), got {out!r}")
    return out[1]


def prefixes(stored) -> int:
    """The tokens a radix tree holding these sequences stores: each distinct prefix once."""
    return len({s[:i] for s in stored for i in range(1, len(s) + 1)})


def longest(stored, tokens) -> int:
    best = 0
    for s in stored:
        n = 0
        while n < min(len(s), len(tokens)) and s[n] == tokens[n]:
            n += 1
        best = max(best, n)
    return best


def a2_match_insert(Radix, draws: Draws, hidden: bool) -> None:
    t = call("Radix()", Radix)
    call("insert", t.insert, (1, 2, 3, 4))
    if matched(t, (1, 2, 9)) != 2:
        fail(f"After insert (1, 2, 3, 4), match_prefix((1, 2, 9)) must find the shared prefix, length 2, got "
             f"{matched(t, (1, 2, 9))}. A match that ends inside a node counts the tokens matched there (split the "
             f"node with _split).")
    call("insert", t.insert, (1, 2, 5))
    if t.size != 5:
        fail(f"insert (1, 2, 3, 4) then (1, 2, 5) stores 4 + 1 = 5 tokens (the shared (1, 2) once), but size is "
             f"{t.size}: insert adds only the suffix that is not cached yet, as one new leaf.")
    for r in range(150 if hidden else 20):
        t, stored, history = Radix(), set(), []
        stems = [tuple(draws.below(5) for _ in range(1 + draws.below(4))) for _ in range(3)]
        for _ in range(20):
            seq = stems[draws.below(3)] + tuple(draws.below(5) for _ in range(draws.below(4)))
            op = "insert" if draws.uniform() < 0.5 else "match_prefix"
            history.append(f"{op}{seq}")
            if op == "insert":
                call("insert", t.insert, seq)
                stored.add(seq)
            steps = "; ".join(history[-6:])
            if op == "match_prefix" and matched(t, seq) != longest(stored, seq):
                fail(f"Random case {r}: match_prefix{seq} must find {longest(stored, seq)} cached tokens, got "
                     f"{matched(t, seq)}. The last operations: {steps}.",
                     "match_prefix walks every node whose key continues the tokens, and a match that ends inside a "
                     "node counts the tokens matched there (split the node there with _split).")
            if t.size != prefixes(stored):
                fail(f"Random case {r}: size after {history[-1]} must be {prefixes(stored)} (every cached prefix "
                     f"once), got {t.size}. The last operations: {steps}.",
                     "insert adds only the tokens past the cached prefix, as one leaf, and grows size by that many; "
                     "match_prefix and splitting never change size.")


def a2_lru(Radix, draws: Draws, hidden: bool) -> None:
    for r in range(60 if hidden else 10):
        m = 3 + draws.below(4)
        lengths = draws.shuffled(range(1, m + 1))
        leaves = [tuple(100 * (i + 1) + j for j in range(n)) for i, n in enumerate(lengths)]  # distinct first tokens
        t, clock, last, history = call("Radix()", Radix), itertools.count(), {}, []
        for leaf in draws.shuffled(leaves):
            call("insert", t.insert, leaf)
            last[leaf] = next(clock)
            history.append(f"insert{leaf}")
        for _ in range(2 + draws.below(2 * m)):
            leaf = leaves[draws.below(m)]
            longer = leaf + ((7,) if draws.uniform() < 0.3 else ())  # matches the whole leaf, splits nothing
            matched(t, longer)
            last[leaf] = next(clock)
            history.append(f"match_prefix{longer}")
        want = [len(leaf) for leaf in sorted(leaves, key=last.get)]
        got = [call("evict", t.evict, 1) for _ in range(m)]
        if got == want:
            continue
        touched = [len(leaf) for leaf in sorted(leaves, key=lambda leaf: history.index(f"insert{leaf}"))]
        cause = ("That is the most recently used leaf first: evict the smallest (last_access, id) first."
                 if got == want[::-1] else
                 "That is the order of insertion: match_prefix must set last_access = now on every node it walks, "
                 "so that a leaf read again is kept longer." if got == touched else "")
        fail(f"Random case {r}: {m} leaves of distinct lengths under the root, then evict(1) {m} times must free "
             f"them least recently used first, tokens freed {want}; got {got}. Operations: {'; '.join(history)}.",
             cause)


def a2_locks(Radix, draws: Draws, hidden: bool) -> None:
    cause = ("evict removed a node with locks > 0. A request is still reading that KV: never make a locked node a "
             "candidate, nor a parent whose locks are > 0.")
    # 1. a locked path inside a shared prefix keeps its whole path; its unlocked sibling goes
    t = call("Radix()", Radix)
    for seq in ((1, 2, 3), (1, 2, 4, 5), (9, 9)):
        call("insert", t.insert, seq)
    call("lock", t.lock, node_of(t, (1, 2, 3)))
    freed = call("evict", t.evict, 100)
    if matched(t, (1, 2, 3)) != 3 or freed != 4:
        fail(f"insert (1, 2, 3), (1, 2, 4, 5), (9, 9); lock the node of (1, 2, 3); evict(100) must free the 4 "
             f"unlocked tokens (4, 5) and (9, 9) and keep (1, 2, 3) whole; freed {freed}, and (1, 2, 3) now "
             f"matches {matched(t, (1, 2, 3))} tokens.", cause)
    # 2. random locked subsets of leaves under the root; locks counted, released by unlock
    for r in range(60 if hidden else 10):
        m = 2 + draws.below(5)
        leaves = [tuple(100 * (i + 1) + j for j in range(1 + draws.below(4))) for i in range(m)]
        t = Radix()
        for leaf in leaves:
            call("insert", t.insert, leaf)
        locked = [leaf for leaf in leaves if draws.uniform() < 0.5]
        for leaf in locked:
            node = node_of(t, leaf)
            call("lock", t.lock, node)
            if draws.uniform() < 0.5:  # locked twice, unlocked once: still locked
                call("lock", t.lock, node)
                call("unlock", t.unlock, node)
        want = sum(len(leaf) for leaf in leaves if leaf not in locked)
        freed = call("evict", t.evict, 1000)
        kept = {leaf: matched(t, leaf) for leaf in leaves}
        if freed != want or any(kept[leaf] != len(leaf) for leaf in locked):
            fail(f"Random case {r}: leaves {leaves}, locked {locked}; evict(1000) must free the unlocked ones, "
                 f"{want} tokens, and keep every locked leaf whole; freed {freed}, and the leaves now match "
                 f"{list(kept.values())} tokens.", cause if any(kept[leaf] != len(leaf) for leaf in locked) else "")


def a2_cascade(Radix, draws: Draws, hidden: bool) -> None:
    cause = ("A parent left without children is a leaf too: when evict removes a node, push its parent as a "
             "candidate if it is not the root, has no children left and has no locks.")
    t = call("Radix()", Radix)
    call("insert", t.insert, (1, 2, 3, 4, 5))
    freed = call("evict", t.evict, 1)
    if freed != 5 or t.size != 0:
        fail(f"insert (1, 2, 3, 4, 5) then evict(1): whole nodes go, so all 5 tokens are freed; freed {freed}, "
             f"size is now {t.size}.")
    for r in range(80 if hidden else 15):
        t, stored = Radix(), set()
        stem = tuple(draws.below(3) for _ in range(1 + draws.below(3)))
        for _ in range(2 + draws.below(4)):
            seq = stem[:1 + draws.below(len(stem))] + tuple(draws.below(3) for _ in range(1 + draws.below(3)))
            call("insert", t.insert, seq)
            stored.add(seq)
        total = prefixes(stored)
        freed = call("evict", t.evict, total + draws.below(5))
        left = [seq for seq in sorted(stored) if matched(t, seq) > 0]
        if freed != total or left:
            fail(f"Random case {r}: after inserting {sorted(stored)} ({total} tokens, no locks), evict({total} or "
                 f"more) must free all {total}; freed {freed}, and {left} still match.", cause if left else "")


# -- a3: choosing k ----------------------------------------------------------------------------------------------

def speedup(alpha: float, k: int, c: float) -> float:
    """Theorem 3.8 of Leviathan et al. (2023), with the geometric sum written out (k + 1 at alpha = 1)."""
    return sum(alpha**i for i in range(k + 1)) / (k * c + 1)


def best_k(alpha: float, c: float, k_max: int) -> int:
    best = 0
    for k in range(1, k_max + 1):
        if speedup(alpha, k, c) > speedup(alpha, best, c):  # strictly: a tie keeps the shorter draft
            best = k
    return best


def a3_expected_speedup(expected_speedup, draws: Draws, hidden: bool) -> None:
    cases = [(a, k, c) for a in (0.0, 0.3, 0.8, 1.0) for k in (0, 1, 2, 5) for c in (0.0, 0.1, 0.5)]
    cases += [(round(draws.uniform(), 3), draws.below(9), round(draws.uniform() * 0.6, 3))
              for _ in range(60 if hidden else 10)]
    for alpha, k, c in cases:
        got = call(f"expected_speedup(alpha={alpha}, k={k}, c={c})", expected_speedup, alpha, k, c, hints={
            "ZeroDivisionError": "The closed form (1 - alpha^(k+1)) / (1 - alpha) divides by zero at alpha = 1, where "
                               "it is k + 1 (every guess accepted). Use the sum 1 + alpha + ... + alpha^k, or treat "
                               "alpha = 1 apart."})
        written("expected_speedup", got)
        try:
            got = float(got)
        except (TypeError, ValueError):
            fail(f"expected_speedup(alpha={alpha}, k={k}, c={c}) must return a number, got {got!r}.")
        want = speedup(alpha, k, c)
        if close(got, want):
            continue
        tokens = sum(alpha**i for i in range(k + 1))
        cause = ("That is the expected tokens alone: divide by k c + 1, the cost of a step (k draft passes of c "
                 "each, then one target pass)." if close(got, tokens) else
                 "That counts k tokens per step: with k guesses a step emits up to k + 1 (the bonus), so the sum "
                 "runs 1 + alpha + ... + alpha^k." if close(got, sum(alpha**i for i in range(k)) / (k * c + 1)) else
                 "")
        fail(f"expected_speedup(alpha={alpha}, k={k}, c={c}): expected {want:.6g}, got {got:.6g}. Speedup = (1 + "
             f"alpha + ... + alpha^k) / (k c + 1); k = 0 is plain decoding, 1.", cause)


def a3_choose_k(choose_k, draws: Draws, hidden: bool) -> None:
    cases = [(0.8, 0.05, 8), (0.6, 0.1, 8), (0.9, 0.02, 8), (0.3, 0.2, 8), (0.1, 0.5, 8), (0.95, 0.3, 8),
             (0.5, 0.0, 8), (0.99, 0.01, 8), (0.0, 0.0, 8), (1.0, 0.0, 5), (0.2, 0.4, 3), (0.9, 0.05, 2)]
    cases += [(round(draws.uniform(), 3), round(draws.uniform() * 0.5, 3), 1 + draws.below(12))
              for _ in range(80 if hidden else 10)]
    for alpha, c, k_max in cases:
        got = written("choose_k", call("choose_k", choose_k, alpha, c, k_max))
        want = best_k(alpha, c, k_max)
        with contextlib.suppress(TypeError, ValueError):
            if int(got) == got == want:  # an int, or a numpy int
                continue
        got = got if isinstance(got, int) else int(got) if hasattr(got, "__index__") else got
        spelled = f" (its speedup {speedup(alpha, int(got), c):.3f}x)" if got in range(k_max + 1) else ""
        scores = [speedup(alpha, k, c) for k in range(k_max + 1)]
        cause = (f"k must be an int in 0..k_max = {k_max}." if got not in range(k_max + 1) else
                 "Several k tie here: choose the shorter one (compare strictly, or use -k as a tie-breaker)."
                 if scores[int(got)] == scores[want] else
                 "k = 0, plain decoding, is allowed and wins when drafting cannot pay for itself (here alpha <= c or "
                 "close): search 0..k_max." if want == 0 else "")
        fail(f"choose_k(alpha={alpha}, c={c}, k_max={k_max}): expected k={want} with speedup {scores[want]:.3f}x, "
             f"got {got!r}{spelled}.", cause)


# -- a4: the multi-draft rule ------------------------------------------------------------------------------------

KINDS = ("independent", "without_replacement")


def without(q: list[float], x: int) -> list[float]:
    kept = [0.0 if y == x else v for y, v in enumerate(q)]
    return [v / sum(kept) for v in kept] if sum(kept) > 0 else kept


def chain(p, q, children, kind):
    """The chances and the final p' of the rule at one node, in plain floats."""
    target, proposal, chances = list(p), list(q), []
    for x in children:
        chances.append(min(1.0, target[x] / proposal[x]) if proposal[x] > 0 else 0.0)
        target = residual_of(target, proposal)
        if kind == "without_replacement":
            proposal = without(proposal, x)
    return chances, target


def torch_remove(q: torch.Tensor, x: int) -> torch.Tensor:
    """q without token x, renormalised (all zeros when nothing is left): stands in for the student's `remove`."""
    kept = q.double().clone()
    kept[x] = 0.0
    return kept / kept.sum() if kept.sum() > 0 else kept


def reference_node_rule():
    """The rule at one node on tensors, as teachspec.speculative.tree.verify_children computes it (a test checks
    that): node_rule(p, q, children, kind) -> (chances, final), the stand-in for the notebook's node_rule while
    verify_node is graded."""
    def node_rule(p, q, children, kind):
        target, proposal, chances = p.double(), q.double(), []
        for x in children:
            chances.append(min(1.0, float(target[x] / proposal[x])) if proposal[x] > 0 else 0.0)
            target = torch_residual(target, proposal)
            if kind == "without_replacement":
                proposal = torch_remove(proposal, x)
        return chances, target

    return node_rule


def a4_remove(remove, draws: Draws, hidden: bool) -> None:
    cases = [([0.5, 0.3, 0.2], 0), ([0.25, 0.25, 0.5], 2), ([0.0, 1.0, 0.0], 1), ([0.2, 0.0, 0.8], 1)]
    cases += [(draws.distribution(3 + draws.below(4), draws.below(2)), draws.below(3))
              for _ in range(50 if hidden else 8)]
    for q, x in cases:
        given = torch.tensor(q, dtype=torch.float64)
        got = floats(call("remove", remove, given, x), "remove")
        if given.tolist() != q:
            fail(f"remove(q={fmt(q)}, x={x}) changed q in place (it is now {fmt(given.tolist())}): work on a copy, "
                 f"q.clone(); the caller still needs q.")
        want = without(q, x)
        if len(got) == len(want) and all(close(a, b, 1e-9) for a, b in zip(got, want)):
            continue
        cause = ("When nothing is left, return all zeros: no child can be drawn from it." if not any(want) else
                 "That is q with x zeroed but not renormalised: divide by what is left." if len(got) == len(q) and all(
                     close(a, 0.0 if y == x else b) for y, (a, b) in enumerate(zip(got, q))) else "")
        fail(f"remove(q={fmt(q)}, x={x}): expected {fmt(want)}, got {fmt(got)}.", cause)


def ranks_of(p: list[float], q: list[float], b: int, kind: str, update_p: bool = True, update_q: bool = True,
             conditioned: bool = True, divided: bool = True) -> list[float]:
    """h_r for the ranks r = 0 .. b-1 of a node: the chance that the child tried r-th is accepted, given that the r
    children before it were rejected, averaged over the children the draft can draw. The flags switched off give
    the classic bugs' numbers: p' never updated, q' never losing the rejected token, draws weighed without their
    chance of being rejected, and the joint chance left undivided by the chance of reaching the rank."""
    states, h = [(1.0, list(p), list(q))], []  # (chance of this history, p', q') over the histories reaching rank r
    for _ in range(b):
        reach, accepted, grown = sum(w for w, _, _ in states), 0.0, []
        for w, target, proposal in states:
            for x, q_x in enumerate(proposal):
                if q_x <= 0:
                    continue
                chance = min(1.0, target[x] / q_x)
                accepted += w * q_x * chance
                if chance < 1 or not conditioned:
                    nxt_p = residual_of(target, proposal) if update_p else target
                    nxt_q = without(proposal, x) if kind == "without_replacement" and update_q else proposal
                    grown.append((w * q_x * ((1 - chance) if conditioned else 1.0), nxt_p, nxt_q))
        h.append((accepted / reach if divided else accepted) if reach > 0 else 0.0)
        states = grown
    return h


def rank_cases(draws: Draws, n: int) -> list[tuple[list[float], list[float], int]]:
    """Small nodes, with zeros in p and q, and 2 to 4 children."""
    fixed = [([0.5, 1 / 3, 1 / 6], [0.25, 0.25, 0.5], 2), ([0.4, 0.35, 0.25], [0.2, 0.3, 0.5], 2),
             ([0.0, 0.7, 0.3, 0.0], [0.4, 0.1, 0.2, 0.3], 3), ([0.1, 0.6, 0.3], [0.5, 0.5, 0.0], 3),
             ([0.3, 0.3, 0.4], [0.3, 0.3, 0.4], 2)]  # q = p: every first child is accepted, rank 1 never reached
    cases = []
    for _ in range(n):
        vocab = 3 + draws.below(3)
        cases.append((draws.distribution(vocab, draws.below(vocab - 1)), draws.distribution(vocab, draws.below(2)),
                      2 + draws.below(3)))
    return fixed + cases


def ranks_call(rank_acceptance, p, q, b, kind):
    given_p, given_q = torch.tensor(p, dtype=torch.float64), torch.tensor(q, dtype=torch.float64)
    where = f"rank_acceptance(p={fmt(p)}, q={fmt(q)}, b={b}, kind={kind!r})"
    got = floats(call("rank_acceptance", rank_acceptance, given_p, given_q, b, kind), "rank_acceptance")
    if given_p.tolist() != list(p) or given_q.tolist() != list(q):
        fail(f"{where} changed p or q in place: work on copies (q.clone(), or p' = residual(...), which makes a new "
             f"tensor); the caller still needs them.")
    if len(got) != b:
        fail(f"{where} returned {len(got)} numbers: one per rank, h_0 .. h_(b-1), {b} in all.")
    return where, got


def same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(close(x, y, 1e-9) for x, y in zip(a, b))


def unconditional(h: list[float]) -> list[float]:
    """The chance that rank r is the child accepted: h_r with the chance of reaching it, (1 - h_0) ... h_r."""
    out, reach = [], 1.0
    for x in h:
        out.append(reach * x)
        reach *= 1 - x
    return out


def a4_ranks_independent(rank_acceptance, draws: Draws, hidden: bool) -> None:
    """Judges p', the residual after each rejection, taking the student's weighing of the histories as it is (the
    without-replacement part judges that; drawn independently it shows only where rank r is never reached)."""
    for p, q, b in rank_cases(draws, 60 if hidden else 12):
        where, got = ranks_call(rank_acceptance, p, q, b, "independent")
        want = ranks_of(p, q, b, "independent")
        if same(got, want) or same(got, ranks_of(p, q, b, "independent", conditioned=False)):
            continue  # how the histories are weighed is the without-replacement part's to judge
        named = ("That is what p gives every rank: after each rejected child, p' must become the residual "
                 "norm(max(0, p' - q')), the mass the rejected children had no chance at."
                 if same(got, ranks_of(p, q, b, "independent", update_p=False)) else
                 "That is the chance that the child of rank r is the one accepted, (1 - h_0) ... (1 - h_(r-1)) h_r: "
                 "h_r is conditional on reaching rank r, so divide by the chance that the r children before it "
                 "were all rejected." if same(got, unconditional(want)) else "")
        fail(f"{where} (children drawn independently): expected {fmt(want)}, got {fmt(got)}. The child of rank r "
             f"is drawn from q and judged by p' after the r rejections before it.", named)


def a4_ranks_without_replacement(rank_acceptance, draws: Draws, hidden: bool) -> None:
    """Judges the conditioning on which children were rejected, taking the student's p' as it is (a missing
    residual is the independent part's to charge)."""
    for p, q, b in rank_cases(draws, 60 if hidden else 12):
        where, got = ranks_call(rank_acceptance, p, q, b, "without_replacement")
        want = ranks_of(p, q, b, "without_replacement")
        if same(got, want) or same(got, ranks_of(p, q, b, "without_replacement", update_p=False)):
            continue
        named = ("That is h for children drawn independently: drawn without replacement, the child of rank r came "
                 "from q without the r tokens rejected before it, renormalised, and is judged by that q'."
                 if same(got, ranks_of(p, q, b, "independent")) else
                 "That weighs each earlier draw by its chance of being drawn only: h_r is conditional on the "
                 "earlier children being REJECTED, so weigh each history by the chance that it was drawn and "
                 "rejected, q'(x) (1 - min(1, p'(x) / q'(x))), and divide by their sum."
                 if same(got, ranks_of(p, q, b, "without_replacement", conditioned=False)) else
                 "That is the chance that the child of rank r is the one accepted: divide by the chance of "
                 "reaching rank r." if same(got, unconditional(want)) else "")
        fail(f"{where}: expected {fmt(want)}, got {fmt(got)}. Average min(1, p'(x) / q'(x)) over the children "
             f"that can be drawn at rank r, each history weighed by its chance given the earlier rejections.", named)


def node_law(p, q, b, kind, final_from_p: bool = False) -> list[float]:
    """The exact law of the token leaving a node: every tuple of b children the draft can propose, weighted by
    its chance, and every accept/reject decision weighted by its probability."""
    tuples = [((), 1.0)]
    for _ in range(b):
        grown = []
        for xs, w in tuples:
            left = [0.0 if (kind == "without_replacement" and y in xs) else v for y, v in enumerate(q)]
            grown += [(xs + (x,), w * left[x] / sum(left)) for x in range(len(q)) if left[x] > 0]
        tuples = grown
    law = [0.0] * len(p)
    for xs, w in tuples:
        chances, final = chain(p, q, xs, kind)
        for x, chance in zip(xs, chances):
            law[x] += w * chance
            w *= 1 - chance
        for y, v in enumerate(p if final_from_p else final):
            law[y] += w * v
    return law


def a4_verify_node(verify_node, draws: Draws, hidden: bool) -> None:
    p, q = [0.45, 0.3, 0.15, 0.1], [0.1, 0.2, 0.3, 0.4]
    n = 4000 if hidden else 2000
    for kind in KINDS:
        counts, accepted, calls = [0] * 4, 0, []
        for _ in range(n):
            children = [draws.pick(q)]
            second = q if kind == "independent" else [0.0 if y == children[0] else v for y, v in enumerate(q)]
            children.append(draws.pick(second))
            calls.append((torch.tensor(p, dtype=torch.float64), torch.tensor(q, dtype=torch.float64), children, kind,
                          draws.generator()))
        for (*_, children, _, _), out in zip(calls, call_many("verify_node", verify_node, calls)):
            written("verify_node", out)
            try:
                index, token = out
                token = int(token)
            except (TypeError, ValueError):
                fail(f"verify_node must return (index, token), got {out!r}.")
            if index is not None:
                accepted += 1
                if index not in (0, 1) or token != children[index]:
                    fail(f"verify_node returned child index {index} of children {children} as accepted, with token "
                         f"{token}: an accepted child's token is what the node emits.")
            counts[token] += 1
        ok, worst = agrees(counts, p, n)
        if not ok:
            got = frequencies(counts, n)
            named = ("That is the law of drawing the last token from p: when every child is rejected, draw it from "
                     "`final`, the last residual." if agrees(counts, node_law(p, q, 2, kind, True), n)[0] else "")
            fail(f"The token leaving the node (children {kind}, {n} steps): token {worst} came out with frequency "
                 f"{got[worst]:.3f}, but p gives it {p[worst]:.3f}. Expected {fmt(p)}, got {fmt(got)}.", named)
        if not 0 < accepted < n:
            fail(f"{kind}: {accepted} of {n} steps accepted a child; with these p and q some steps must accept one "
                 f"and some must reject both (accept child j iff u_j < chances[j]).")


# -- a5: scheduling for cache hits -------------------------------------------------------------------------------

def common(a, b) -> int:
    """How many leading tokens two sequences share."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def reuse_of(prompts, run_order, cap: bool = True, previous_only: bool = False) -> list[int]:
    """cached[i]: the prompt tokens request i serves from a cache that keeps everything, run in `run_order`: its
    longest shared prefix with a request run before it, at most len - 1 (the last token always runs). `cap` off and
    `previous_only` on give two classic bugs' numbers."""
    cached, before = [0] * len(prompts), []
    for i in run_order:
        earlier = before[-1:] if previous_only else before
        best = max((common(prompts[i], s) for s in earlier), default=0)
        cached[i] = min(best, len(prompts[i]) - 1) if cap else best
        before.append(prompts[i])
    return cached


def lpm_of(prompts, cache, cut: bool = True, latest_first: bool = False) -> list[int]:
    """SGLang's longest-prefix-match order, one decision: by the longest match of prompt[:-1] among the cached
    sequences, longest first, ties by arrival."""
    match = [max((common(p[:-1] if cut else p, s) for s in cache), default=0) for p in prompts]
    return sorted(range(len(prompts)), key=lambda i: (-match[i], -i if latest_first else i))


def trie_groups(prompts) -> list[tuple[tuple, list[int], list[list[int]]]]:
    """The nodes of the radix tree of the prompts, top down: (the node's prefix, the requests whose prompt ends
    there, in arrival order, the requests under each child, each child's in arrival order, in token order)."""
    out, todo = [], [list(range(len(prompts)))] if prompts else []
    while todo:
        group = todo.pop()
        depth = min(common(prompts[group[0]], prompts[i]) for i in group)
        children: dict[int, list[int]] = {}
        for i in group:
            if len(prompts[i]) > depth:
                children.setdefault(prompts[i][depth], []).append(i)
        kids = [children[x] for x in sorted(children)]
        out.append((tuple(prompts[group[0]][:depth]), [i for i in group if len(prompts[i]) == depth], kids))
        todo += kids
    return out


def dfs_of(prompts, heaviest: bool = True, own_first: bool = True) -> list[int]:
    """The depth-first order over the radix tree of the prompts: a node's own requests first (in arrival order),
    then its children, heaviest first (the most requests below), ties by the earliest arrival in them. `heaviest`
    off visits them in token order (sorted order); `own_first` off puts a node's own requests after its children."""
    groups = {prefix: (own, kids) for prefix, own, kids in trie_groups(prompts)}

    def visit(members):
        depth = min(common(prompts[members[0]], prompts[i]) for i in members)
        own, kids = groups[tuple(prompts[members[0]][:depth])]
        if heaviest:
            kids = sorted(kids, key=lambda g: (-len(g), g[0]))
        below = [i for g in kids for i in visit(g)]
        return own + below if own_first else below + own

    return visit(list(range(len(prompts)))) if prompts else []


def best_of(prompts, cap: bool = True) -> float:
    """The best hit rate any order reaches (each distinct prefix computed once): sorted order's reuse."""
    seqs = sorted(tuple(p) for p in prompts)
    hit = sum(min(common(a, b), len(b) - 1) if cap else common(a, b) for a, b in zip(seqs, seqs[1:]))
    return hit / sum(map(len, seqs))


def queue(draws: Draws, n: int) -> list[tuple[int, ...]]:
    """A waiting queue: requests from a few groups that share a stem (a system prompt, the examples of a few-shot
    prompt), branches inside the groups, exact repeats, prompts that are prefixes of others; in arrival order,
    shuffled."""
    stems = [tuple(draws.below(4) for _ in range(1 + draws.below(4))) for _ in range(1 + draws.below(3))]
    out: list[tuple[int, ...]] = []
    while len(out) < n:
        roll = draws.uniform()
        if out and roll < 0.15:
            out.append(out[draws.below(len(out))])  # the same prompt again
        elif out and roll < 0.3:
            s = out[draws.below(len(out))]
            out.append(s[:1 + draws.below(len(s))])  # a prefix of one already waiting
        else:
            out.append(stems[draws.below(len(stems))] + tuple(draws.below(3) for _ in range(1 + draws.below(4))))
    return draws.shuffled(out)


def lists(prompts) -> list[list[int]]:
    """Fresh copies for the student's code: what it changes is not what the check reads."""
    return [list(p) for p in prompts]


def indices(out, what: str, n: int) -> list[int]:
    """A returned order: every request index 0 .. n-1 exactly once."""
    written(what, out)
    try:
        out = [int(i) for i in out]
    except (TypeError, ValueError):
        fail(f"{what} must return a list of request indices, got {out!r}")
    if sorted(out) != list(range(n)):
        fail(f"{what} returned {out}: it must list every request index 0 .. {n - 1} exactly once, in the order the "
             f"requests run.")
    return out


def show(prompts) -> str:
    return "[" + ", ".join(f"{i}: {tuple(p)}" for i, p in enumerate(prompts)) + "]"


def a5_reused(reused, draws: Draws, hidden: bool) -> None:
    cases = [([(1, 2, 3), (1, 2, 4), (1, 2, 3)], [0, 1, 2]), ([(5, 6, 7, 8), (5, 6), (9,)], [1, 0, 2]),
             ([(1, 2, 3), (7, 7), (1, 2, 3, 4)], [0, 1, 2])]
    for _ in range(80 if hidden else 15):
        prompts = queue(draws, 2 + draws.below(8))
        cases.append((prompts, draws.shuffled(range(len(prompts)))))
    for prompts, run_order in cases:
        where = f"reused(prompts={show(prompts)}, order={run_order})"
        got = written("reused", call("reused", reused, lists(prompts), list(run_order)))
        try:
            got = [int(x) for x in got]
        except (TypeError, ValueError):
            fail(f"{where} must return a list of ints, one per request, got {got!r}")
        want = reuse_of(prompts, run_order)
        if got == want:
            continue
        cause = ("That counts a request's last token as served: it always runs through the model, because its "
                 "logits sample the first new token. Cap each match at len(prompt) - 1."
                 if got == reuse_of(prompts, run_order, cap=False) else
                 "That is the prefix shared with the request run just before it only: a cache that keeps "
                 "everything serves the longest prefix shared with ANY request run earlier."
                 if got == reuse_of(prompts, run_order, previous_only=True) else
                 "That is indexed by turn: cached[i] must be request i's, whatever its turn in the order."
                 if got == [want[i] for i in run_order] else "")
        fail(f"{where}: expected {want}, got {got}. A request serves the longest prefix its prompt shares with a "
             f"prompt run before it, at most len(prompt) - 1 tokens.", cause)


def a5_lpm(lpm_order, draws: Draws, hidden: bool) -> None:
    cases = [([(5, 6, 7), (8, 9, 1, 2)], [(5, 6, 7), (8, 9, 1)]),  # whole prompts tie; prompt[:-1] ranks 1 first
             ([(1, 2, 3), (1, 2), (4, 5, 6)], [(1, 2, 3)]),
             ([(7, 1), (3, 4, 5), (7, 2), (3, 4, 9)], [(3, 4, 5, 6), (7,)]), ([(1,), (2,), (3,)], [(1, 2, 3)])]
    for _ in range(80 if hidden else 15):
        prompts = queue(draws, 2 + draws.below(7))
        cache = [p + tuple(draws.below(3) for _ in range(draws.below(3))) for p in queue(draws, 1 + draws.below(3))]
        cases.append((prompts, cache))
    for prompts, cache in cases:
        where = f"lpm_order(prompts={show(prompts)}, cache={[tuple(s) for s in cache]})"
        got = indices(call("lpm_order", lpm_order, lists(prompts), lists(cache)), "lpm_order", len(prompts))
        want = lpm_of(prompts, cache)
        if got == want:
            continue
        matches = [max((common(p[:-1], s) for s in cache), default=0) for p in prompts]
        cause = ("That ranks by the match of the whole prompt: its last token is never served from the cache, so "
                 "rank by the match of prompt[:-1]." if got == lpm_of(prompts, cache, cut=False) else
                 "That breaks ties by the latest arrival: equal matches run in arrival order (sort by (-match, i))."
                 if got == lpm_of(prompts, cache, latest_first=True) else
                 "That is the shortest match first: lpm runs the longest first." if got == sorted(
                     range(len(prompts)), key=lambda i: (matches[i], i)) else "")
        fail(f"{where}: expected {want}, got {got}; the matches of prompt[:-1] are {matches}. lpm runs the longest "
             f"match first, ties by arrival.", cause)


def subtrees_broken(prompts, run_order) -> str:
    """Why an order is not a depth-first order of the prompts' radix tree, or "" when it is."""
    turn = {i: t for t, i in enumerate(run_order)}
    for prefix, own, kids in trie_groups(prompts):
        members = sorted(own + [i for g in kids for i in g], key=turn.get)
        turns = [turn[i] for i in members]
        if turns[-1] - turns[0] + 1 != len(members):
            intruder = next(run_order[t] for t in range(turns[0], turns[-1]) if run_order[t] not in members)
            return (f"requests {sorted(members)} share the prefix {prefix} but run at turns {turns}, with request "
                    f"{intruder} ({tuple(prompts[intruder])}) in between: a depth-first order finishes a subtree "
                    f"before it leaves it, so those requests run back to back.")
        late = [i for i in own if any(turn[j] < turn[i] for g in kids for j in g)]
        if late:
            return (f"request {late[0]} ({tuple(prompts[late[0]])}) runs after a longer prompt that extends it: a "
                    f"prompt that ends at a node runs before the prompts below it, which then reuse all of it (run "
                    f"the other way round, the shorter one recomputes its last token).")
    return ""


def a5_dfs_subtrees(dfs_order, draws: Draws, hidden: bool) -> None:
    cases = [[(1, 2, 3), (4, 5), (1, 2, 6), (4, 5, 7), (1, 2)], [(3,), (3, 1), (3, 1), (2, 2)]]
    cases += [queue(draws, 3 + draws.below(10)) for _ in range(80 if hidden else 15)]
    for prompts in cases:
        got = indices(call("dfs_order", dfs_order, lists(prompts)), "dfs_order", len(prompts))
        why = subtrees_broken(prompts, got)
        if not why:
            continue
        cause = ("That is arrival order (fcfs)." if got == list(range(len(prompts))) else
                 "That puts a node's own requests after its children's: run them first."
                 if got == dfs_of(prompts, own_first=False) else "")
        fail(f"dfs_order(prompts={show(prompts)}) returned {got}, which is not a depth-first order of their radix "
             f"tree: {why}", cause)


def a5_dfs_heaviest(dfs_order, draws: Draws, hidden: bool) -> None:
    """Judges the choice among a node's branches: heaviest first, ties by the earliest arrival (by the turn each
    branch's first request runs, so that an order that is not depth-first still gets a verdict on this)."""
    cases = [[(1, 2, 3), (4, 5), (1, 2, 6), (4, 5, 7), (1, 2, 8)], [(2, 1), (1, 1), (1, 2), (2, 2), (9,)]]
    cases += [queue(draws, 3 + draws.below(10)) for _ in range(80 if hidden else 15)]
    for prompts in cases:
        got = indices(call("dfs_order", dfs_order, lists(prompts)), "dfs_order", len(prompts))
        turn = {i: t for t, i in enumerate(got)}
        for prefix, own, kids in trie_groups(prompts):
            if sorted(own, key=turn.get) != own:
                fail(f"dfs_order(prompts={show(prompts)}) returned {got}: requests {own} have the same prompt "
                     f"{tuple(prompts[own[0]])} and must run in arrival order, but run as "
                     f"{sorted(own, key=turn.get)}.")
            ranked = sorted(kids, key=lambda g: (-len(g), g[0]))
            seen = sorted(kids, key=lambda g: min(turn[i] for i in g))
            if seen == ranked:
                continue
            cause = ("That visits the branches in token order (sorted order): a depth-first order, but SGLang's "
                     "visits the heaviest branch first." if got == dfs_of(prompts, heaviest=False) else
                     "That visits the lightest branch first." if seen == sorted(kids, key=lambda g: (len(g), g[0]))
                     else "")
            fail(f"dfs_order(prompts={show(prompts)}) returned {got}. Below the prefix {prefix} the branches hold "
                 f"the requests {[sorted(g) for g in kids]}; they must be visited heaviest first (the most "
                 f"requests), ties by the earliest arrival: {[sorted(g) for g in ranked]}, but your order visits "
                 f"them as {[sorted(g) for g in seen]}.", cause)


def a5_best(best_hit_rate, draws: Draws, hidden: bool) -> None:
    cases = [[(1, 2, 3), (1, 2, 3)], [(1, 2), (1, 2, 3, 4)], [(4, 5, 6), (4, 5, 7), (8, 9)], [(3,)]]
    cases += [queue(draws, 1 + draws.below(10)) for _ in range(80 if hidden else 15)]
    for prompts in cases:
        where = f"best_hit_rate(prompts={show(prompts)})"
        got = floats(call("best_hit_rate", best_hit_rate, lists(prompts)), "best_hit_rate")
        if len(got) != 1:
            fail(f"{where} must return one number, the hit rate, got {fmt(got)}.")
        got, want = got[0], best_of(prompts)
        if close(got, want):
            continue
        total = sum(map(len, prompts))
        arrival = sum(reuse_of(prompts, range(len(prompts)))) / total
        cause = ("That counts a last token as served: each request runs its last token (cap every match at "
                 "len - 1), so n copies of one prompt compute that token n times." if close(got, best_of(
                     prompts, cap=False)) else
                 "That is a number of tokens: a hit rate divides by all prompt tokens." if close(
                     got, want * total) else
                 "That is the hit rate of arrival order: the best order is one where every distinct prefix is "
                 "computed once (a depth-first or sorted order)." if close(got, arrival) and not close(arrival, want)
                 else "")
        fail(f"{where}: expected {want:.6g}, got {got:.6g}. Every distinct prefix must be computed once, and every "
             f"request computes its own last token.", cause)


# -- a6: EAGLE-2's dynamic tree and the pass that checks it ------------------------------------------------------

def confidence_of(draft, path) -> float:
    """The product of the draft's probabilities along a path of guesses below the root."""
    out = 1.0
    for d in range(len(path)):
        out *= draft[tuple(path[:d])][path[d]]
    return out


def likeliest(probs, width: int) -> list[int]:
    """The `width` likeliest tokens, likeliest first, ties to the lower token id."""
    return sorted(range(len(probs)), key=lambda x: (-probs[x], x))[:width]


def drawn_tree(draft, root: int, width: int, depth: int, rank: str = "confidence", expand: str = "level"):
    """Every guess EAGLE-2's greedy growth draws, in the order drawn: (parents, tokens, confidence), the root
    first. Each level gives every node it expands its `width` likeliest tokens; the next level expands the `width`
    most confident guesses of the level just drawn, ties to the one drawn first. `rank` "last" ranks them by the
    last token's probability alone, `expand` "all" picks among every guess not yet expanded, and "every" expands
    the whole level: three classic bugs."""
    parents, tokens, conf, paths, frontier, expanded = [-1], [root], [1.0], [()], [0], {0}
    for d in range(depth):
        first = len(tokens)
        for node in frontier:
            probs = draft[paths[node]]
            for x in likeliest(probs, width):
                parents.append(node)
                tokens.append(x)
                paths.append(paths[node] + (x,))
                conf.append(conf[node] * probs[x])
        if d + 1 == depth:
            break
        pool = range(first, len(tokens)) if expand != "all" else [i for i in range(1, len(tokens)) if i not in
                                                                   expanded]
        score = conf if rank == "confidence" else [draft[paths[parents[i]]][tokens[i]] if i else 1.0
                                                   for i in range(len(tokens))]
        frontier = sorted(pool) if expand == "every" else sorted(sorted(pool, key=lambda i: -score[i])[:width])
        expanded |= set(frontier)
    return parents, tokens, conf


def rerank_of(parents, tokens, conf, nodes: int, later_first: bool = False, renumber: bool = True,
              remap: bool = True):
    """The root and the `nodes` most confident guesses, ties to the one drawn first, numbered in their old order:
    (parents, tokens). The flags give the classic bugs: ties to the later one, the kept numbered by confidence,
    the parents left with their old numbers."""
    ranked = sorted(range(1, len(parents)), key=lambda i: (-conf[i], -i if later_first else i))[:nodes]
    kept = [0] + (sorted(ranked) if renumber else ranked)
    new = {old: n for n, old in enumerate(kept)}
    return ([-1] + [new.get(parents[i], -2) if remap else parents[i] for i in kept[1:]],
            [tokens[i] for i in kept])


def grow_of(draft, root, width, depth, nodes, **bug) -> tuple[list[int], list[int]]:
    return rerank_of(*drawn_tree(draft, root, width, depth, **bug), nodes)


def draft_table(draws: Draws, vocab: int, depth: int) -> dict[tuple, list[float]]:
    """A draft's distribution after every path of fewer than `depth` guesses: some rows confident, some spread."""
    table, level = {}, [()]
    for _ in range(depth):
        for path in level:
            sharp = draws.uniform() < 0.5
            w = [(draws.uniform() ** (4 if sharp else 1)) + 0.01 for _ in range(vocab)]
            table[path] = [v / sum(w) for v in w]
        level = [path + (x,) for path in level for x in range(vocab)]
    return table


def random_tree(draws: Draws, n: int) -> list[int]:
    """parents of a random tree of n nodes, each parent numbered before its child."""
    return [-1] + [draws.below(i) for i in range(1, n)]


def path_to(parents, tokens, i) -> tuple:
    out = []
    while i > 0:
        out.append(tokens[i])
        i = parents[i]
    return tuple(reversed(out))


def tree_lists(out, what: str) -> tuple[list[int], list[int]]:
    """A returned (parents, tokens) as two lists of ints."""
    written(what, out)
    try:
        parents, tokens = out
        return [int(x) for x in parents], [int(x) for x in tokens]
    except (TypeError, ValueError):
        fail(f"{what} must return (parents, tokens), two lists of ints, got {out!r}")


def is_tree(parents, tokens) -> bool:
    """One parent and one token per node, node 0 the root, every other node's parent numbered before it."""
    return len(parents) == len(tokens) > 0 and parents[0] == -1 and all(0 <= parents[i] < i
                                                                         for i in range(1, len(parents)))


def not_a_tree(what: str, parents, tokens) -> str:
    return (f"{what} returned parents {parents} and tokens {tokens}, which is not a tree numbered parents first: "
            f"one parent and one token per node, node 0 the root (parent -1), every other node's parent numbered "
            f"before it.")


def a6_confidence(confidence, draws: Draws, hidden: bool) -> None:
    for r in range(40 if hidden else 10):
        vocab, depth = 3 + draws.below(3), 1 + draws.below(4)
        draft = draft_table(draws, vocab, depth)
        for path in [()] + [tuple(draws.below(vocab) for _ in range(1 + draws.below(depth))) for _ in range(3)]:
            got = floats(call("confidence", confidence, draft, path), "confidence")
            want = confidence_of(draft, path)
            if len(got) == 1 and close(got[0], want):
                continue
            steps = [draft[path[:d]][path[d]] for d in range(len(path))]
            cause = ("That is the last guess's own probability: a guess is kept only if the whole path to it is "
                     "accepted, so multiply the probabilities along the path." if path and len(got) == 1 and close(
                         got[0], steps[-1]) else
                     "That is the sum of the probabilities along the path: the chance that all of them come true is "
                     "their product." if len(got) == 1 and close(got[0], sum(steps)) else
                     "The root's confidence (the empty path) is 1: it is the committed token." if not path else "")
            fail(f"confidence(draft, path={path}): expected {want:.6g}, the product of the draft's probabilities "
                 f"along the path {fmt(steps)}; got {fmt(got)}.", cause)


def a6_rerank(rerank, draws: Draws, hidden: bool) -> None:
    cases = [([-1, 0, 0, 1, 3], [9, 4, 2, 7, 1], [1.0, 0.6, 0.3, 0.6, 0.2], 1),  # node 3 ties its parent, node 1
             ([-1, 0, 0, 1, 3], [9, 4, 2, 7, 1], [1.0, 0.6, 0.3, 0.6, 0.2], 3),
             ([-1, 0, 1, 0], [0, 1, 2, 3], [1.0, 0.5, 0.25, 0.4], 2)]
    for _ in range(60 if hidden else 12):
        if draws.uniform() < 0.5:  # a tree the growth draws, from a draft that is sometimes certain (ties)
            vocab, width, depth = 3 + draws.below(3), 1 + draws.below(3), 1 + draws.below(4)
            draft = draft_table(draws, vocab, depth)
            for path in draft:
                if draws.uniform() < 0.2:  # certain here: its likeliest child ties it, the others are 0
                    hot = draws.below(vocab)
                    draft[path] = [1.0 if x == hot else 0.0 for x in range(vocab)]
            parents, tokens, conf = drawn_tree(draft, draws.below(9), width, depth)
        else:  # any tree whose confidence never grows down a path, with ties
            parents = random_tree(draws, 2 + draws.below(10))
            tokens = [draws.below(9) for _ in parents]
            conf = [1.0]
            for i in range(1, len(parents)):
                conf.append(conf[parents[i]] * (1.0 if draws.uniform() < 0.2 else draws.uniform()))
        cases.append((parents, tokens, conf, 1 + draws.below(len(parents))))
    for parents, tokens, conf, nodes in cases:
        where = f"rerank(parents={parents}, tokens={tokens}, confidences={fmt(conf)}, nodes={nodes})"
        got = tree_lists(call("rerank", rerank, list(parents), list(tokens), list(conf), nodes, hints={
            "KeyError": "A kept node whose parent was not kept? Ties go to the node drawn first, so a parent always "
                      "ranks above its children."}), "rerank")
        want = rerank_of(parents, tokens, conf, nodes)
        if got == want:
            continue
        cause = ("Ties go to the node drawn first: a child whose probability is 1 ties its parent, and the parent "
                 "must rank above it, or the child would be kept without its parent."
                 if got == rerank_of(parents, tokens, conf, nodes, later_first=True) else
                 "That numbers the kept nodes by confidence: keep their old order, so that every parent comes "
                 "before its children and siblings stay in the order drawn."
                 if got == rerank_of(parents, tokens, conf, nodes, renumber=False) else
                 "Those parents are the old numbers: renumber them to the kept nodes' new numbers."
                 if got[1] == want[1] else
                 f"Keep the root and the {nodes} most confident guesses: {nodes + 1} nodes in all."
                 if len(got[0]) != len(want[0]) else "")
        fail(f"{where}: expected parents {want[0]}, tokens {want[1]}; got parents {got[0]}, tokens {got[1]}.",
             cause or ("" if is_tree(*got) else not_a_tree("rerank", *got)))


def a6_grow(grow, draws: Draws, hidden: bool) -> None:
    """Every case is run, and the likely cause named is a classic bug that gives exactly what came back on every
    case that failed (two bugs can agree on one case)."""
    named = [("That expands the most confident guesses drawn so far at any level: each level expands the `width` "
              "most confident of the level just drawn.", dict(expand="all")),
             ("That expands every guess of a level: only the `width` most confident of the level just drawn get "
              "children.", dict(expand="every")),
             ("That ranks a level by each guess's own probability: rank it by confidence, the product along the "
              "path, the draft's estimate that the whole path is accepted.", dict(rank="last"))]
    failed = []  # (where, what came back, what was expected, the case)
    settings = [(3, 1, 3, 3), (4, 2, 1, 2)] + [(4 + draws.below(2), 2 + draws.below(2), 2 + draws.below(3), None)
                                              for _ in range(60 if hidden else 12)]
    for r, (vocab, width, depth, nodes) in enumerate(settings):
        drawn = width + (depth - 1) * width * width  # the guesses a correct growth draws
        nodes = nodes or drawn - draws.below(width + 1)  # keep most of them: then what was drawn shows
        draft, root = draft_table(draws, vocab, depth), draws.below(9)
        where = f"grow(draft, root={root}, width={width}, depth={depth}, nodes={nodes}) (random draft {r})"
        got = tree_lists(call("grow", grow, {path: list(row) for path, row in draft.items()}, root, width, depth,
                              nodes), "grow")
        want = grow_of(draft, root, width, depth, nodes)
        if got != want:
            if not is_tree(*got):
                fail(not_a_tree(where, *got))
            failed.append((where, got, want, (draft, root, width, depth, nodes)))
    if not failed:
        return
    cause = next((c for c, bug in named if all(got == grow_of(*case, **bug) for _, got, _, case in failed)), "")
    if not cause and all(len(got[0]) == len(drawn_tree(*case[:4])[0]) for _, got, _, case in failed):
        cause = "That keeps every guess drawn: keep only the `nodes` most confident (rerank)."
    where, got, want, _ = failed[0]
    fail(f"{where}: expected the guesses (as paths below the root) "
         f"{[path_to(*want, i) for i in range(1, len(want[0]))]}; got "
         f"{[path_to(*got, i) for i in range(1, len(got[0]))]} ({len(failed)} of the cases failed).", cause)


def mask_out(out, n: int) -> tuple[list[list[bool]], list[int]]:
    written("tree_attention", out)
    try:
        mask, positions = out
        mask = mask.tolist() if hasattr(mask, "tolist") else mask
        mask = [[bool(v) for v in row] for row in mask]
        positions = [int(v) for v in (positions.tolist() if hasattr(positions, "tolist") else positions)]
    except (TypeError, ValueError):
        fail(f"tree_attention must return (mask, positions): an n x n grid of booleans and n ints, got {out!r}")
    if len(mask) != n or any(len(row) != n for row in mask) or len(positions) != n:
        fail(f"tree_attention of a tree of {n} nodes must return an {n} x {n} mask and {n} positions, got "
             f"{len(mask)} rows of {[len(row) for row in mask]} and {len(positions)} positions.")
    return mask, positions


def ancestors(parents, i) -> set[int]:
    out = {i}
    while parents[i] >= 0:
        i = parents[i]
        out.add(i)
    return out


def depth_of(parents) -> list[int]:
    depth = [0]
    for i in range(1, len(parents)):
        depth.append(depth[parents[i]] + 1)
    return depth


def trees(draws: Draws, n: int) -> list[list[int]]:
    return [[-1], [-1, 0, 1, 2], [-1, 0, 0, 0], [-1, 0, 0, 1, 1, 2]] + [random_tree(draws, 2 + draws.below(11))
                                                                       for _ in range(n)]


def a6_mask(tree_attention, draws: Draws, hidden: bool) -> None:
    for parents in trees(draws, 60 if hidden else 12):
        n = len(parents)
        mask, _ = mask_out(call("tree_attention", tree_attention, list(parents)), n)
        want = [[j in ancestors(parents, i) for j in range(n)] for i in range(n)]
        if mask == want:
            continue
        i = next(i for i in range(n) if mask[i] != want[i])
        cause = ("That is the causal mask of the flattened tree: a node would see its siblings and cousins, guesses "
                 "that are not on its path." if mask == [[j <= i for j in range(n)] for i in range(n)] else
                 "That leaves each node blind to itself: a query sees its own key too." if mask == [
                     [want[i][j] and j != i for j in range(n)] for i in range(n)] else
                 "That is the mask transposed: row i is node i as a query, and it sees the columns of its "
                 "ancestors." if mask == [list(col) for col in zip(*want)] else
                 "Every node sees the root: it is the last committed token, on every path." if all(
                     mask[r][c] == want[r][c] or (c == 0 and r > 0) for r in range(n) for c in range(n)) else "")
        fail(f"tree_attention(parents={parents}): row {i} must allow exactly node {i} and its ancestors "
             f"{sorted(ancestors(parents, i))}; yours allows {[j for j in range(n) if mask[i][j]]}.", cause)


def a6_positions(tree_attention, draws: Draws, hidden: bool) -> None:
    for parents in trees(draws, 60 if hidden else 12):
        n = len(parents)
        _, positions = mask_out(call("tree_attention", tree_attention, list(parents)), n)
        want = depth_of(parents)
        if positions == want:
            continue
        cause = ("That is each node's index in the flattened tree: a node's position is the root's plus its depth, "
                 "so siblings share a position, as they would if each were the only guess." if positions == list(
                     range(n)) else
                 "The root is the offset 0: node i's position is the root's plus its depth." if positions == [
                     d + 1 for d in want] else "")
        fail(f"tree_attention(parents={parents}): expected positions {want} (each node's depth), got {positions}.",
             cause)


# -- a7: suffix decoding -------------------------------------------------------------------------------------------

def suffix_count(sequences, pattern) -> int:
    """How often `pattern` occurs in the sequences, at every position (occurrences may overlap): the count of its
    node in the suffix tree."""
    pattern, n = list(pattern), len(pattern)
    return sum(list(s[i:i + n]) == pattern for s in sequences for i in range(len(s) - n + 1))


def followers_of(sequences, pattern, own: bool = False, last_only: bool = False, once: bool = False) -> dict:
    """token -> how often it came right after an occurrence of `pattern`: the children of the pattern's node, each
    with its count. An occurrence at the very end of a sequence has nothing after it. The flags give three classic
    bugs' answers: the occurrence's own last token counted, only the last occurrence counted (prompt lookup copies
    the most recent match), and each token counted once."""
    pattern, n, out = list(pattern), len(pattern), {}
    for s in sequences:
        for i in range(len(s) - n):
            if list(s[i:i + n]) == pattern:
                t = s[i + n - 1] if own else s[i + n]
                if last_only:
                    out = {}
                out[t] = 1 if once else out.get(t, 0) + 1
    return out


def match_of(sequences, context, depth: int, room: int = 1, after: bool = True, longest: bool = True) -> int:
    """The length of the longest suffix of `context`, at most depth - 1 tokens, that something followed in the
    sequences; 0 when none did. `room` 0 lets the match fill the whole depth, `after` off takes a suffix that only
    ends a sequence, `longest` off takes the shortest: three classic bugs."""
    top = min(depth - room, len(context))
    for m in (range(top, 0, -1) if longest else range(1, top + 1)):
        tail = list(context[len(context) - m:])
        if followers_of(sequences, tail) if after else suffix_count(sequences, tail):
            return m
    return 0


def suffix_chain(sequences, context, depth: int, k: int, min_prob: float, ties: str = "smaller", cap: str = "depth",
                 rank: str = "child", over: str = "node", stop: str = "path") -> list[int]:
    """The chain guessed from the longest match: the most counted follower of the path, ties to the smaller token
    id, at most k tokens and the match and the guess at most `depth`, stopping before a guess whose path
    probability, the product of D = count(path + [t]) / count(path) along the guess, is under min_prob. Exact, in
    fractions. The keywords give classic bugs: ties "larger"; the `cap` of match and guess "none", or one "short"
    of the depth; `rank` "parent" (every follower ranked by the path's own count, so all tie); D `over` the
    "followers"' total instead of the node's count; `stop` at a "step" whose own D is under min_prob, or "never"."""
    m = match_of(sequences, context, depth)
    if m == 0:
        return []
    path, out, p = list(context[len(context) - m:]), [], Fraction(1)
    room = {"depth": depth, "short": depth - 1, "none": math.inf}[cap]  # tokens the match and the guess may fill
    while len(out) < k and len(path) < room:
        after = followers_of(sequences, path)
        if not after:
            break
        t = min(after, key=lambda x: (-after[x] if rank == "child" else 0, x if ties == "smaller" else -x))
        d = Fraction(after[t], suffix_count(sequences, path) if over == "node" else sum(after.values()))
        p = d if stop == "step" else p * d
        if stop != "never" and p < min_prob:
            break
        out.append(t)
        path.append(t)
    return out


def history(draws: Draws) -> list[list[int]]:
    """Earlier sequences that repeat themselves, as outputs do: a few phrases over a small vocabulary, each written
    several times with other tokens between, so that a pattern recurs with different followers, and some
    occurrences end a sequence."""
    vocab = 3 + draws.below(4)
    phrases = [[draws.below(vocab) for _ in range(2 + draws.below(3))] for _ in range(1 + draws.below(3))]
    out = []
    for _ in range(1 + draws.below(4)):
        s, n = [], 3 + draws.below(10)
        while len(s) < n:
            s += phrases[draws.below(len(phrases))] if draws.uniform() < 0.5 else [draws.below(vocab)]
        out.append(s)
    return out


def suffix_case(draws: Draws) -> tuple[list[list[int]], list[int]]:
    """Sequences and a context: mostly one whose end occurred before, a stretch of a sequence after a token or two
    of its own; often the context is one of the sequences too, as a request's own tokens are in the engine, so its
    suffixes all occur once with nothing after them."""
    sequences = history(draws)
    s = sequences[draws.below(len(sequences))]
    end = 1 + draws.below(len(s))
    context = [draws.below(6) for _ in range(draws.below(3))] + s[max(0, end - 1 - draws.below(6)):end]
    if draws.uniform() < 0.4:
        sequences.append(list(context))
    return sequences, context


def path_probabilities(sequences, path, k: int) -> set:
    """The path probability of every guess of at most k tokens below `path`, exact."""
    out, todo = set(), [(list(path), Fraction(1))]
    for _ in range(k):
        grown = []
        for at, p in todo:
            after, total = followers_of(sequences, at), suffix_count(sequences, at)
            for t, c in after.items():
                out.add(p * Fraction(c, total))
                grown.append((at + [t], p * Fraction(c, total)))
        todo = grown
    return out


def threshold(draws: Draws, sequences, context, depth: int, k: int) -> float:
    """A min_prob of two decimals that no path probability of these cases comes within 1e-9 of, so that a path
    product computed in floats compares with it as the exact one does."""
    m = match_of(sequences, context, depth)
    near = path_probabilities(sequences, context[len(context) - m:], k) if m else set()
    for _ in range(50):
        min_prob = round(0.05 + 0.85 * draws.uniform(), 2)
        if all(abs(p - Fraction(min_prob)) > Fraction(1, 10**9) for p in near):
            return min_prob
    return round(0.05 + 0.85 * draws.uniform(), 6)


def counts_out(out, what: str) -> dict[int, int]:
    """A returned dict token -> count, as ints."""
    written(what, out)
    try:
        return {int(t): int(c) for t, c in out.items()}
    except (AttributeError, TypeError, ValueError):
        fail(f"{what} must return a dict, token -> count, got {out!r}")


def tokens_out(out, what: str, k: int) -> list[int]:
    """A returned guess: a list of at most k ints."""
    written(what, out)
    try:
        out = [int(t) for t in out]
    except (TypeError, ValueError):
        fail(f"{what} must return the guessed tokens as a list of ints, got {out!r}")
    if len(out) > k:
        fail(f"{what} returned {len(out)} tokens, {out}, with k = {k}: guess at most k tokens.")
    return out


def named(failed: list, bugs: list[tuple[str, object]]) -> str:
    """The likely cause: the classic bug, if one, whose answer is what came back on every case that failed (two bugs
    can agree on one case). `failed`: (the case, what came back); `bugs`: (cause, the case -> that bug's answer)."""
    return next((cause for cause, bug in bugs if all(got == bug(*case) for case, got in failed)), "")


def a7_followers(followers, draws: Draws, hidden: bool) -> None:
    cases = [([[1, 2, 3, 1, 2, 4]], [1, 2]), ([[1, 2, 3], [0, 1, 2, 3, 1, 2]], [1, 2]),
             ([[5, 5, 5, 5, 6]], [5, 5]),  # occurrences overlap
             ([[7, 8]], [9]), ([[4, 2], [2]], [2])]  # never there; there only at the end of a sequence
    for _ in range(80 if hidden else 12):
        sequences = history(draws)
        s = sequences[draws.below(len(sequences))]
        n = 1 + draws.below(min(3, len(s)))
        start = len(s) - n if draws.uniform() < 0.3 else draws.below(len(s) - n + 1)  # often one that ends s
        cases.append((sequences, s[start:start + n]))
    outs = call_many("followers", followers, [(lists(seqs), list(pattern)) for seqs, pattern in cases], hints={
        "IndexError": "An occurrence at the very end of a sequence has nothing after it: only an occurrence that "
                      "starts at i < len(s) - len(pattern) has a follower, s[i + len(pattern)]."})
    failed = [((seqs, pattern), counts_out(out, "followers")) for (seqs, pattern), out in zip(cases, outs)]
    failed = [(case, got) for case, got in failed if got != followers_of(*case)]
    if not failed:
        return
    (seqs, pattern), got = failed[0]
    want = followers_of(seqs, pattern)
    cause = named(failed, [
        ("That counts the last token of each occurrence, the pattern's own: a follower is the token right after an "
         "occurrence, s[i + len(pattern)].", lambda s, p: followers_of(s, p, own=True)),
        ("That counts only the last occurrence, as prompt lookup copies its most recent match: the tree counts "
         "every occurrence, and the counts are what guessing ranks.", lambda s, p: followers_of(s, p, last_only=True)),
        ("That counts each follower once: count it at every occurrence it follows.",
         lambda s, p: followers_of(s, p, once=True))])
    if not cause and {t: c for t, c in got.items() if c} == want:
        cause = "Leave out the tokens that never came after the pattern: a node has only the children that occurred."
    fail(f"followers(sequences={seqs}, pattern={pattern}): expected {dict(sorted(want.items()))}, got "
         f"{dict(sorted(got.items()))} ({len(failed)} of the cases failed). Every occurrence, overlapping ones too, "
         f"counts the token right after it; an occurrence at the end of a sequence counts nothing.", cause)


def a7_match(longest_match, draws: Draws, hidden: bool) -> None:
    cases = [([[1, 2, 3, 4]], [9, 1, 2, 3], 24), ([[1, 2, 3, 4]], [9, 1, 2, 3], 3),  # a match cut by the depth
             ([[1, 2, 3], [5, 2, 3, 7]], [1, 2, 3], 8),  # (1, 2, 3) only ends a sequence; (2, 3) was followed
             ([[1, 2, 1, 2, 1]], [1, 2, 1, 2, 1], 8),  # the context is a sequence: its whole self ends it
             ([[4, 5]], [], 4), ([[4, 5]], [6], 4)]
    for _ in range(80 if hidden else 15):
        sequences, context = suffix_case(draws)
        cases.append((sequences, context, 2 + draws.below(6)))
    outs = call_many("longest_match", longest_match, [(lists(s), list(c), d) for s, c, d in cases])
    failed = []
    for case, out in zip(cases, outs):
        got = written("longest_match", out)
        if not isinstance(got, int) or isinstance(got, bool):
            fail(f"longest_match must return the match's length, an int, got {got!r}")
        if got != match_of(*case):
            failed.append((case, got))
    if not failed:
        return
    (seqs, context, depth), got = failed[0]
    cause = named(failed, [
        ("A path of the tree holds at most depth tokens, the match and at least one token after it: the match is "
         "at most depth - 1 tokens.", lambda s, c, d: match_of(s, c, d, room=0)),
        ("That suffix occurs in the sequences, but only at the very end of one, with nothing after it: it proposes "
         "nothing. Keep a suffix only if something followed it (its followers are not empty).",
         lambda s, c, d: match_of(s, c, d, after=False)),
        ("That is the shortest suffix something followed: try the longest first, the most specific evidence.",
         lambda s, c, d: match_of(s, c, d, longest=False))])
    fail(f"longest_match(sequences={seqs}, context={context}, depth={depth}): expected {match_of(seqs, context, depth)}"
         f", got {got} ({len(failed)} of the cases failed). The longest suffix of the context, at most depth - 1 = "
         f"{depth - 1} tokens, that something followed in the sequences; 0 when none.", cause)


def a7_choice(guess, draws: Draws, hidden: bool) -> None:
    """min_prob 0: the chain is judged token for token (the stop part judges min_prob)."""
    cases = [([[1, 2, 3, 4, 5], [1, 2, 3, 6]], [0, 1, 2], 24, 4),  # after (1, 2, 3): 4 and 6 tie
             ([[1, 2, 3, 4, 5]], [1, 2, 3], 4, 4),  # the match takes 3 of the depth's 4 tokens: one guess
             ([[1, 2, 9, 1, 2, 9, 1, 2, 5, 1, 2]], [1, 2, 9, 1, 2], 24, 3),
             ([[3, 1, 4, 1, 5]], [2, 7], 24, 3)]  # nothing matches: no guess
    for _ in range(80 if hidden else 15):
        sequences, context = suffix_case(draws)
        cases.append((sequences, context, 2 + draws.below(7), 1 + draws.below(5)))
    outs = call_many("guess", guess, [(lists(s), list(c), d, k, 0.0) for s, c, d, k in cases])
    failed = [((s, c, d, k), tokens_out(out, "guess", k)) for (s, c, d, k), out in zip(cases, outs)]
    failed = [(case, got) for case, got in failed if got != suffix_chain(*case, 0.0)]
    if not failed:
        return
    (seqs, context, depth, k), got = failed[0]
    cause = named(failed, [
        ("Ties go to the smaller token id: of the followers counted alike, guess the smallest.",
         lambda s, c, d, k: suffix_chain(s, c, d, k, 0.0, ties="larger")),
        ("The match and the guess together are one path of the tree, at most depth tokens: after a match of m "
         "tokens, guess at most depth - m.", lambda s, c, d, k: suffix_chain(s, c, d, k, 0.0, cap="none")),
        ("The match and the guess together may fill the depth: after a match of m tokens, up to depth - m guesses, "
         "not one fewer.", lambda s, c, d, k: suffix_chain(s, c, d, k, 0.0, cap="short")),
        ("That ranks each follower by the count of the path it follows, the same for all of them, so the smallest "
         "token id always wins: rank a follower t by its own count, count(path + [t]).",
         lambda s, c, d, k: suffix_chain(s, c, d, k, 0.0, rank="parent"))])
    fail(f"guess(sequences={seqs}, context={context}, depth={depth}, k={k}, min_prob=0.0): expected "
         f"{suffix_chain(seqs, context, depth, k, 0.0)}, got {got} ({len(failed)} of the cases failed). From the "
         f"longest match, the most counted follower of the path each time, ties to the smaller token id, at most k "
         f"tokens, the match and the guess at most depth.", cause)


def stop_broken(sequences, context, depth: int, k: int, min_prob: float, got: list[int]) -> str:
    """Why the guess `got` does not stop where min_prob says, judged along its own path, so that a choice the
    choice part charges (a tie broken the other way) is not charged here too; "" when it does."""
    m = match_of(sequences, context, depth)
    if m == 0:
        return "" if not got else (f"no suffix of the context was followed by anything, so there is nothing to "
                                   f"guess from, but it guessed {got}.")
    path, p = list(context[len(context) - m:]), Fraction(1)
    for j, t in enumerate(got):
        after = followers_of(sequences, path)
        if t not in after:
            return f"its token {j + 1}, {t}, never came after {path}, so its path probability is 0."
        p *= Fraction(after[t], suffix_count(sequences, path))
        if p < min_prob:
            return (f"its token {j + 1}, {t}, has path probability {float(p):.4g} (the product of D along the "
                    f"guess), under min_prob; the guess must stop before it.")
        path.append(t)
    after = followers_of(sequences, path)
    if len(got) < k and after:
        t = min(after, key=lambda x: (-after[x], x))
        q = p * Fraction(after[t], suffix_count(sequences, path))
        if q >= min_prob:
            return (f"it stops after {len(got)} tokens, but the next, {t}, the most counted after them, has path "
                    f"probability {float(q):.4g} >= min_prob: stop only below min_prob, at k tokens, or when nothing "
                    f"followed.")
    return ""


def a7_stop(guess, draws: Draws, hidden: bool) -> None:
    """The depth is never what stops these guesses (the choice part judges it): depth > len(context) + k."""
    cases = [([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 6], [9, 1, 2]], [7, 1, 2], 0.3),  # D 2/4, then 1/2
             ([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 6], [9, 1, 2]], [7, 1, 2], 0.6),
             ([[5, 6, 7, 8], [5, 6, 7, 8], [5, 6, 7, 9], [5, 6, 4]], [5, 6], 0.55)]  # D 3/4, then 2/3
    cases = [(s, c, len(c) + 5, 4, min_prob) for s, c, min_prob in cases]
    for _ in range(80 if hidden else 15):
        sequences, context = suffix_case(draws)
        k = 1 + draws.below(5)
        depth = len(context) + k + 1 + draws.below(3)
        cases.append((sequences, context, depth, k, threshold(draws, sequences, context, depth, k)))
    outs = call_many("guess", guess, [(lists(s), list(c), d, k, p) for s, c, d, k, p in cases])
    failed = []
    for case, out in zip(cases, outs):
        got = tokens_out(out, "guess", case[3])
        why = stop_broken(*case, got)
        if why:
            failed.append((case, got, why))
    if not failed:
        return
    (seqs, context, depth, k, min_prob), got, why = failed[0]
    cause = named([(case, got) for case, got, _ in failed], [
        ("That divides by the followers' total: D = count(path + [t]) / count(path), and count(path) also counts "
         "the occurrences at the very end of a sequence, with nothing after them (the request's own context is "
         "one).", lambda s, c, d, k, p: suffix_chain(s, c, d, k, p, over="followers")),
        ("That compares each step's own D with min_prob: the path probability is the product of D along the whole "
         "guess, the chance that every guess up to there is right.",
         lambda s, c, d, k, p: suffix_chain(s, c, d, k, p, stop="step")),
        ("That ignores min_prob: stop before a guess whose path probability is under it.",
         lambda s, c, d, k, p: suffix_chain(s, c, d, k, p, stop="never")),
        ("That ranks each follower by the count of the path it follows, the same for all of them, so the smallest "
         "token id wins, and its D decides the stop: rank a follower t by its own count, count(path + [t]).",
         lambda s, c, d, k, p: suffix_chain(s, c, d, k, p, rank="parent"))])
    fail(f"guess(sequences={seqs}, context={context}, depth={depth}, k={k}, min_prob={min_prob}) returned {got} "
         f"({len(failed)} of the cases failed): {why}", cause)


# -- a8: routing across replicas ----------------------------------------------------------------------------------

def shared_chars(a: str, b: str) -> int:
    """How many leading characters two texts share, found by halving (the slices compare in C: the simulated
    part matches every request against every text sent before it)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def sent_match(sent, text, whole: bool = False, short: bool = False, last: bool = False) -> tuple:
    """The router's approximate tree read as what it sent (`sent`: (text, worker) pairs, in the order sent): the
    longest prefix of `text` that a sent text shares, and the worker of the first sent text that shares it, the
    one that created that node of the tree; (0, None) when none shares a character. The flags give classic bugs'
    answers: a sent text counted only when the whole of it begins `text`; a match that runs to the end of either
    text counted one short; ties to the last sent text."""
    best, worker = 0, None
    for s, w in sent:
        n = (len(s) if text.startswith(s) else 0) if whole else shared_chars(s, text)
        if short and n and n == min(len(s), len(text)):
            n -= 1
        if n > best or (last and n == best):
            best, worker = n, w
    return best, worker


def imbalanced_of(loads, abs_threshold, rel_threshold, either: bool = False, inclusive: bool = False) -> bool:
    """The router's balance rule: imbalanced when max - min > abs_threshold and max > min * rel_threshold.
    `either` (or for and) and `inclusive` (>= for >) give two classic bugs' answers."""
    low, high = min(loads), max(loads)
    spread = high - low >= abs_threshold if inclusive else high - low > abs_threshold
    ratio = high >= low * rel_threshold if inclusive else high > low * rel_threshold
    return (spread or ratio) if either else (spread and ratio)


def least_of(loads) -> int:
    """The least loaded worker, the first of equals."""
    return min(range(len(loads)), key=lambda i: loads[i])


def route_of(text, sent, loads, cache_threshold, abs_threshold, rel_threshold, strict: bool = True,
             low: str = "least_loaded", balance: bool = True) -> int:
    """cache_aware's rule (teachspec.routing.policies, vllm-router's): imbalanced, the least loaded worker; else
    the worker of the longest match when it covers more than cache_threshold of the text; else the least loaded.
    The keywords give classic bugs: the threshold compared with >= (`strict` off), the fallback "round_robin"
    (the count of requests sent so far, modulo the workers), and the loads never checked (`balance` off)."""
    if balance and imbalanced_of(loads, abs_threshold, rel_threshold):
        return least_of(loads)
    length, worker = sent_match(sent, text)
    rate = length / len(text)
    if worker is not None and (rate > cache_threshold if strict else rate >= cache_threshold):
        return worker
    return least_of(loads) if low == "least_loaded" else len(sent) % len(loads)


SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "po", "de")


def phrase(draws: Draws, n: int) -> str:
    return " ".join("".join(SYLLABLES[draws.below(len(SYLLABLES))] for _ in range(1 + draws.below(3)))
                    for _ in range(n))


def sent_case(draws: Draws) -> tuple[str, list, int]:
    """A request and what the router sent before it: texts that share stems (a tenant's system prompt, the
    router's frame), some sent to several workers, and a request that continues one, stops inside one, or is new."""
    workers = 2 + draws.below(3)
    stems = [phrase(draws, 1 + draws.below(4)) + " " for _ in range(1 + draws.below(3))]
    sent = []
    for _ in range(draws.below(7)):
        text = stems[draws.below(len(stems))] + phrase(draws, draws.below(3))
        sent.append((text.strip() or "ka", draws.below(workers)))
    roll = draws.uniform()
    if sent and roll < 0.3:
        s = sent[draws.below(len(sent))][0]
        text = s[:1 + draws.below(len(s))]  # a prefix of one sent: the whole request matches
    elif sent and roll < 0.5:
        text = sent[draws.below(len(sent))][0] + " " + phrase(draws, 1 + draws.below(2))  # one sent, continued
    else:
        text = stems[draws.below(len(stems))] + phrase(draws, 1 + draws.below(3))
    return text, sent, workers


def pairs_of(sent) -> list:
    """Fresh (text, worker) tuples for the student's code."""
    return [(s, w) for s, w in sent]


def a8_match(match, draws: Draws, hidden: bool) -> None:
    cases = [([("system: be brief. Q: hi", 0)], "system: be brief. Q: bye"),  # stops inside the sent text
             ([("abc", 1)], "abcdef"), ([("abcdef", 1)], "abc"),  # all of one of them matches
             ([("abcx", 2), ("abcy", 0)], "abcz"), ([("ab", 1), ("abcd", 0), ("abce", 2)], "abcf"),  # ties
             ([], "hello"), ([("xyz", 0)], "abc"), ([("abc", 0)], "")]
    cases += [(sent, text) for text, sent, _ in (sent_case(draws) for _ in range(80 if hidden else 15))]
    outs = call_many("match", match, [(pairs_of(sent), text) for sent, text in cases])
    failed = []
    for (sent, text), out in zip(cases, outs):
        written("match", out)
        try:
            length, worker = out
            got = (int(length), None if worker is None else int(worker))
        except (TypeError, ValueError):
            fail(f"match must return (length, worker): an int and a worker (None when nothing matches), got "
                 f"{out!r}")
        if got != sent_match(sent, text):
            failed.append(((sent, text), got))
    if not failed:
        return
    (sent, text), got = failed[0]
    want = sent_match(sent, text)
    cause = named(failed, [
        ("That counts a sent text only when the whole of it begins the request: the router's tree matches "
         "character by character, and a match may stop inside a sent text (a tenant's prompt with another "
         "question after it).", lambda s, t: sent_match(s, t, whole=True)),
        ("That is one short when the match runs to the end of a text: count every character the two share, up "
         "to the shorter one's length.", lambda s, t: sent_match(s, t, short=True)),
        ("Of the sent texts that share the longest prefix, the first sent created that node of the router's "
         "tree: ties go to the earliest, not the latest.", lambda s, t: sent_match(s, t, last=True))])
    fail(f"match(sent={sent!r}, text={text!r}): expected {want}, got {got} ({len(failed)} of the cases failed). "
         f"The longest prefix of the text that a sent text shares, and the worker the first such text went to; "
         f"(0, None) when none shares a character.", cause,
         hidden=f"{len(failed)} of the cases failed")


def balance_cases(draws: Draws, n: int) -> list[tuple[list[int], int, float]]:
    """Loads and thresholds, many of them on the rule's boundaries: max - min equal to abs_threshold, max equal to
    min * rel_threshold (the factors are exact in binary, so the product is exact)."""
    cases = [([10, 2], 8, 1.5), ([10, 2], 7, 1.5), ([6, 4], 1, 1.5), ([9, 6], 2, 1.5), ([9, 5], 2, 1.5),
             ([3, 0, 1], 2, 2.0), ([3, 0, 1], 3, 2.0), ([5, 5], 0, 1.0), ([70, 2], 64, 1.5), ([66, 2], 64, 1.5)]
    for _ in range(n):
        workers = 2 + draws.below(4)
        loads = [draws.below(12) for _ in range(workers)]
        low, high = min(loads), max(loads)
        rel = (1.0, 1.25, 1.5, 2.0, 3.0)[draws.below(5)]
        roll = draws.uniform()
        abs_threshold = high - low if roll < 0.3 else max(0, high - low - 1 - draws.below(3))
        if roll > 0.7 and low > 0 and (high / low) in (1.0, 1.25, 1.5, 2.0, 3.0):
            rel = high / low  # exactly on the factor's boundary
        cases.append((loads, abs_threshold, rel))
    return cases


def a8_imbalanced(imbalanced, draws: Draws, hidden: bool) -> None:
    cases = balance_cases(draws, 80 if hidden else 20)
    outs = call_many("imbalanced", imbalanced, [(list(loads), a, r) for loads, a, r in cases])
    failed = []
    for case, out in zip(cases, outs):
        written("imbalanced", out)
        if out not in (True, False):
            fail(f"imbalanced must return True or False, got {out!r}")
        if bool(out) != imbalanced_of(*case):
            failed.append((case, bool(out)))
    if not failed:
        return
    (loads, a, r), got = failed[0]
    cause = named(failed, [
        ("That is imbalanced when either condition holds: the router balances only when both do, the loads "
         "apart by more than abs_threshold requests AND the most loaded more than rel_threshold times the least.",
         lambda loads, a, r: imbalanced_of(loads, a, r, either=True)),
        ("Both conditions are strict: max - min > abs_threshold and max > min * rel_threshold; on the boundary "
         "the loads count as balanced.", lambda loads, a, r: imbalanced_of(loads, a, r, inclusive=True))])
    fail(f"imbalanced(loads={loads}, abs_threshold={a}, rel_threshold={r}): expected {not got}, got {got} "
         f"({len(failed)} of the cases failed). max - min = {max(loads) - min(loads)}, min * rel_threshold = "
         f"{min(loads) * r:g}.", cause, hidden=f"{len(failed)} of the cases failed")


def route_cases(draws: Draws, n: int) -> list[tuple]:
    """(text, sent, loads, cache_threshold, abs_threshold, rel_threshold): thresholds exact in binary, so that a
    rate on the threshold compares the same whether computed as a quotient or a product."""
    sent = [("Reference for tenant 1: lorem. Q: one", 1), ("Reference for tenant 2: ipsum. Q: two", 0)]
    cases = [("Reference for tenant 1: lorem. Q: three", sent, [1, 2], 0.5, 64, 1.5),   # affinity, not the least
             ("Reference for tenant 1: xyz", sent, [1, 2], 0.75, 64, 1.5),               # too little: least loaded
             ("abcdwxyz", [("abcdefgh", 1)], [0, 0], 0.5, 64, 1.5),                      # rate 4/8 = 0.5 exactly
             ("abcdefwx", [("abcdefgh", 0)], [3, 1], 0.75, 64, 1.5),                     # 6/8 = 0.75 exactly
             ("abcdez", [("abcdef", 2), ("abcdeg", 0)], [1, 1, 1], 0.5, 64, 1.5),        # tie: the first sent
             ("qrst", [("abc", 0), ("abd", 1), ("abe", 0)], [2, 1, 1], 0.25, 64, 1.5),   # nothing: least, first
             ("hello world", [("hello world", 0)], [70, 2], 0.5, 64, 1.5),               # imbalanced
             ("hello world", [("hello world", 0)], [66, 2], 0.5, 64, 1.5),               # on the boundary
             ("hello there", [("hello world", 1)], [0, 5, 1], 0.25, 4, 1.5)]             # imbalanced at once
    for _ in range(n):
        text, sent, workers = sent_case(draws)
        loads = [draws.below(6) for _ in range(workers)]
        if draws.uniform() < 0.25:
            loads[draws.below(workers)] += 3 + draws.below(6)
        cases.append((text, sent, loads, (0.125, 0.25, 0.375, 0.5, 0.625, 0.75)[draws.below(6)],
                      (1, 2, 4, 64)[draws.below(4)], (1.0, 1.25, 1.5, 2.0)[draws.below(4)]))
    return cases


def worker_out(out, what: str, workers: int) -> int:
    written(what, out)
    if isinstance(out, bool) or not isinstance(out, int) or not 0 <= out < workers:
        fail(f"{what} must return a worker, an int in 0 .. {workers - 1}, got {out!r}")
    return out


ROUTE_BUGS = [
    ("The match must cover MORE than cache_threshold of the request: rate > cache_threshold, strictly; on the "
     "threshold the router falls back to the least loaded worker.", dict(strict=False)),
    ("That is round robin below the threshold: the router sends a request it has no good match for to the least "
     "loaded worker (the first of equals), the one with the most room to start it.", dict(low="round_robin")),
    ("That never looks at the loads first: when they are imbalanced (both conditions), the request goes to the "
     "least loaded worker whatever it matches.", dict(balance=False))]


def a8_route(route, draws: Draws, hidden: bool) -> None:
    cases = route_cases(draws, 80 if hidden else 20)
    outs = call_many("route", route, [(text, pairs_of(sent), list(loads), t, a, r)
                                      for text, sent, loads, t, a, r in cases])
    failed = [(case, worker_out(out, "route", len(case[2]))) for case, out in zip(cases, outs)]
    failed = [(case, got) for case, got in failed if got != route_of(*case)]
    if not failed:
        return
    (text, sent, loads, t, a, r), got = failed[0]
    length, worker = sent_match(sent, text)
    cause = named(failed, [(c, lambda *case, bug=bug: route_of(*case, **bug)) for c, bug in ROUTE_BUGS])
    fail(f"route(text={text!r}, sent={sent!r}, loads={loads}, cache_threshold={t}, abs_threshold={a}, "
         f"rel_threshold={r}): expected {route_of(text, sent, loads, t, a, r)}, got {got} ({len(failed)} of the "
         f"cases failed). Its longest match is {length} of {len(text)} characters (worker {worker}); the loads "
         f"are {'imbalanced' if imbalanced_of(loads, a, r) else 'balanced'}.", cause,
         hidden=f"{len(failed)} of the cases failed")


def tenant_arrivals(draws: Draws, tenants: int, requests: int, prompt_words: int = 40, question_words: int = 8):
    """A multi-tenant workload, drawn here: each tenant a system prompt of its own behind one frame, its requests a
    question after it or the next turn of a chat, tenants' traffic 1 / (t + 1) (a Zipf law); tokens are words."""
    from teachspec.routing.simulate import Arrival

    systems = [f"Reference for tenant {t}: {phrase(draws, prompt_words)}.\n" for t in range(tenants)]
    weights = [1 / (t + 1) for t in range(tenants)]
    chats, ids, out = {}, {}, []
    for i in range(requests):
        u, t = draws.uniform() * sum(weights), 0
        while t < tenants - 1 and u >= weights[t]:
            u, t = u - weights[t], t + 1
        if t in chats and draws.uniform() < 0.5:
            text = f"{chats[t]} {phrase(draws, 4)}.\nQ: {phrase(draws, question_words)}?\nA:"  # the chat's next turn
        else:
            text = f"{systems[t]}Q: {phrase(draws, question_words)}?\nA:"
        if draws.uniform() < 0.5:
            chats[t] = text
        tokens = [ids.setdefault(w, len(ids)) for w in re.findall(r"\S+\s*", text)]
        out.append(Arrival(i, f"tenant {t}", text, tokens, 4 + draws.below(8)))
    return out


def route_policy(route, replicas: int, knobs: tuple, what: str = "route"):
    """`route` as the simulator's policy: each request routed by it, from the (text, worker) pairs sent so far and
    the loads, then recorded as sent, as the router's tree records it."""
    from teachspec.routing.policies import Policy

    class RouteAsPolicy(Policy):
        name = "yours"

        def __init__(self):
            super().__init__(replicas)
            self.sent = []

        def choose(self, text, key, loads, alive):
            if isinstance(route, Remote):  # the student's, over in the sandbox
                pick = worker_out(call(what, route, text, pairs_of(self.sent), list(loads), *knobs), what, replicas)
            else:  # the grader's own: a classic bug's, to name the likely cause
                pick = route(text, self.sent, list(loads), *knobs)
            self.sent.append((text, pick))
            return pick

    return RouteAsPolicy()


GAIN = 1.5  # what cache-aware routing must gain over round robin on the workload made for it


def a8_simulated(route, draws: Draws, hidden: bool) -> None:
    """The student's route as the simulator's policy (teachspec.routing.simulate), on multi-tenant workloads drawn
    here: every request must go where the library's cache_aware sends it; on the first, many tenants over four
    replicas whose caches hold a few tenants each, the hit rate must be GAIN times round robin's."""
    from teachspec.routing.simulate import simulate

    # (tenants, replicas, kv_blocks, concurrency, cache_threshold, abs_threshold, rel_threshold); the visible
    # ones: the workload made for cache-aware routing, with vLLM's router's defaults, then loads that trip balance
    settings = [] if hidden else [(8, 4, 24, 4, 0.3, 64, 1.5), (6, 3, 30, 8, 0.3, 1, 1.25)]
    settings += [(3 + draws.below(6), 2 + draws.below(3), 20 + draws.below(30), 3 + draws.below(6),
                  (0.2, 0.3, 0.5)[draws.below(3)], (1, 2, 4, 64)[draws.below(4)], (1.25, 1.5, 2.0)[draws.below(3)])
                 for _ in range(4 if hidden else 0)]
    failed = []
    for n, (tenants, replicas, kv_blocks, concurrency, *knobs) in enumerate(settings):
        arrivals = tenant_arrivals(draws, tenants, 48 if hidden else 64)
        where = dict(kv_blocks=kv_blocks, block_size=4, concurrency=concurrency)
        options = dict(zip(("cache_threshold", "balance_abs_threshold", "balance_rel_threshold"), knobs))
        want = simulate(arrivals, replicas, "cache_aware", **where, **options)
        got = simulate(arrivals, replicas, route_policy(route, replicas, tuple(knobs)), **where)
        if got.routes != want.routes:
            failed.append(((arrivals, replicas, where, tuple(knobs)), got.routes, want.routes, n))
        elif n == 0 and not hidden:
            rr = simulate(arrivals, replicas, "round_robin", **where)
            if got.hit_rate < GAIN * rr.hit_rate:
                fail(f"On the simulated workload of {tenants} tenants over {replicas} replicas, your routes are "
                     f"cache_aware's but the hit rate is {got.hit_rate:.3f}, under {GAIN} x round robin's "
                     f"{rr.hit_rate:.3f}: the simulator has changed; tell your instructor.")
    if not failed:
        return
    (arrivals, replicas, where, knobs), got, want, n = failed[0]
    i = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
    cause = named([(case, routes) for case, routes, _, _ in failed], [
        (c, lambda arrivals, replicas, where, knobs, bug=bug: simulate(arrivals, replicas, route_policy(
            lambda *case: route_of(*case, **bug), replicas, knobs), **where).routes) for c, bug in ROUTE_BUGS])
    fail(f"Simulated workload {n + 1} ({len(arrivals)} requests over {replicas} replicas, cache_threshold="
         f"{knobs[0]}, abs_threshold={knobs[1]}, rel_threshold={knobs[2]}): request {i} ({arrivals[i].key}) goes "
         f"to replica {want[i]} by cache_aware's rule, but your route sent it to replica {got[i]} "
         f"({len(failed)} of the workloads failed). Every request must go where cache_aware sends it.", cause,
         hidden=f"{len(failed)} of the workloads routed otherwise")


# -- the parts ---------------------------------------------------------------------------------------------------

class Part:
    """One graded property of one exercise."""

    def __init__(self, answer: str, what: str, judge, leans_on: tuple[str, ...] = (), needs: tuple[str, ...] = ()):
        self.answer = answer          # the student's name for what is graded
        self.what = what              # the property, as the verdict says it
        self.judge = judge            # judge(answer, draws, hidden) raises CheckFailed
        self.leans_on = leans_on      # other exercises it may call: correct ones stand in while it is graded
        self.needs = needs            # teachspec modules the judge runs (the simulator): imported before the
                                      # sandbox starts, so that a slow import is not the student's time


PARTS = {
    "a1.residual": Part("residual", "the residual norm(max(0, p - q))", a1_residual),
    "a1.decisions": Part("speculative_step", "accept with min(1, p/q), a uniform each, stop at a rejection",
                         a1_decisions, ("residual",)),
    "a1.after_rejection": Part("speculative_step", "after a rejection, a token from the residual",
                               a1_after_rejection, ("residual",)),
    "a1.bonus": Part("speculative_step", "all accepted: the bonus token from p_k", a1_bonus, ("residual",)),
    "a2.match_insert": Part("Radix", "match_prefix and insert share prefixes", a2_match_insert),
    "a2.lru": Part("Radix", "evict removes the least recently used leaf first", a2_lru),
    "a2.locks": Part("Radix", "locked nodes survive eviction", a2_locks),
    "a2.cascade": Part("Radix", "whole nodes go, and parents left childless go too", a2_cascade),
    "a3.expected_speedup": Part("expected_speedup", "the expected speedup, Theorem 3.8", a3_expected_speedup),
    "a3.choose_k": Part("choose_k", "the best k in 0..k_max, the shorter on a tie", a3_choose_k,
                        ("expected_speedup",)),
    "a4.remove": Part("remove", "q without a token, renormalised", a4_remove),
    "a4.ranks_independent": Part("rank_acceptance", "h_r for children drawn independently: p' the residual",
                                 a4_ranks_independent, ("node_rule", "remove")),
    "a4.ranks_without_replacement": Part("rank_acceptance", "h_r without replacement: given the rejected draws",
                                         a4_ranks_without_replacement, ("node_rule", "remove")),
    "a4.verify_node": Part("verify_node", "one sampled step: the token leaving the node follows p", a4_verify_node,
                           ("node_rule", "remove")),
    "a5.reuse": Part("reused", "the prefix each request reuses from a cache that keeps everything", a5_reused),
    "a5.lpm": Part("lpm_order", "longest prefix match first, of prompt[:-1], ties by arrival", a5_lpm),
    "a5.dfs_subtrees": Part("dfs_order", "a depth-first order: every subtree runs back to back, prefixes first",
                            a5_dfs_subtrees),
    "a5.dfs_heaviest": Part("dfs_order", "the heaviest branch first, ties by the earliest arrival", a5_dfs_heaviest),
    "a5.best": Part("best_hit_rate", "the best hit rate of any order: each distinct prefix computed once", a5_best,
                    ("reused",)),
    "a6.confidence": Part("confidence", "a guess's confidence: the product of the draft's probabilities on its path",
                          a6_confidence),
    "a6.rerank": Part("rerank", "the nodes most confident guesses, ties to the first drawn, in their old order",
                      a6_rerank),
    "a6.grow": Part("grow", "each level expands the width most confident guesses of the level before", a6_grow,
                    ("confidence", "rerank")),
    "a6.mask": Part("tree_attention", "each node attends to itself and its ancestors, nothing else", a6_mask),
    "a6.positions": Part("tree_attention", "each node's position: the root's plus its depth", a6_positions),
    "a7.followers": Part("followers", "the token right after each occurrence of the pattern, counted", a7_followers),
    "a7.match": Part("longest_match", "the longest suffix, at most depth - 1 tokens, that something followed",
                     a7_match, ("followers",)),
    "a7.choice": Part("guess", "the most counted follower, ties to the smaller id, within k and the depth",
                      a7_choice, ("followers", "longest_match")),
    "a7.stop": Part("guess", "the guess stops before a path probability under min_prob", a7_stop,
                    ("followers", "longest_match")),
    "a8.match": Part("match", "the longest prefix a sent text shares, and the worker first sent it", a8_match),
    "a8.imbalanced": Part("imbalanced", "imbalanced when both max - min and max / min pass their thresholds",
                          a8_imbalanced),
    "a8.route": Part("route", "balance first, then the best match above the threshold, else the least loaded",
                     a8_route, ("match", "imbalanced")),
    "a8.simulated": Part("route", "in the simulator, every request goes where cache_aware sends it",
                         a8_simulated, ("match", "imbalanced"), ("teachspec.routing.simulate",)),
}

# What of teachspec an assignment's code may import where it is graded: module -> (file, the names copied from it).
# The handout uses them as given (`sample` in a1 and a4; a4 takes `residual` as assignment 1's answer).
OFFERS = {
    "a1": {"teachspec.sampling": ("sampling.py", ("sample",))},
    "a4": {"teachspec.sampling": ("sampling.py", ("sample",)),
           "teachspec.speculative": ("speculative/verify.py", ("residual",))},
}

# The correct versions that stand in for the other exercises a part's answer calls, as the code the sandbox runs:
# this file's references, copied by their source.
STAND_IN_SOURCES = (residual_of, torch_residual, speedup, torch_remove, reference_node_rule, common, reuse_of,
                    confidence_of, rerank_of, suffix_count, followers_of, match_of, shared_chars, sent_match,
                    imbalanced_of)
STAND_INS = """
residual = torch_residual
expected_speedup = speedup
remove = torch_remove
node_rule = reference_node_rule()
reused = lambda prompts, order: reuse_of(prompts, order)
confidence = confidence_of
rerank = lambda parents, tokens, confidences, nodes: rerank_of(parents, tokens, confidences, nodes)
followers = lambda sequences, pattern: followers_of(sequences, pattern)
longest_match = lambda sequences, context, depth: match_of(sequences, context, depth)
match = lambda sent, text: sent_match(sent, text)
imbalanced = lambda loads, abs_threshold, rel_threshold: imbalanced_of(loads, abs_threshold, rel_threshold)
"""


def run(spec: Part, answer: Remote, draws: Draws, hidden: bool) -> None:
    """One pass of a part's judge. An answer of a shape the judge cannot read (None where a pair belongs, a
    number where a list does) fails the part with what came back, not the grader with a TypeError."""
    try:
        spec.judge(answer, draws, hidden)
    except (CheckFailed, Raised, TimedOut, Died):
        raise
    except (TypeError, ValueError, IndexError, KeyError, AttributeError) as e:
        fail(f"{spec.answer} returned something of a shape the check cannot read ({type(e).__name__}: {e}). "
             f"Check what it returns against the exercise's description.", hidden=f"it returned an unreadable "
             f"answer ({type(e).__name__})")


def offers(part: str) -> dict[str, str]:
    """The narrow modules `part`'s code may import, as code: each offered function copied from teachspec's file."""
    root, out = Path(__file__).resolve().parents[1], {}
    for module, (file, names) in OFFERS.get(part.split(".")[0], {}).items():
        text = (root / file).read_text(encoding="utf-8")
        tree = ast.parse(text)
        kept = [ast.get_source_segment(text, node) for node in tree.body
                if isinstance(node, ast.FunctionDef) and node.name in names]
        out[module] = "from __future__ import annotations\n\nimport torch\n\n\n" + "\n\n\n".join(kept) + "\n"
    return out


def stand_ins() -> str:
    return "import torch\n\n\n" + "\n\n".join(inspect.getsource(f) for f in STAND_IN_SOURCES) + STAND_INS


def judge(part: str, code: Definitions, secret: bytes | None = None, limits: Limits = Limits(),
          denied: tuple[str, ...] = ()) -> str:
    """Judge one part of an assignment on the code `code` defines, run in a sandbox: its visible cases, then, given
    the course's `secret`, its hidden ones. Returns the verdict line; raises CheckFailed with what went wrong and
    its likely cause, never showing a hidden case."""
    if part not in PARTS:
        raise ValueError(f"part must be one of {sorted(PARTS)}, got {part!r}")
    spec = PARTS[part]
    for module in spec.needs:
        importlib.import_module(module)
    try:
        with Sandbox(code.code, offers(part), stand_ins(), spec.leans_on, limits, denied) as box:
            answer = box.answer(spec.answer)
            if answer is None:
                fail(f"{spec.answer} is not defined: write it in its exercise cell (a def or class at the top "
                     f"level of a cell is what is graded).", *box.notes[-3:], *code.notes)
            run(spec, answer, Draws(seed_of(part)), False)
            if secret is not None:
                try:
                    run(spec, answer, Draws(seed_of(part, secret, code.code)), True)
                except CheckFailed as e:
                    raise CheckFailed(wrap(f"{spec.answer} passes the visible cases of {part} ({spec.what}) but "
                                           f"not a hidden one{': ' + e.hidden if e.hidden else '.'}", *e.causes),
                                      e.causes, e.hidden) from None
    except (Raised, TimedOut, Died) as e:  # outside a call: reading an attribute, or the definitions themselves
        explain(spec.answer, (), e, None)
    return f"ok  {part}: {spec.what}" + (" (visible and hidden cases)" if secret is not None else "")
