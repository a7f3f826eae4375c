"""What more than one lecture does, written once: printing a tree of guesses, placing emitted tokens on [0, 1) to
test them against p, and timing one target pass over a tree.

    show_tree(tree, label)                         lectures 9 and 11: a TokenTree as an indented list
    where_on_p(pair, prompt, tokens, seed)         lectures 10 and 11: the probability integral transform
    tree_pass_ms(pair, context, cache, n)          lecture 10 and its appendix: one pass over n nodes, in ms
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from teachspec import kv
from teachspec.speculative.tree import TokenTree


def show_tree(tree: TokenTree, label: Callable[[int], str]) -> None:
    """Print the tree as an indented list, each node with its number (node 0 is the root), one indent a depth."""
    def walk(node: int) -> None:
        print("    " * tree.depth[node] + f"[{node}] {label(node)}")
        for child in tree.children[node]:
            walk(child)
    walk(0)


def where_on_p(pair, prompt: list[int], tokens: list[int], seed: int) -> list[float]:
    """Each emitted token's point on [0, 1): the target's tokens laid end to end, likeliest first, and a uniform
    point within the emitted token's own stretch. If the tokens were drawn from p (temperature 1), the points are
    uniform on [0, 1) whatever p looks like: the probability integral transform, which turns "is this sample from
    p?" into "are these points uniform?", a test one chi-square over a few bins answers."""
    V = pair.vocab_size
    logits = kv.forward(pair.target, prompt + tokens[:-1], kv.new_cache(pair.target), len(tokens), V)  # (n, V)
    p_at = torch.softmax(logits.double(), -1)  # (n, V): the target's p at each emitted position, temperature 1
    own = p_at[torch.arange(len(tokens)), tokens]  # (n,)
    before = (p_at * (p_at > own[:, None])).sum(-1)  # (n,) the mass of the tokens ranked above the emitted one
    u = torch.rand(len(tokens), generator=torch.Generator().manual_seed(10_000 + seed), dtype=torch.float64)
    return (before + u * own).tolist()  # a generator of its own: never the one that sampled the tokens


def tree_pass_ms(pair, context: list[int], cache, n: int) -> float:
    """One target pass over a tree of n nodes on top of `cache` (which holds all of `context` but its last token,
    the root), in ms; the nodes are then forgotten. Any shape of n nodes costs the same: this one is the root and
    n - 1 children."""
    parents = (-1,) + (0,) * (n - 1)
    tokens = (context[-1],) + tuple(range(10, 9 + n))
    start = time.perf_counter()
    kv.forward_tree(pair.target, context, parents, tokens, cache, pair.vocab_size)
    ms = 1e3 * (time.perf_counter() - start)
    kv.crop_to(cache, len(context) - 1)
    return ms
