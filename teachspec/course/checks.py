"""The assignments' checks: each runs a student's function on small cases and says which case failed, what was
expected and what came back, instead of a bare assertion.

A check called before the exercise is done (the function still raises NotImplementedError) says so and says
what to do next. Every failure is a `CheckFailed`, an AssertionError, so nbgrader and pytest count it as a fail.

    check_acceptance_rule(speculative_step)    assignment 1: the acceptance rule (Leviathan et al. 2023, Alg. 1)
    check_radix(MyRadix)                       assignment 2: match / insert / LRU evict, against RadixCache
    check_choose_k(choose_k)                   assignment 3: the best draft length (Theorem 3.8)
"""

from __future__ import annotations

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
