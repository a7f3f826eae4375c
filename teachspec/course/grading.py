"""The graded parts of the four assignments, judged by code that trusts nothing the student's notebook can replace.

Each assignment is graded in parts, one property each, so that one bug costs its part and not the whole exercise:

    grade("a1.decisions", speculative_step)      # returns quietly, or raises CheckFailed naming the likely cause

`teachspec.course.checks.check(part, answer)` runs the same part on the cases a student sees. A hidden test runs it
on more cases, from this file read afresh, so that whatever the notebook replaced (`teachspec.course.checks`,
`teachspec.theory.optimal_k`, `teachspec.radix.RadixCache`, `torch.multinomial`, ...) does not reach it:

    from importlib.util import find_spec; from runpy import run_path
    run_path(find_spec("teachspec.course.grading").origin)["grade"]("a1.decisions", speculative_step)

Three rules make a part hold against a submission that tries to game it:

- Its expected answers come from this file alone: small plain-Python references (it imports nothing from
  teachspec), cases drawn from its own random numbers (`Draws`, SplitMix64), compared in plain Python.
- It refuses an answer that hands the exercise to teachspec's own implementation of it (`FORBIDDEN`): it follows
  what the answer can reach (its globals, closures, `__wrapped__`, methods and base classes) and compares every
  function it finds with the library's code compiled afresh from its files, and while the answer runs, the
  library's functions raise instead of answering.
- It grades one thing. The other exercises an answer calls (`speculative_step` calls `residual`, `choose_k` calls
  `expected_speedup`, `verify_node` calls `node_rule`) are replaced by correct ones while it is graded, and a part
  that judges one step of a rule takes the student's other steps as they are.

What no test inside the student's kernel can stop: code that rewrites Python itself there (the import system,
builtins, IPython's display of errors) or the installed files. Grade in a sandbox where teachspec is read-only
(INSTRUCTORS.md).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import itertools
import math
import sys
import textwrap
import types

import torch

WIDTH = 76  # with "CheckFailed: " in front, a line of the verdict fits the 90 columns nbgrader validate prints


class CheckFailed(AssertionError):
    """A part's verdict, worded for the student: which case failed, what was expected and the likely cause."""


def fail(*paragraphs: str) -> None:
    raise CheckFailed(wrap(*paragraphs))


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


def seed_of(part: str, hidden: bool) -> int:
    return int.from_bytes(hashlib.sha256(f"{part}/{'hidden' if hidden else 'visible'}".encode()).digest()[:8], "big")


# -- calling the student's code ----------------------------------------------------------------------------------

REFUSED = "teachspec's grader refused a call to "


def call(what: str, fn, *args, hints: dict | None = None):
    """fn(*args); an answer not written yet, a refused delegation or a crash becomes a verdict that says so (with a
    hint for the exception's type, from `hints`, where the likely cause is known)."""
    try:
        return fn(*args)
    except NotImplementedError:
        fail(f"{what} still raises NotImplementedError: you have not written it yet. Replace `raise "
             f"NotImplementedError()` in the exercise cell with your code, run that cell, then run this check again.")
    except RuntimeError as e:
        if str(e).startswith(REFUSED):
            fail(f"{what} called {str(e)[len(REFUSED):]}, teachspec's own answer to this exercise. The check grades "
                 f"your implementation: write the rule yourself (the library is there to read, not to call here).")
        raise
    except CheckFailed:
        raise
    except Exception as e:  # noqa: BLE001 -- any crash is the student's, reported with the case
        fail(f"{what} raised {type(e).__name__}: {e}", (hints or {}).get(type(e), ""))


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


def step(fn, p: list[list[float]], q: list[list[float]], draft: list[int], draws: Draws) -> list[int]:
    """One call of the student's speculative_step; its tokens as ints, checked for shape."""
    out = call("speculative_step", fn, torch.tensor(p, dtype=torch.float64), torch.tensor(q, dtype=torch.float64),
               torch.tensor(draft, dtype=torch.long), draws.generator())
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
    return [step(fn, p, q, [draws.pick(row) for row in q], draws) for _ in range(n)]


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
    return call("match_prefix", tree.match_prefix, tuple(tokens))[1]


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
            ZeroDivisionError: "The closed form (1 - alpha^(k+1)) / (1 - alpha) divides by zero at alpha = 1, where "
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
NODE_BUGS = ("no residual between siblings", "rejected token left in q", "last token from p, not the residual")


def without(q: list[float], x: int) -> list[float]:
    kept = [0.0 if y == x else v for y, v in enumerate(q)]
    return [v / sum(kept) for v in kept] if sum(kept) > 0 else kept


def chain(p, q, children, kind, update_p: bool = True, update_q: bool = True):
    """The chances and the final p' of the rule at one node, in plain floats; update_p / update_q off give the
    classic bugs' versions."""
    target, proposal, chances = list(p), list(q), []
    for x in children:
        chances.append(min(1.0, target[x] / proposal[x]) if proposal[x] > 0 else 0.0)
        if update_p:
            target = residual_of(target, proposal)
        if kind == "without_replacement" and update_q:
            proposal = without(proposal, x)
    return chances, target


def torch_remove(q: torch.Tensor, x: int) -> torch.Tensor:
    """q without token x, renormalised (all zeros when nothing is left): stands in for the student's `remove`."""
    kept = q.double().clone()
    kept[x] = 0.0
    return kept / kept.sum() if kept.sum() > 0 else kept


def reference_node_rule(bug: str | None = None):
    """The rule at one node on tensors, as teachspec.speculative.tree.verify_children computes it (a test checks
    that), with one of NODE_BUGS switched on (None: no bug). Returns node_rule(p, q, children, kind) ->
    (chances, final)."""
    if bug is not None and bug not in NODE_BUGS:
        raise ValueError(f"bug must be None or one of {NODE_BUGS}, got {bug!r}")

    def node_rule(p, q, children, kind):
        target, proposal, chances = p.double(), q.double(), []
        for x in children:
            chances.append(min(1.0, float(target[x] / proposal[x])) if proposal[x] > 0 else 0.0)
            if bug != "no residual between siblings":
                target = torch_residual(target, proposal)
            if kind == "without_replacement" and bug != "rejected token left in q":
                proposal = torch_remove(proposal, x)
        return chances, (p.double() if bug == "last token from p, not the residual" else target)

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


def node_cases(draws: Draws, kind: str, n: int) -> list[tuple[list[float], list[float], list[int]]]:
    """Small nodes, with zeros, their children drawn from q as a draft of this kind would draw them."""
    fixed = [([0.5, 1 / 3, 1 / 6], [0.25, 0.25, 0.5]), ([0.4, 0.35, 0.25], [0.2, 0.3, 0.5]),
             ([0.0, 0.7, 0.3, 0.0], [0.4, 0.1, 0.2, 0.3]), ([0.1, 0.6, 0.3], [0.5, 0.5, 0.0])]
    cases = []
    for i in range(len(fixed) + n):
        if i < len(fixed):
            p, q = fixed[i]
        else:
            vocab = 3 + draws.below(3)
            p, q = draws.distribution(vocab, draws.below(vocab - 1)), draws.distribution(vocab, draws.below(2))
        b = min(2 + draws.below(2), sum(v > 0 for v in q)) if kind == "without_replacement" else 2 + draws.below(2)
        children, left = [], list(q)
        for _ in range(b):
            x = draws.pick(left)
            children.append(x)
            if kind == "without_replacement":
                left = [0.0 if y == x else v for y, v in enumerate(left)]
        cases.append((p, q, children))
    return cases


def node_call(node_rule, p, q, children, kind):
    given_p, given_q = torch.tensor(p, dtype=torch.float64), torch.tensor(q, dtype=torch.float64)
    where = f"node_rule(p={fmt(p)}, q={fmt(q)}, children={children}, kind={kind!r})"
    out = written("node_rule", call("node_rule", node_rule, given_p, given_q, list(children), kind))
    if given_p.tolist() != list(p) or given_q.tolist() != list(q):
        fail(f"{where} changed p or q in place: work on copies (q.clone(), or p' = residual(...), which makes a new "
             f"tensor); the caller still needs them.")
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        fail(f"{where} must return (chances, final), got {out!r}.")
    chances = floats(out[0], "node_rule's chances")
    if len(chances) != len(children):
        fail(f"{where} returned {len(chances)} chances for {len(children)} children: one per child, in the order "
             f"tried.")
    return where, chances, floats(out[1], "node_rule's final")


def same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(close(x, y, 1e-9) for x, y in zip(a, b))


def a4_siblings(node_rule, draws: Draws, hidden: bool) -> None:
    for p, q, children in node_cases(draws, "independent", 60 if hidden else 12):
        where, chances, _ = node_call(node_rule, p, q, children, "independent")
        want, _ = chain(p, q, children, "independent")
        if not same(chances, want):
            named = ("That is what p gives every child: after each rejected child, p' must become the residual "
                     "norm(max(0, p' - q')), so that the next sibling is judged by the mass the rejected one had no "
                     "chance at. Otherwise that mass is offered twice."
                     if same(chances, chain(p, q, children, "independent", update_p=False)[0]) else "")
            fail(f"{where} (children drawn independently): expected chances {fmt(want)}, got {fmt(chances)}. Child "
                 f"j's chance is min(1, p'(x_j) / q'(x_j)) given the earlier children were rejected.", named)


def a4_without_replacement(node_rule, draws: Draws, hidden: bool) -> None:
    """Judges q' alone: the chances must follow q' with each rejected child removed, whether or not p' was
    updated (a missing residual is the siblings part's to charge)."""
    for p, q, children in node_cases(draws, "without_replacement", 60 if hidden else 12):
        where, chances, _ = node_call(node_rule, p, q, children, "without_replacement")
        right = chain(p, q, children, "without_replacement")[0]
        if same(chances, right) or same(chances, chain(p, q, children, "without_replacement", update_p=False)[0]):
            continue
        left_in = any(same(chances, chain(p, q, children, "without_replacement", update_p=u, update_q=False)[0])
                      for u in (True, False))
        named = ("That is what q gives every child: children drawn without replacement were drawn from q with the "
                 "earlier ones removed, so after a rejection q' must become norm(q' without that token), the "
                 "distribution the next child really came from." if left_in else "")
        fail(f"{where}: expected chances {fmt(right)}, got {fmt(chances)}. After each rejected child, q' loses that "
             f"token (renormalised) and p' becomes the residual.", named)


def a4_final(node_rule, draws: Draws, hidden: bool) -> None:
    """Judges the distribution of the token emitted when every child is rejected: the last p' of the chain the
    student's chances follow (the correct one, or p itself when p' is never updated, which the siblings part
    charges)."""
    cases = [c for c in node_cases(draws, "independent", 200 if hidden else 40)
             if not same(chain(*c, "independent")[0], chain(*c, "independent", update_p=False)[0])]
    for p, q, children in cases[:60 if hidden else 12]:  # cases whose chances tell which chain was followed
        right, stale = chain(p, q, children, "independent"), chain(p, q, children, "independent", update_p=False)
        where, chances, final = node_call(node_rule, p, q, children, "independent")
        want = stale[1] if same(chances, stale[0]) else right[1]
        if same(final, want):
            continue
        named = ("That is p itself: when every child is rejected, the token comes from the last residual p', "
                 "which has taken out the mass every rejected child already had its chance at."
                 if same(final, list(p)) else "")
        fail(f"{where}: every child rejected, the token must be drawn from the last p', expected final "
             f"{fmt(want)}, got {fmt(final)}.", named)


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
        counts, accepted = [0] * 4, 0
        for _ in range(n):
            children = [draws.pick(q)]
            second = q if kind == "independent" else [0.0 if y == children[0] else v for y, v in enumerate(q)]
            children.append(draws.pick(second))
            out = call("verify_node", verify_node, torch.tensor(p, dtype=torch.float64),
                       torch.tensor(q, dtype=torch.float64), children, kind, draws.generator())
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


# -- the parts ---------------------------------------------------------------------------------------------------

STEP = (("teachspec.speculative.verify", "verify"), ("teachspec.speculative.verify", "verify_batch"),
        ("teachspec.speculative.verify", "acceptance_probability"), ("teachspec.speculative.tree", "verify_tree"),
        ("teachspec.speculative.tree", "verify_children"), ("teachspec.course.harness", "buggy_rule"))
NODE = (("teachspec.course.grading", "reference_node_rule"), ("teachspec.speculative.tree", "verify_children"),
        ("teachspec.speculative.tree", "verify_tree"))
RADIX = (("teachspec.radix.tree", "RadixCache"),)


class Part:
    """One graded property of one exercise."""

    def __init__(self, answer: str, what: str, judge, leans_on: tuple[str, ...] = (),
                 forbidden: tuple[tuple[str, str], ...] = ()):
        self.answer = answer          # the student's name for what is graded
        self.what = what              # the property, as `ok` says it
        self.judge = judge            # judge(answer, draws, hidden) raises CheckFailed
        self.leans_on = leans_on      # other exercises it may call: correct ones stand in while it is graded
        self.forbidden = forbidden    # (module, name): teachspec's own answer to it


PARTS = {
    "a1.residual": Part("residual", "the residual norm(max(0, p - q))", a1_residual,
                        forbidden=(("teachspec.speculative.verify", "residual"),)),
    "a1.decisions": Part("speculative_step", "accept with min(1, p/q), a uniform each, stop at a rejection",
                         a1_decisions, ("residual",), STEP),
    "a1.after_rejection": Part("speculative_step", "after a rejection, a token from the residual",
                               a1_after_rejection, ("residual",), STEP),
    "a1.bonus": Part("speculative_step", "all accepted: the bonus token from p_k", a1_bonus, ("residual",), STEP),
    "a2.match_insert": Part("Radix", "match_prefix and insert share prefixes", a2_match_insert, forbidden=RADIX),
    "a2.lru": Part("Radix", "evict removes the least recently used leaf first", a2_lru, forbidden=RADIX),
    "a2.locks": Part("Radix", "locked nodes survive eviction", a2_locks, forbidden=RADIX),
    "a2.cascade": Part("Radix", "whole nodes go, and parents left childless go too", a2_cascade, forbidden=RADIX),
    "a3.expected_speedup": Part("expected_speedup", "the expected speedup, Theorem 3.8", a3_expected_speedup,
                                forbidden=(("teachspec.theory", "speedup"), ("teachspec.theory", "expected_tokens"))),
    "a3.choose_k": Part("choose_k", "the best k in 0..k_max, the shorter on a tie", a3_choose_k,
                        ("expected_speedup",), (("teachspec.theory", "optimal_k"),)),
    "a4.remove": Part("remove", "q without a token, renormalised", a4_remove,
                      forbidden=(("teachspec.speculative.tree", "_without"),)),
    "a4.siblings": Part("node_rule", "each later sibling judged by the residual p'", a4_siblings, ("remove",), NODE),
    "a4.without_replacement": Part("node_rule", "children drawn without replacement: q' loses the rejected",
                                   a4_without_replacement, ("remove",), NODE),
    "a4.final": Part("node_rule", "every child rejected: the token from the last p'", a4_final, ("remove",), NODE),
    "a4.verify_node": Part("verify_node", "one sampled step: the token leaving the node follows p", a4_verify_node,
                           ("node_rule", "remove"), NODE),
}

STAND_INS = {"residual": torch_residual, "expected_speedup": speedup, "remove": torch_remove,
             "node_rule": reference_node_rule()}


def grade(part: str, answer, hidden: bool = True) -> None:
    """Judge one part of an assignment; raises CheckFailed with what went wrong and its likely cause."""
    if part not in PARTS:
        raise ValueError(f"part must be one of {sorted(PARTS)}, got {part!r}")
    spec = PARTS[part]
    if answer is None:
        fail(f"{spec.answer} is not defined: run the exercise cell that defines it first.")
    culprit = delegates_to(answer, spec)
    if culprit:
        fail(f"{spec.answer} reaches {culprit}, teachspec's own answer to this exercise. The check grades your "
             f"implementation: write the rule yourself (the library is there to read, not to call here).")
    with standing_in(answer, spec.leans_on), refusing(spec.forbidden):
        spec.judge(answer, Draws(seed_of(part, hidden)), hidden)
    if not hidden:
        print(f"ok  {part}: {spec.what}")


# -- who is answering: delegation and stand-ins ------------------------------------------------------------------

def namespace(answer) -> dict | None:
    """The notebook's globals, where the student's functions and classes were defined."""
    if isinstance(answer, types.FunctionType):
        return answer.__globals__
    if isinstance(answer, type):
        return next((f.__globals__ for f in vars(answer).values() if isinstance(f, types.FunctionType)), None)
    return None


def codes(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from codes(const)


def fingerprint(code: types.CodeType) -> tuple:
    return getattr(code, "co_qualname", code.co_name), code.co_code, code.co_names


@functools.lru_cache(maxsize=None)
def pristine(module: str, name: str) -> frozenset:
    """The fingerprints of `name` (and every function inside it) in `module`, compiled afresh from its file, so
    that no replacement in the running kernel changes them."""
    origin = importlib.util.find_spec(module).origin
    with open(origin, encoding="utf-8") as f:
        top = compile(f.read(), origin, "exec", dont_inherit=True)
    return frozenset(fingerprint(c) for const in top.co_consts if isinstance(const, types.CodeType)
                     and const.co_name == name for c in codes(const))


def reach(answer, skip: tuple[str, ...]) -> list:
    """Everything the answer can call: the functions and classes it names (following modules, closures, defaults,
    `__wrapped__`, methods and base classes), descending only into the notebook's own code."""
    home, seen, todo, found = namespace(answer), set(), [(answer, ())], []
    while todo:
        obj, names = todo.pop()
        if obj is None or id(obj) in seen:
            continue
        seen.add(id(obj))
        found.append(obj)
        if isinstance(obj, types.ModuleType):
            for n in names:
                with contextlib.suppress(Exception):
                    todo.append((getattr(obj, n), names))
        elif isinstance(obj, types.FunctionType):
            todo.append((getattr(obj, "__wrapped__", None), ()))
            if obj.__globals__ is not home:
                continue  # library code: compared below, not followed
            used = tuple({n for c in codes(obj.__code__) for n in c.co_names})
            todo += [(obj.__globals__[n], used) for n in used if n in obj.__globals__ and n not in skip]
            todo += [(cell.cell_contents, used) for cell in obj.__closure__ or () if cell_full(cell)]
            todo += [(d, used) for d in (obj.__defaults__ or ()) + tuple((obj.__kwdefaults__ or {}).values())]
        elif isinstance(obj, type):
            todo += [(base, names) for base in obj.__bases__ if base is not object]
            if namespace(obj) is home:
                todo += [(member, names) for member in vars(obj).values()]
        elif isinstance(obj, (staticmethod, classmethod, types.MethodType)):
            todo.append((obj.__func__, names))
        elif isinstance(obj, property):
            todo += [(obj.fget, names), (obj.fset, names)]
        elif isinstance(obj, functools.partial):
            todo += [(obj.func, names), *[(a, names) for a in obj.args], *[(v, names) for v in obj.keywords.values()]]
        elif isinstance(obj, (list, tuple, set, frozenset)) and len(obj) < 1000:
            todo += [(item, names) for item in obj]
        elif isinstance(obj, dict) and len(obj) < 1000 and "__builtins__" not in obj:  # not a whole namespace
            todo += [(item, names) for item in obj.values()]
        elif not isinstance(obj, (types.BuiltinFunctionType, int, float, complex, str, bytes)):
            todo.append((type(obj), names))  # an instance: its class (a RadixCache kept in a global, say)
    return found


def cell_full(cell) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False


def delegates_to(answer, spec: Part) -> str | None:
    """The library function the answer hands the exercise to, if any."""
    prints = {}
    for module, name in spec.forbidden:
        prints.update(dict.fromkeys(pristine(module, name), f"{module}.{name}"))
    for obj in reach(answer, spec.leans_on):
        functions = [obj] if isinstance(obj, types.FunctionType) else [
            f for f in vars(obj).values() if isinstance(f, types.FunctionType)] if isinstance(obj, type) else []
        for f in functions:
            if fingerprint(f.__code__) in prints:
                return prints[fingerprint(f.__code__)]
        if isinstance(obj, types.FunctionType) and obj.__globals__ is namespace(answer):
            # a local `from teachspec... import <name>` inside the student's own function
            used = {n for c in codes(obj.__code__) for n in c.co_names}
            if any(n == "teachspec" or n.startswith("teachspec.") for n in used):
                hit = next((f"{m}.{n}" for m, n in spec.forbidden if n in used), None)
                if hit:
                    return hit
    return None


@contextlib.contextmanager
def standing_in(answer, names: tuple[str, ...]):
    """While one part is graded, the notebook's other exercises that it calls are replaced by correct ones, so
    that a bug in those costs their own part only."""
    home, saved = namespace(answer), {}
    try:
        for n in names:
            if home is not None and isinstance(home.get(n), types.FunctionType) and home[n].__globals__ is home:
                saved[n], home[n] = home[n], STAND_INS[n]
        yield
    finally:
        for n, f in saved.items():
            home[n] = f


HEAVY = {"teachspec.course.harness"}  # imports scipy: refused only when the notebook has imported it


def refusal(name: str) -> types.CodeType:
    source = f"def refused(*args, **kwargs):\n    raise RuntimeError({REFUSED + name!r})\n"
    return next(c for c in compile(source, "<grader>", "exec", dont_inherit=True).co_consts
                if isinstance(c, types.CodeType))


@contextlib.contextmanager
def refusing(forbidden: tuple[tuple[str, str], ...]):
    """While the answer runs, teachspec's own answers to the exercise raise instead of answering: a call that the
    walk in `reach` did not see (by a name built at run time, say) still cannot pass."""
    undo = []
    try:
        for module, name in forbidden:
            try:
                loaded = sys.modules.get(module) or (None if module in HEAVY else importlib.import_module(module))
                obj = getattr(loaded, name)
            except Exception:  # noqa: BLE001 -- nothing there to refuse
                continue
            prints = pristine(module, name)
            if isinstance(obj, types.FunctionType) and not obj.__code__.co_freevars and \
                    fingerprint(obj.__code__) in prints:
                undo.append((obj, "__code__", obj.__code__))
                obj.__code__ = refusal(f"{module}.{name}")
            elif isinstance(obj, type):
                for attr, member in list(vars(obj).items()):
                    if isinstance(member, types.FunctionType) and fingerprint(member.__code__) in prints:
                        undo.append((obj, attr, member))
                        refused = types.FunctionType(refusal(f"{module}.{name}"), {"__builtins__": __builtins__})
                        setattr(obj, attr, refused)
        yield
    finally:
        for target, attr, value in reversed(undo):
            setattr(target, attr, value)
