"""The assignments' checks: each runs a student's function on small cases and says which case failed, what was
expected and what came back, instead of a bare assertion.

A check called before the exercise is done (the function still raises NotImplementedError) says so and says
what to do next. Every failure is a `CheckFailed`, an AssertionError, so nbgrader and pytest count it as a fail.

    check_acceptance_rule(speculative_step)    assignment 1: the acceptance rule (Leviathan et al. 2023, Alg. 1)
    check_radix(MyRadix)                       assignment 2: match / insert / LRU evict, against RadixCache
    check_choose_k(choose_k)                   assignment 3: the best draft length (Theorem 3.8)
    check_remove(remove)                       assignment 4: q with a rejected child removed
    check_node_rule(node_rule)                 assignment 4: the multi-draft rule at one node, by exact enumeration
    check_multi_draft_step(verify_node)        assignment 4: one sampled step at a node
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable

import numpy as np
import torch

from teachspec import theory
from teachspec.radix import RadixCache


class CheckFailed(AssertionError):
    """A check's verdict, worded for the student."""


def _call(what: str, fn: Callable, *args):
    try:
        return fn(*args)
    except NotImplementedError:
        raise CheckFailed(f"{what} still raises NotImplementedError: you have not written it yet. Replace "
                          f"`raise NotImplementedError()` in the exercise cell with your code, run that cell, "
                          f"then run this check again.") from None


def _ok(name: str) -> None:
    print(f"ok  {name}")


# -- assignment 1: the acceptance rule -----------------------------------------------------------------------------

def _tokens(fn: Callable, p, q, draft, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    out = _call("speculative_step", fn, p, q, torch.tensor(draft, dtype=torch.long), g)
    out = [int(t) for t in (out.tolist() if isinstance(out, torch.Tensor) else out)]
    return out


def _frequencies(fn: Callable, p: torch.Tensor, q: torch.Tensor, k: int, n: int, seed: int, at: int = 0):
    """Empirical distribution of the emitted token at index `at`, drafts sampled from q (context-free rows)."""
    g = torch.Generator().manual_seed(seed)
    counts = np.zeros(p.shape[-1])
    seen = 0
    for trial in range(n):
        draft = torch.multinomial(q, 1, generator=g).squeeze(-1)  # (k,) one guess per row of q
        out = _tokens(fn, p, q, draft.tolist(), seed * 100_003 + trial)
        if len(out) > at:
            counts[out[at]] += 1
            seen += 1
    return counts / max(seen, 1), seen


def _close(name: str, got: np.ndarray, want: np.ndarray, n: int) -> None:
    se = np.sqrt(want * (1 - want) / max(n, 1))
    worst = int(np.argmax(np.abs(got - want) / np.maximum(se, 1e-9)))
    if abs(got[worst] - want[worst]) > 5 * se[worst] + 1e-9:
        raise CheckFailed(
            f"{name}: over {n} runs token {worst} came out with frequency {got[worst]:.3f}, but the target gives it "
            f"probability {want[worst]:.3f} (allowed: within {5 * se[worst]:.3f}). Whole distribution: expected "
            f"{np.round(want, 3).tolist()}, got {np.round(got, 3).tolist()}.")


def check_acceptance_rule(speculative_step: Callable, n: int = 3000) -> None:
    """speculative_step(p, q, draft, generator) -> emitted tokens: p (k+1, V), q (k, V), draft (k,) long."""
    def one_hot(i: int, v: int = 4) -> torch.Tensor:
        return torch.nn.functional.one_hot(torch.tensor(i), v).double()

    # 1. greedy: p and q one-hot. Accept a guess iff it is the target's argmax; at a miss emit the argmax.
    p = torch.stack([one_hot(1), one_hot(2), one_hot(3)])
    cases = [
        ("every guess right: k accepted plus the bonus", [1, 2], torch.stack([one_hot(1), one_hot(2)]), [1, 2, 3]),
        ("second guess wrong: one accepted, then the target's token", [1, 0], torch.stack([one_hot(1), one_hot(0)]),
         [1, 2]),
        ("first guess wrong", [3, 2], torch.stack([one_hot(3), one_hot(2)]), [1]),
    ]
    for name, draft, q, want in cases:
        got = _tokens(speculative_step, p, q, draft, seed=0)
        if got != want:
            raise CheckFailed(f"greedy case '{name}': p is one-hot on {[1, 2, 3]}, draft {draft}; expected the "
                              f"emitted tokens {want}, got {got}.")
    _ok("greedy cases (one-hot p and q)")
    # 2. a token the target never emits must never be accepted
    p0 = torch.tensor([[0.0, 0.5, 0.5, 0.0], [0.25] * 4], dtype=torch.float64)
    q0 = torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    for seed in range(20):
        got = _tokens(speculative_step, p0, q0, [0], seed)
        if got[0] == 0 or len(got) != 1:
            raise CheckFailed(f"p(0) = 0 but the draft guessed 0 (seed {seed}): it must be rejected and a token "
                              f"drawn from the residual norm(max(0, p - q)) instead; expected one token from "
                              f"{{1, 2}}, got {got}.")
    _ok("a token with p(x) = 0 is never accepted")
    # 3. the distribution: the first emitted token must follow p_0, whatever q is (Leviathan et al., Theorem 3.5)
    g = torch.Generator().manual_seed(1)
    V, k = 5, 2
    p = torch.softmax(1.5 * torch.randn(k + 1, V, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(1.5 * torch.randn(k, V, generator=g, dtype=torch.float64), -1)
    got, seen = _frequencies(speculative_step, p, q, k, n, seed=2)
    _close("first emitted token (draft from q, k = 2)", got, p[0].numpy(), seen)
    _ok("the first emitted token is distributed as p_0")
    # 4. the bonus: with q == p every guess is accepted and the extra token follows p_k
    got, seen = _frequencies(speculative_step, p, p[:k].clone(), k, n, seed=3, at=k)
    if seen < n:
        raise CheckFailed(f"with q == p every guess must be accepted (min(1, p/q) = 1), but {n - seen} of {n} runs "
                          f"emitted fewer than k + 1 = {k + 1} tokens.")
    _close("bonus token when q == p (it must come from p_k, the row after the last guess)", got, p[k].numpy(), seen)
    _ok("the bonus token is distributed as p_k")
    print("All checks passed.")


# -- assignment 2: the radix tree ----------------------------------------------------------------------------------

def _ops(rng: random.Random, n: int) -> list[tuple]:
    """A random but reproducible mix of inserts, matches and evictions over prompts that share prefixes."""
    stems = [tuple(rng.randrange(6) for _ in range(rng.randint(1, 5))) for _ in range(4)]
    ops = []
    for _ in range(n):
        seq = rng.choice(stems) + tuple(rng.randrange(6) for _ in range(rng.randint(0, 4)))
        r = rng.random()
        ops.append(("insert", seq) if r < 0.5 else ("match", seq) if r < 0.85 else ("evict", rng.randint(1, 6)))
    return ops


def check_radix(Radix: type, rounds: int = 30) -> None:
    """Radix() with match_prefix(tokens) -> (length, node), insert(tokens), evict(n) -> freed, size, and the
    given lock(node) / unlock(node); compared operation by operation with teachspec.radix.RadixCache."""
    # 1. the three small stories from the lecture
    t = _call("Radix()", Radix)
    _call("insert", t.insert, (1, 2, 3, 4))
    length, _ = _call("match_prefix", t.match_prefix, (1, 2, 9))
    if length != 2:
        raise CheckFailed(f"after insert (1, 2, 3, 4), match_prefix((1, 2, 9)) should find the shared prefix of "
                          f"length 2, got {length}.")
    _call("insert", t.insert, (1, 2, 5))
    if t.size != 5:
        raise CheckFailed(f"insert (1, 2, 3, 4) then (1, 2, 5) stores 4 + 1 = 5 tokens (the shared (1, 2) once), "
                          f"but size is {t.size}.")
    _ok("match and insert share prefixes")
    t = Radix()
    t.insert((1, 2, 3))
    t.insert((7, 8))
    t.match_prefix((1, 2, 3))  # (1, 2, 3) is now the most recently used
    freed = _call("evict", t.evict, 1)
    if freed != 2 or t.match_prefix((7, 8))[0] != 0 or t.match_prefix((1, 2, 3))[0] != 3:
        raise CheckFailed(f"insert (1, 2, 3), insert (7, 8), match (1, 2, 3), evict(1): the least recently used "
                          f"leaf (7, 8) must go, whole (2 tokens freed), and (1, 2, 3) stay; got freed={freed}.")
    _ok("evict removes the least recently used leaf")
    t = Radix()
    t.insert((1, 2, 3))
    _, node = t.match_prefix((1, 2, 3))
    t.lock(node)
    t.insert((5, 6))
    freed = t.evict(100)
    kept = t.match_prefix((1, 2, 3))[0]
    if kept != 3:
        raise CheckFailed(f"(1, 2, 3) is locked by a running request, then evict(100): a locked node must never be "
                          f"evicted, but afterwards match_prefix((1, 2, 3)) finds only {kept} tokens.")
    if freed != 2:
        raise CheckFailed(f"evict(100) with (1, 2, 3) locked and (5, 6) unlocked should free exactly the 2 tokens "
                          f"of (5, 6), got {freed}.")
    t.unlock(node)
    _ok("locked nodes survive eviction")
    # 2. random operations, compared with the reference implementation
    for r in range(rounds):
        rng = random.Random(r)
        mine, ref, history = Radix(), RadixCache(), []
        for op, arg in _ops(rng, 25):
            history.append((op, arg))
            if op == "insert":
                mine.insert(arg)
                ref.insert(arg, list(arg))
                got, want = mine.size, ref.total_size
                what = "size after"
            elif op == "match":
                got, want = mine.match_prefix(arg)[0], ref.match_prefix(arg).length
                what = "match length of"
            else:
                got, want = mine.evict(arg), ref.evict(arg)
                what = "tokens freed by"
            if got != want:
                steps = "\n  ".join(f"{o}{a}" for o, a in history[-8:])
                raise CheckFailed(f"random case {r}: {what} {op}{arg}: expected {want}, got {got}. The last "
                                  f"operations:\n  {steps}")
    _ok(f"{rounds} random sequences of insert / match / evict agree with RadixCache")
    print("All checks passed.")


# -- assignment 3: choosing k --------------------------------------------------------------------------------------

def check_choose_k(choose_k: Callable, k_max: int = 8) -> None:
    """choose_k(alpha, c, k_max) -> the k in 0..k_max with the largest expected speedup (Theorem 3.8)."""
    cases = [(0.8, 0.05), (0.6, 0.1), (0.9, 0.02), (0.3, 0.2), (0.1, 0.5), (0.95, 0.3), (0.5, 0.0), (0.99, 0.01)]
    for alpha, c in cases:
        got = _call("choose_k", choose_k, alpha, c, k_max)
        want = theory.optimal_k(alpha, c, k_max)
        if got != want:
            def s(k, alpha=alpha, c=c) -> float:
                return float(theory.speedup(alpha, int(k), c))

            extra = f" (its speedup {s(got):.3f}x)" if isinstance(got, int) and 0 <= got <= k_max else ""
            raise CheckFailed(f"alpha={alpha}, c={c}, k_max={k_max}: expected k={want} with speedup "
                              f"{s(want):.3f}x, got {got!r}{extra}. Speedup(k) = (1 - alpha^(k+1)) / "
                              f"((1 - alpha)(k c + 1)); remember k = 0 (plain decoding) is allowed.")
    _ok(f"{len(cases)} (alpha, c) pairs give the best k")
    print("All checks passed.")


# -- assignment 4: the multi-draft rule ----------------------------------------------------------------------------

KINDS = ("independent", "without_replacement")
NODE_BUGS = ("no residual between siblings", "rejected token left in q", "last token from p, not the residual")


def _f64(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def _fmt(values) -> list[float]:
    return [round(float(v), 4) for v in values]


def check_remove(remove: Callable) -> None:
    """remove(q, x) -> q with token x removed and renormalised; all zeros when nothing is left."""
    cases = [([0.5, 0.3, 0.2], 0, [0.0, 0.6, 0.4]), ([0.25, 0.25, 0.5], 2, [0.5, 0.5, 0.0]),
             ([0.0, 1.0, 0.0], 1, [0.0, 0.0, 0.0]), ([0.2, 0.0, 0.8], 1, [0.2, 0.0, 0.8])]
    for q, x, want in cases:
        given = _f64(q)
        got = _call("remove", remove, given, x)
        if not torch.equal(given, _f64(q)):
            raise CheckFailed(f"remove(q={q}, x={x}) changed q in place (it is now {_fmt(given)}): work on a copy, "
                              f"q.clone(); the caller still needs q.")
        got = torch.as_tensor(got, dtype=torch.float64)
        if got.shape != given.shape or not torch.allclose(got, _f64(want), atol=1e-12):
            extra = " When nothing is left, return all zeros: no child can be drawn." if not any(want) else ""
            raise CheckFailed(f"remove(q={q}, x={x}): expected {want}, got {_fmt(got.flatten())}.{extra}")
    _ok("remove")


def reference_node_rule(bug: str | None = None) -> Callable:
    """The rule at one node, as teachspec.speculative.tree.verify_children computes it, with one of the classic
    bugs switched on (None: no bug). Returns node_rule(p, q, children, kind) -> (chances, final)."""
    if bug is not None and bug not in NODE_BUGS:
        raise ValueError(f"bug must be None or one of {NODE_BUGS}, got {bug!r}")
    from teachspec.speculative import residual

    def node_rule(p, q, children, kind):
        target, proposal, chances = p.double(), q.double(), []
        for x in children:
            chances.append(min(1.0, float(target[x] / proposal[x])) if proposal[x] > 0 else 0.0)
            if bug != "no residual between siblings":
                target = residual(target, proposal)
            if kind == "without_replacement" and bug != "rejected token left in q":
                kept = proposal.clone()
                kept[x] = 0.0
                proposal = kept / kept.sum() if kept.sum() > 0 else kept
        return chances, (p.double() if bug == "last token from p, not the residual" else target)

    return node_rule


def children_law(q: list[float], b: int, kind: str) -> list[tuple[tuple[int, ...], float]]:
    """Every tuple of b children a draft can propose from q, with its probability: i.i.d. from q ("independent"),
    or x_1 from q, x_2 from q without x_1 renormalised, and so on ("without_replacement")."""
    vocab = len(q)
    if kind == "independent":
        return [(xs, math.prod(q[x] for x in xs)) for xs in itertools.product(range(vocab), repeat=b)
                if all(q[x] > 0 for x in xs)]
    out = [((), 1.0)]
    for _ in range(b):
        grown = []
        for xs, weight in out:
            left = [0.0 if x in xs else q[x] for x in range(vocab)]
            grown += [(xs + (x,), weight * left[x] / sum(left)) for x in range(vocab) if left[x] > 0]
        out = grown
    return out


def node_law(node_rule: Callable, p: list[float], q: list[float], b: int, kind: str) -> np.ndarray:
    """The exact law of the token that leaves a node, drafts and uniforms integrated out: every children tuple,
    weighted by its probability, and every decision weighted by its chance (accept child j with chances[j], given
    the earlier ones were rejected; every child rejected: a token from `final`)."""
    law = np.zeros(len(p))
    for xs, weight in children_law(q, b, kind):
        given_p, given_q = _f64(p), _f64(q)
        where = f"p={_fmt(p)}, q={_fmt(q)}, children={list(xs)}, kind={kind!r}"
        out = _call("node_rule", node_rule, given_p, given_q, list(xs), kind)
        if not torch.equal(given_p, _f64(p)) or not torch.equal(given_q, _f64(q)):
            raise CheckFailed(f"node_rule({where}) changed p or q in place: work on copies (p.clone(), or "
                              f"p' = residual(...), which makes a new tensor); the caller still needs them.")
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise CheckFailed(f"node_rule({where}) must return (chances, final), got {out!r}")
        chances, final = out
        chances = [float(c) for c in chances]
        if len(chances) != len(xs):
            raise CheckFailed(f"node_rule({where}) returned {len(chances)} chances for {len(xs)} children: one "
                              f"per child, in the order tried.")
        bad = [c for c in chances if not -1e-12 <= c <= 1 + 1e-12]
        if bad:
            raise CheckFailed(f"node_rule({where}): chances must be probabilities, got {_fmt(chances)}; a chance is "
                              f"min(1, p'(x) / q'(x)).")
        reach = weight  # the chance of these children, every child tried so far rejected
        for x, chance in zip(xs, chances):
            law[x] += reach * chance
            reach *= 1 - chance
        if reach > 1e-15:
            final = torch.as_tensor(final, dtype=torch.float64).flatten()
            if final.shape != (len(p),) or (final < -1e-12).any() or abs(float(final.sum()) - 1) > 1e-9:
                raise CheckFailed(f"node_rule({where}): final must be a distribution over the {len(p)} tokens, the "
                                  f"last p' (what the token is drawn from when every child is rejected), got "
                                  f"{final.tolist()}.")
            law += reach * final.numpy()
    return law


def _node_cases(rng: random.Random, rounds: int) -> list[tuple[list[float], list[float], int, str]]:
    """Small distributions with zeros, over 3 to 5 tokens, 1 to 3 children, both kinds."""
    def dist(vocab: int, zeros: int) -> list[float]:
        w = [rng.random() ** 2 for _ in range(vocab)]
        for i in rng.sample(range(vocab), zeros):
            w[i] = 0.0
        return [x / sum(w) for x in w]

    cases = []
    while len(cases) < rounds:
        vocab, b, kind = rng.randint(3, 5), rng.randint(1, 3), rng.choice(KINDS)
        q = dist(vocab, rng.randint(0, vocab - b if kind == "without_replacement" else vocab - 1))
        cases.append((dist(vocab, rng.randint(0, vocab - 1)), q, b, kind))
    return cases


FIXED_NODE_CASES = [
    ([0.5, 1 / 3, 1 / 6], [0.25, 0.25, 0.5], 2, "independent"),  # lecture 9's example
    ([0.5, 1 / 3, 1 / 6], [0.25, 0.25, 0.5], 2, "without_replacement"),
    ([0.4, 0.35, 0.25], [0.2, 0.3, 0.5], 3, "independent"),
    ([0.4, 0.35, 0.25], [0.2, 0.3, 0.5], 3, "without_replacement"),
    ([0.0, 0.7, 0.3, 0.0], [0.4, 0.1, 0.2, 0.3], 2, "without_replacement"),  # zeros in p
    ([0.1, 0.6, 0.3], [0.5, 0.5, 0.0], 2, "independent"),  # zeros in q: the residual must supply token 2
]


def _diagnose(law: np.ndarray, p, q, b, kind) -> str:
    """Name the classic bug whose law this is, when it is one."""
    for bug in NODE_BUGS:
        if np.allclose(node_law(reference_node_rule(bug), p, q, b, kind), law, atol=1e-9):
            return {
                "no residual between siblings": " That is exactly the law you get when p' is not replaced by the "
                "residual norm(max(0, p' - q')) after each rejected child: the next sibling is judged by p again, "
                "and the mass the rejected one already had its chance at is offered twice.",
                "rejected token left in q": " That is exactly the law you get when children drawn without "
                "replacement are judged by q as if drawn independently: after a rejection, q' must become "
                "norm(q' with that token removed), the distribution the next child was really drawn from.",
                "last token from p, not the residual": " That is exactly the law you get when the token emitted "
                "after every child was rejected comes from the original p instead of the last residual p'.",
            }[bug]
    return ""


def check_node_rule(node_rule: Callable, rounds: int = 40, seed: int = 0) -> None:
    """node_rule(p, q, children, kind) -> (chances, final); the token leaving the node must follow p exactly."""
    # 1. the numbers of one small case, by hand
    p, q = [0.5, 0.3, 0.2], [0.2, 0.3, 0.5]
    chances, final = _call("node_rule", node_rule, _f64(p), _f64(q), [2, 2], "independent")
    if len(chances) != 2 or abs(float(chances[0]) - 0.4) > 1e-9:
        raise CheckFailed(f"p={p}, q={q}, children [2, 2], independent: the first child's chance is "
                          f"min(1, p(2) / q(2)) = min(1, 0.2 / 0.5) = 0.4; got chances {chances!r}.")
    if abs(float(chances[1])) > 1e-9:
        raise CheckFailed(f"p={p}, q={q}, children [2, 2], independent: after the first child (token 2) is "
                          f"rejected, p' = norm(max(0, p - q)) = [1, 0, 0], so the second child (token 2 again) has "
                          f"chance p'(2) / q(2) = 0; got {float(chances[1]):.4f}. Update p' after every rejection.")
    if not torch.allclose(torch.as_tensor(final, dtype=torch.float64).flatten(), _f64([1.0, 0.0, 0.0]), atol=1e-9):
        raise CheckFailed(f"p={p}, q={q}, children [2, 2]: when both are rejected the token comes from the last "
                          f"residual p' = [1, 0, 0]; got final {_fmt(torch.as_tensor(final).flatten())}.")
    p = [0.4, 0.35, 0.25]
    chances, _ = node_rule(_f64(p), _f64(q), [2, 1], "without_replacement")
    if len(chances) != 2 or abs(float(chances[0]) - 0.5) > 1e-9 or abs(float(chances[1]) - 1 / 3) > 1e-9:
        raise CheckFailed(f"p={p}, q={q}, children [2, 1] drawn without replacement: expected chances [0.5, 0.3333]: "
                          f"min(1, 0.25 / 0.5) for token 2; then p' = norm(max(0, p - q)) = [0.8, 0.2, 0] and, "
                          f"token 2 removed, q' = [0.4, 0.6, 0], so min(1, 0.2 / 0.6) for token 1. Got "
                          f"{_fmt(chances)}.")
    _ok("the chances and the residual of one small case")
    # 2. the law, exactly, over every draft and every decision
    cases = FIXED_NODE_CASES + _node_cases(random.Random(seed), rounds)
    for n, (p, q, b, kind) in enumerate(cases):
        law = node_law(node_rule, p, q, b, kind)
        worst = int(np.argmax(np.abs(law - np.array(p))))
        if abs(law[worst] - p[worst]) > 1e-9:
            raise CheckFailed(
                f"case {n}: p={_fmt(p)}, q={_fmt(q)}, {b} children, kind={kind!r}. Over every set of children the "
                f"draft can propose and every accept/reject decision, the token leaving the node must follow p "
                f"exactly, but token {worst} comes out with probability {law[worst]:.6f} instead of "
                f"{p[worst]:.6f} (whole law {_fmt(law)}).{_diagnose(law, p, q, b, kind)}")
    _ok(f"{len(cases)} nodes: the token leaving the node follows p exactly, for both kinds of children")
    print("All checks passed.")


def check_multi_draft_step(verify_node: Callable, n: int = 3000, seed: int = 0) -> None:
    """verify_node(p, q, children, kind, generator) -> (index of the accepted child or None, token)."""
    p, q = _f64([0.45, 0.3, 0.15, 0.1]), _f64([0.1, 0.2, 0.3, 0.4])
    for kind in KINDS:
        g = torch.Generator().manual_seed(seed)
        counts, accepted = np.zeros(4), 0
        for _ in range(n):
            children = torch.multinomial(q, 2, replacement=kind == "independent", generator=g).tolist()
            out = _call("verify_node", verify_node, p.clone(), q.clone(), children, kind, g)
            index, token = out
            if index is not None:
                accepted += 1
                if token != children[index]:
                    raise CheckFailed(f"verify_node returned child index {index} (token {children[index]}) of "
                                      f"{children} as accepted, but token {token}: an accepted child's token is "
                                      f"what the node emits.")
            counts[int(token)] += 1
        _close(f"the token leaving the node, children {kind}", counts / n, p.numpy(), n)
        if not 0 < accepted < n:
            raise CheckFailed(f"{kind}: {accepted} of {n} steps accepted a child; with these p and q some steps "
                              f"must accept one and some must reject both.")
    _ok("one sampled step: the token leaving the node follows p, for both kinds of children")
    print("All checks passed.")
