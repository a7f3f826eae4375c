"""The assignments' checks, as a student runs them: each graded part of an exercise on a few cases, saying which
case failed, what was expected, what came back and the likely cause, instead of a bare assertion.

    check("a1.decisions", speculative_step)    one graded part (the names are in grading.PARTS)

    check_acceptance_rule(speculative_step)    assignment 1: every part of the acceptance rule
    check_radix(Radix)                         assignment 2: match / insert, LRU order, locks, cascading eviction
    check_choose_k(choose_k)                   assignment 3: the best draft length (Theorem 3.8)
    check_remove(remove)                       assignment 4: q with a rejected child removed
    check_rank_acceptance(rank_acceptance)     assignment 4: h_r, the acceptance of each rank of children
    check_multi_draft_step(verify_node)        assignment 4: one sampled step at a node
    check_dfs_order(dfs_order)                 assignment 5: the depth-first order, heaviest branch first
    check_dynamic_tree(grow)                   assignment 6: EAGLE-2's greedy dynamic tree
    check_tree_attention(tree_attention)       assignment 6: the mask and positions of the pass that checks it
    check_followers(followers)                 assignment 7: the followers of a pattern, counted
    check_longest_match(longest_match)         assignment 7: the longest suffix of the context something followed
    check_suffix_guess(guess)                  assignment 7: the chain guessed from it, and where it stops
    check_match(match)                         assignment 8: the longest prefix a sent text shares, and its worker
    check_imbalanced(imbalanced)               assignment 8: the router's balance rule
    check_route(route)                         assignment 8: the cache-aware rule, and in the simulator

The judging is teachspec.course.grading's, on the code of the notebook's cells run in a sandbox
(teachspec.course.sandbox): in a notebook, the cells this kernel ran, in the order it ran them; elsewhere, the
file that defines the answer. So a check sees what grading will see: teachspec's own answers cannot be imported
there, and a function that never returns fails its part after `grading.Limits.seconds`. Grading runs the same
parts on more cases, hidden, from the notebook's file, outside any kernel (teachspec.course.autograde); while it
does, the checks in the notebook's own run say so and do nothing (GRADED_OUTSIDE).

A check called before the exercise is done (the function still raises NotImplementedError) says so and says what
to do next. Every failure is a `CheckFailed`, an AssertionError, so nbgrader and pytest count it as a fail.
"""

from __future__ import annotations

import inspect
import linecache
import os
from collections.abc import Callable
from pathlib import Path

from teachspec.course.definitions import Definitions, from_sources
from teachspec.course.grading import KINDS, PARTS, CheckFailed, judge, reference_node_rule

GRADED_OUTSIDE = "TEACHSPEC_GRADED_OUTSIDE"  # set by the autograder for the notebook's run: the verdicts are its own

__all__ = ["GRADED_OUTSIDE", "KINDS", "PARTS", "CheckFailed", "check", "code_of", "check_acceptance_rule",
           "check_choose_k", "check_dfs_order", "check_dynamic_tree", "check_followers", "check_longest_match",
           "check_multi_draft_step", "check_radix", "check_rank_acceptance", "check_remove", "check_suffix_guess",
           "check_tree_attention", "check_match", "check_imbalanced", "check_route", "reference_node_rule"]


def check(part: str, answer) -> None:
    """Run one graded part on the cases a student sees: prints `ok  PART: ...`, or raises CheckFailed. `answer` is
    the student's function or class; what is judged is the code that defines it, run apart."""
    if os.environ.get(GRADED_OUTSIDE) == "1":
        print(f"{part}: graded outside this notebook's run, from its file")
        return
    print(judge(part, code_of(answer)))


def code_of(answer) -> Definitions:
    """The code that defines `answer`: in IPython, every cell this kernel ran, in order; else its file."""
    try:
        from IPython import get_ipython
    except ImportError:
        get_ipython = None
    shell = get_ipython() if get_ipython is not None else None
    if shell is not None:
        return from_sources(_cells_run(shell))
    try:
        return from_sources([Path(inspect.getsourcefile(answer)).read_text(encoding="utf-8")])
    except (TypeError, OSError):
        raise ValueError(f"the code that defines {answer!r} is not in a file or a notebook: check it from one")



def _cells_run(shell) -> list[str]:
    """The cells this kernel ran, in order. The history has them when the front end stores it (JupyterLab, nbgrader);
    a front end that runs cells with store_history=False (nbval) leaves it empty, but IPython's compiler still
    keeps every cell it compiled, under a name, in the order first seen (the linecache its tracebacks read)."""
    history = getattr(shell, "history_manager", None)
    cells = list(history.input_hist_raw)[1:] if history is not None else []
    if cells:
        return cells
    names = getattr(getattr(shell, "compile", None), "_filename_map", {})
    return ["".join(linecache.cache[name][2]) for name in names if name in linecache.cache]

def _parts(prefix: str, answer, *names: str) -> None:
    for name in names:
        check(f"{prefix}.{name}", answer)
    print("All checks passed.")


def check_acceptance_rule(speculative_step: Callable) -> None:
    """speculative_step(p, q, draft, generator) -> emitted tokens: p (k+1, V), q (k, V), draft (k,) long."""
    _parts("a1", speculative_step, "decisions", "after_rejection", "bonus")


def check_radix(Radix: type) -> None:
    """Radix() with match_prefix(tokens) -> (length, node), insert(tokens), evict(n) -> freed, size, and the given
    lock(node) / unlock(node)."""
    _parts("a2", Radix, "match_insert", "lru", "locks", "cascade")


def check_choose_k(choose_k: Callable) -> None:
    """choose_k(alpha, c, k_max) -> the k in 0..k_max with the largest expected speedup (Theorem 3.8)."""
    _parts("a3", choose_k, "choose_k")


def check_remove(remove: Callable) -> None:
    """remove(q, x) -> q with token x removed and renormalised; all zeros when nothing is left."""
    check("a4.remove", remove)


def check_rank_acceptance(rank_acceptance: Callable) -> None:
    """rank_acceptance(p, q, b, kind) -> [h_0, ..., h_(b-1)]: the chance that the child tried r-th is accepted,
    given that the r before it were rejected."""
    _parts("a4", rank_acceptance, "ranks_independent", "ranks_without_replacement")


def check_multi_draft_step(verify_node: Callable) -> None:
    """verify_node(p, q, children, kind, generator) -> (index of the accepted child or None, token)."""
    _parts("a4", verify_node, "verify_node")


def check_dfs_order(dfs_order: Callable) -> None:
    """dfs_order(prompts) -> request indices in a depth-first order of their radix tree, heaviest branch first."""
    _parts("a5", dfs_order, "dfs_subtrees", "dfs_heaviest")


def check_dynamic_tree(grow: Callable) -> None:
    """grow(draft, root, width, depth, nodes) -> (parents, tokens): EAGLE-2's greedy dynamic tree."""
    _parts("a6", grow, "grow")


def check_tree_attention(tree_attention: Callable) -> None:
    """tree_attention(parents) -> (mask, positions): who each node attends to, and each node's position."""
    _parts("a6", tree_attention, "mask", "positions")


def check_followers(followers: Callable) -> None:
    """followers(sequences, pattern) -> {token: count}: the token right after each occurrence of the pattern."""
    _parts("a7", followers, "followers")


def check_longest_match(longest_match: Callable) -> None:
    """longest_match(sequences, context, depth) -> m: the longest suffix of the context, at most depth - 1 tokens,
    that something followed in the sequences (0: none)."""
    _parts("a7", longest_match, "match")


def check_suffix_guess(guess: Callable) -> None:
    """guess(sequences, context, depth, k, min_prob) -> tokens: the chain of most counted followers from the
    longest match, stopped by k, the depth and min_prob."""
    _parts("a7", guess, "choice", "stop")


def check_match(match: Callable) -> None:
    """match(sent, text) -> (length, worker): the longest prefix of text that a sent (text, worker) pair's text
    shares, and the worker of the first such pair; (0, None) when none shares a character."""
    _parts("a8", match, "match")


def check_imbalanced(imbalanced: Callable) -> None:
    """imbalanced(loads, abs_threshold, rel_threshold) -> bool: max - min > abs_threshold and max > min *
    rel_threshold."""
    _parts("a8", imbalanced, "imbalanced")


def check_route(route: Callable) -> None:
    """route(text, sent, loads, cache_threshold, abs_threshold, rel_threshold) -> worker: cache_aware's rule, on
    cases and as the simulator's router."""
    _parts("a8", route, "route", "simulated")
