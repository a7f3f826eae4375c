"""Cache-aware scheduling: the order of a waiting queue decides how much of the radix cache it reuses.

RadixAttention keeps the KV of finished requests in a radix tree (tree.py) so a new request skips the prefill of
any prefix the tree holds. When the tree cannot hold everything, the ORDER in which waiting requests run matters:
requests that share a prefix and run back to back compute it once; interleave them with unrelated requests and LRU
eviction throws the prefix away in between, so it is computed again. SGLang (Zheng et al., "SGLang: Efficient
Execution of Structured Language Model Programs", arXiv:2312.07104, section 3) therefore ranks its waiting queue
with a cache-aware policy (python/sglang/srt/managers/schedule_policy.py):

    fcfs  first come, first served: arrival order. What vLLM and nano-vllm do; the baseline.
    lpm   longest prefix match first: rank by how many tokens each prompt would reuse from the cache right now
          (read with peek_prefix, which changes nothing), ties by arrival. Running a request changes the cache,
          so SGLang re-ranks at every scheduling step; it falls back to fcfs beyond 128 waiting requests, where a
          match per request per step costs more than the ranking saves.
    dfs   a depth-first walk of the radix tree of the waiting prompts, heaviest subtree first (a node's weight is
          the number of waiting requests below it), emitting each request when the walk reaches the end of its
          prompt.

Theorem 3.1 of the paper: for a batch of requests, visiting their radix tree in DFS order gives the best possible
hit rate whenever the cache holds at least the longest request. Why: in a DFS order, the longest prefix a request
shares with any request run before it is the prefix it shares with the one run just before it (a DFS finishes a
subtree before leaving it). That request's path is the most recently used, so LRU evicts everything else first,
and the budget fits one whole request; so every token of the tree is computed exactly once, the least any order
can do (`teachspec.workloads.best_hit_rate` counts it). The paper also shows longest-shared-prefix-first is
equivalent to DFS: once a subtree's first request has run, its siblings have the longest matches.

Two details the simulation keeps:
    A prompt's last token is never served from the cache: its logits are what sample the first new token, so it
    must run through the model (SGLang caps the match at len - 1). Hence `dfs` emits a request whose prompt ends
    at a node BEFORE the node's children: a longer prompt run afterwards reuses all of it, while run the other
    way round the shorter one would recompute its last token.
    SGLang's own dfs-weight walks the *cache* tree, hanging each waiting request on the deepest node it already
    matches, and re-ranks every step. This module walks the waiting prompts' own tree, the setting of Theorem 3.1:
    a plan made once for a batch. (Re-planning it after every request would weigh subtrees by the requests LEFT
    in them and hop between groups of equal size, evicting each group's prefix on the way.)

`replay` runs a fixed order and `simulate` runs a policy through a token-budgeted LRU cache, one request at a time,
with no model: match prompt[:-1], lock the match, evict LRU leaves to make room for the tokens the request
computes, insert the prompt, unlock. Generated tokens are not inserted (SGLang inserts prompt + output when a
request finishes), so chat workloads put the replies in the prompts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral

from teachspec.radix.tree import RadixCache
from teachspec.renamed import old_names
from teachspec.validate import check_int, plain_token_ids

SCHEDULES = ("fcfs", "lpm", "dfs")  # the orders a queue of requests may be served in

Prompt = tuple[int, ...]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens two sequences share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _as_prompts(prompts: Sequence[Sequence[int]]) -> list[Prompt]:
    """The prompts as tuples of token ids; an empty prompt or a non-integer token is refused."""
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence):
        raise TypeError(f"prompts must be a list of token-id lists, got {type(prompts).__name__}")
    out = []
    for i, p in enumerate(prompts):
        if isinstance(p, (str, bytes)) or not isinstance(p, Sequence):
            raise TypeError(f"prompts[{i}] must be a list of token ids, got {type(p).__name__}")
        if not p:
            raise ValueError(f"prompts[{i}] is empty: a request needs at least one prompt token")
        if plain_token_ids(p):
            out.append(tuple(p))
            continue
        for j, t in enumerate(p):
            if not isinstance(t, Integral) or isinstance(t, bool) or t < 0:
                raise ValueError(f"prompts[{i}][{j}] must be a non-negative int token id, got {t!r}")
        out.append(tuple(int(t) for t in p))
    return out


def _check_policy(policy: str) -> None:
    if policy not in SCHEDULES:
        raise ValueError(f"policy must be one of {list(SCHEDULES)}, got {policy!r}")


# -- ranking -----------------------------------------------------------------------------------------------------

def order(prompts: Sequence[Sequence[int]], policy: str, cache: RadixCache | None = None) -> list[int]:
    """The indices of `prompts` in the order `policy` would run them: one scheduling decision.

    `cache` is what lpm ranks against; it is only read (peek_prefix), never changed. fcfs and dfs rank by the
    prompts alone and do not look at it.
    """
    _check_policy(policy)
    if policy == "lpm" and cache is None:
        raise ValueError("policy='lpm' ranks requests by their longest match in a cache: pass cache=RadixCache(...) "
                         "(use 'fcfs' or 'dfs' to order without one)")
    if cache is not None and not isinstance(cache, RadixCache):
        raise TypeError(f"cache must be a RadixCache or None, got {type(cache).__name__}")
    return _order(_as_prompts(prompts), policy, cache)


def _order(prompts: list[Prompt], policy: str, cache: RadixCache | None) -> list[int]:
    if policy == "fcfs":
        return list(range(len(prompts)))
    if policy == "lpm":
        matched = [cache.peek_prefix(p[:-1]) for p in prompts]  # p[:-1]: the last token is never served
        return sorted(range(len(prompts)), key=lambda i: (-matched[i], i))
    return _dfs(prompts)


def _dfs(prompts: list[Prompt]) -> list[int]:
    """Depth-first over the radix tree of the prompts, heaviest child first, a node's own requests first.

    The tree is never built: a node is a group of requests, its edge ends where their prompts stop agreeing (the
    radix compression: one step per branching point, not per token), and its children are the group split by
    the next token."""
    out: list[int] = []
    stack = [list(range(len(prompts)))] if prompts else []  # each entry: the requests under one node, in arrival order
    while stack:
        group = stack.pop()
        depth = min(common_prefix(prompts[group[0]], prompts[i]) for i in group)  # where the node's edge ends
        out.extend(i for i in group if len(prompts[i]) == depth)  # prompts ending here run before the children
        children: dict[int, list[int]] = {}
        for i in group:
            if len(prompts[i]) > depth:
                children.setdefault(prompts[i][depth], []).append(i)
        # the heaviest subtree first, ties by the earliest arrival in it; pushed in reverse so it pops first
        stack.extend(sorted(children.values(), key=lambda g: (-len(g), g[0]), reverse=True))
    return out


# -- running an order through a cache ----------------------------------------------------------------------------

@dataclass(slots=True)
class Simulation:
    """What a run of the queue reused. Hit rate = tokens served from the cache / all prompt tokens."""
    order: list[int]       # request indices in the order they ran
    cached: list[int]      # cached[i]: prompt tokens of request i served from the cache (at most len - 1)
    prompt_tokens: int     # all prompts together
    budget: int            # the cache's size in tokens
    evicted_tokens: int    # tokens evicted to make room, over the whole run

    @property
    def hit_tokens(self) -> int:
        return sum(self.cached)

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens


def _new_cache(prompts: list[Prompt], budget: int) -> RadixCache:
    if not prompts:
        raise ValueError("prompts is empty: a simulation needs at least one request")
    check_int("budget", budget, 1)
    longest = max(len(p) for p in prompts)
    if budget < longest:
        raise ValueError(f"budget must be >= the longest prompt ({longest} tokens), got {budget}: a request's "
                         f"whole KV must fit in the cache while it runs")
    return RadixCache()


def _run(cache: RadixCache, prompt: Prompt, budget: int) -> int:
    """Prefill one request through the cache; returns the prompt tokens it reused."""
    match = cache.match_prefix(prompt[:-1])  # the last token always runs: its logits sample the first new token
    cache.lock(match.node)                   # the prefix being reused must survive the eviction below
    computed = len(prompt) - match.length    # tokens that need fresh KV slots, the last one included
    over = cache.total_size + computed - budget
    if over > 0:
        cache.evict(over)                    # LRU leaves first; locked nodes never go
    cache.insert(prompt, range(len(prompt)))  # the payload stands in for KV slot ids; duplicates are not stored
    cache.unlock(match.node)
    return match.length


def replay(prompts: Sequence[Sequence[int]], run_order: Sequence[int], budget: int) -> Simulation:
    """Run the prompts one at a time in `run_order` through an empty LRU cache of `budget` tokens."""
    seqs = _as_prompts(prompts)
    if sorted(run_order) != list(range(len(seqs))):
        raise ValueError(f"run_order must list every request index 0..{len(seqs) - 1} exactly once, "
                         f"got {list(run_order)}")
    cache = _new_cache(seqs, budget)
    cached = [0] * len(seqs)
    for i in run_order:
        cached[i] = _run(cache, seqs[i], budget)
    return Simulation(list(run_order), cached, sum(map(len, seqs)), budget, cache.metrics.evicted_tokens)


def simulate(prompts: Sequence[Sequence[int]], policy: str, budget: int) -> Simulation:
    """Serve the whole queue under `policy` through an empty LRU cache of `budget` tokens, one request at a time.

    lpm is re-ranked against the cache before every request, as SGLang's scheduler does at each step; fcfs and
    dfs depend on the prompts alone, so their order is planned once, when the batch arrives.
    """
    _check_policy(policy)
    seqs = _as_prompts(prompts)
    if policy != "lpm":
        return replay(seqs, _order(seqs, policy, None), budget)
    cache = _new_cache(seqs, budget)
    waiting, ran, cached = list(range(len(seqs))), [], [0] * len(seqs)
    while waiting:
        i = waiting.pop(_order([seqs[j] for j in waiting], "lpm", cache)[0])
        cached[i] = _run(cache, seqs[i], budget)
        ran.append(i)
    return Simulation(ran, cached, sum(map(len, seqs)), budget, cache.metrics.evicted_tokens)


__getattr__ = old_names(__name__, {"POLICIES": "SCHEDULES"}, globals())  # POLICIES: also the eviction orders
