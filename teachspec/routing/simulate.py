"""Replay a workload through a router and N replicas' prefix caches: a forest of radix trees, one per replica.

RadixAttention (Zheng et al., arXiv:2312.07104) saves a prefill only where the prefix is cached, and with many
replicas that is only the replica a request lands on. This simulator replays the same requests a real cluster
gets (vLLM servers behind vllm-router) with the router's policies (policies.py) and one `RadixCache` per replica,
and counts the prompt tokens each replica finds cached. It runs in milliseconds, so the lecture can ask what a
benchmark cannot afford: 64 replicas, hundreds of tenants, every policy.

What a replica's cache does, after vLLM's prefix cache (its KV cache manager in v1):
    blocks   only whole blocks of `block_size` tokens are cached and matched (the RadixCache's page_size), one
             node per block as vLLM's chain of block hashes has it; a hit is at most the prompt less its last
             token, rounded down to whole blocks: vLLM always computes the last token, whose logits sample the
             first new token
    prefill  the prompt's whole blocks are cached as soon as the request starts (vLLM hashes a block as soon as
             it is computed), so a request that starts later on the same replica can already reuse them
    memory   `kv_blocks` blocks per replica; a running request holds its prompt's blocks (locked in the tree)
             and the blocks of its last partial prompt block and its new tokens (outside the tree, never shared);
             to make room, least recently used unlocked leaves go first, a block at a time. When everything is
             held, the request runs anyway (vLLM would queue it): size `kv_blocks` for `concurrency` requests
What the router does: the policy picks a live replica from the prompt, the session key and the loads, which are the
requests in flight on each replica as the router counts them. The prompt the router sees is the text
(`prompt="text"`, sgl-router's character tree) or its token ids (`prompt="tokens"`: vllm-router 0.1.17 matches
only prompts sent as ids, as the bench sends them).
When: a closed loop of `concurrency` clients, as the benchmark's client runs: the first `concurrency` requests
start at once, and each time one finishes the next one is sent. A request takes
        computed prompt tokens + DECODE_COST * max_new_tokens      (arbitrary units)
and replicas run their requests side by side without slowing each other. The model is crude on purpose: only the
order in which requests finish matters here, because it decides the loads the router sees.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from teachspec.events import EventLog, Health, ReplicaLog, Route
from teachspec.radix.tree import Node, RadixCache
from teachspec.routing import POLICIES
from teachspec.routing.policies import Policy, default_urls, make_policy
from teachspec.validate import check_int

if TYPE_CHECKING:  # only named here: importing workloads loads transformers, seconds a grader should not wait
    from teachspec.workloads import Encoder, Workload

DECODE_COST = 32      # a decode step costs about as much as prefilling a few dozen tokens: each reads all the weights
PROMPTS = ("text", "tokens")  # what the router may be sent: a request's text or its token ids
BENCH_KV_BLOCKS = 24  # blocks per replica for tenants() at 2 replicas: round robin must evict, cache_aware need not


@dataclass
class Arrival:
    """One request as the router and a replica see it."""
    id: int               # request number, in arrival order
    key: str              # session key the client sends (the x-session-id header): the tenant
    text: str             # prompt text: what a character router's approximate tree indexes
    tokens: list[int]     # prompt token ids: what a replica's cache indexes, and a token router's tree
    max_new_tokens: int


def arrivals(workload: Workload, encode: Encoder | None = None) -> list[Arrival]:
    """The workload's requests in order, tokenized (the bundled tokenizer by default)."""
    seqs = workload.tokens(encode)
    return [Arrival(i, job.tenant or "", job.prompt, seq, job.max_new_tokens)
            for i, (job, seq) in enumerate(zip(workload.requests, seqs))]


@dataclass
class Replay:
    """What simulate() found (teachspec.radix.schedule.Simulation is one cache's run of a queue)."""
    policy: str
    replicas: int
    routes: list[int]               # the replica of each arrival
    cached: list[int]               # the prompt tokens each arrival found cached
    prompt_tokens: int
    cached_tokens: int
    computed_tokens: int
    hit_rate: float                 # cached / prompt tokens
    per_replica: list[int]          # requests each replica served
    balance: float                  # the most requests on one replica over the mean (1.0: even)
    by_replica_hits: list[float]    # each replica's hit rate over the requests it served (0.0 for none)


# -- one replica: vLLM's prefix cache as a radix tree of blocks ---------------------------------------------------

@dataclass
class _Running:
    node: Node        # the deepest block of its prompt, locked until it finishes
    private: int      # blocks it holds outside the tree: its partial last prompt block and its new tokens


@dataclass
class ReplicaCache:
    """One replica's prefix cache: vLLM's blocks as a RadixCache, one node per block; see the module docstring."""
    index: int
    kv_blocks: int
    block_size: int
    events: EventLog | None = None
    cache: RadixCache = field(init=False)
    private: int = 0                                    # blocks held outside the tree by running requests
    running: dict[int, _Running] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # the cluster's log seen through this replica: every event of its tree stamped with `replica`
        self.cache = RadixCache(page_size=self.block_size,
                                events=None if self.events is None else ReplicaLog(self.events, self.index))

    def used(self) -> int:
        return self.cache.total_size // self.block_size + self.private

    def start(self, request: int, tokens: Sequence[int], max_new_tokens: int) -> int:
        """Run a request's prefill: returns the tokens it found cached, and caches its prompt's whole blocks."""
        b, n = self.block_size, len(tokens)
        match = self.cache.match_prefix(tokens[:n - 1], request)  # the last token always runs
        self.cache.lock(match.node, request)
        full = n - n % b
        private = -(-(n + max_new_tokens) // b) - full // b
        over = self.used() + (full - match.length) // b + private - self.kv_blocks
        if over > 0:
            self.cache.evict(over * b, request)
        node, length = match.node, match.length
        while length < full:  # one node per block, as vLLM chains its block hashes
            begin, length = length, length // b * b + b
            self.cache.insert(tokens[:length], tokens[:length], request)
            node = node.children[self._first(tokens, begin)]
        self.cache.lock(node, request)
        self.cache.unlock(match.node, request)
        self.running[request] = _Running(node, private)
        self.private += private
        return match.length

    def _first(self, tokens: Sequence[int], i: int):
        """How the tree files the run starting at tokens[i] among its siblings: its first page (token when 1)."""
        page = self.cache.page_size
        return tuple(tokens[i:i + page]) if page > 1 else tokens[i]

    def finish(self, request: int) -> None:
        done = self.running.pop(request)
        self.cache.unlock(done.node, request)
        self.private -= done.private


# -- the replay ---------------------------------------------------------------------------------------------------

def simulate(arrivals: Sequence[Arrival], replicas: int = 2, policy: str | Policy = "cache_aware", *,
             kv_blocks: int = 64, block_size: int = 32, concurrency: int = 4, kill: tuple[int, int] | None = None,
             seed: int = 0, urls: Sequence[str] | None = None, order: Sequence[int] | None = None,
             events: EventLog | None = None, prompt: str = "text", **options) -> Replay:
    """Route every arrival with `policy` and run it on its replica's cache; see the module docstring.

    `kill=(replica, at_request)`: that replica dies when request `at_request` arrives (policies stop choosing it
    and cache_aware forgets its tree). `urls` place the replicas on consistent_hash's ring (default
    http://127.0.0.1:8000, 8001, ...); `order` is the router's worker order, which breaks its ties (policies.py).
    `options` are cache_aware's (policies.CacheAwareConfig). With `events`,
    every replica's cache emits into it through a ReplicaLog, with a Health "up" per replica first, a Route per
    arrival and a Health "down" on the kill: the same log a real cluster's trace holds. `prompt` is what the router
    is given: "text" (each arrival's text) or "tokens" (its token ids, as the bench sends them to vllm-router).
    """
    if prompt not in PROMPTS:
        raise ValueError(f"prompt must be one of {PROMPTS} (what the router is sent), got {prompt!r}")
    for name, value in (("replicas", replicas), ("kv_blocks", kv_blocks), ("block_size", block_size),
                        ("concurrency", concurrency)):
        check_int(name, value, 1)
    if sorted(a.id for a in arrivals) != list(range(len(arrivals))):
        raise ValueError(f"arrivals must be numbered 0, 1, ..., {len(arrivals) - 1} (their order), as arrivals() "
                         f"numbers them; got ids {sorted(a.id for a in arrivals)[:8]}...")
    urls = list(urls) if urls is not None else default_urls(replicas)
    if len(urls) != replicas:
        raise ValueError(f"urls must give one URL per replica ({replicas}), got {len(urls)}")
    if kill is not None:
        dead, at = kill
        if replicas < 2 or not 0 <= dead < replicas or not 0 <= at < len(arrivals):
            raise ValueError(f"kill must be (replica in [0, {replicas}), request in [0, {len(arrivals)})) with "
                             f"another replica left alive, got {kill!r}")
    if isinstance(policy, str):
        router = make_policy(policy, replicas, seed, urls=urls, order=order, **options)
    elif isinstance(policy, Policy):
        if options or order is not None:
            made = sorted(options) + ["order"] * (order is not None)
            raise ValueError(f"options {made} configure a policy made here; give them to make_policy")
        router = policy
    else:
        raise TypeError(f"policy must be one of {POLICIES} or a Policy, got {type(policy).__name__}")

    fleet = [ReplicaCache(i, kv_blocks, block_size, events) for i in range(replicas)]
    alive, loads = [True] * replicas, [0] * replicas
    routes, cached = [0] * len(arrivals), [0] * len(arrivals)
    if events is not None:
        for i, url in enumerate(urls):
            events.emit(Health, -1, replica=i, url=url, state="up")
    finishing: list[tuple[float, int]] = []  # (time it finishes, request): the closed loop's clock

    def send(a: Arrival, now: float) -> None:
        if kill is not None and a.id == kill[1]:
            alive[kill[0]] = False
            router.remove(kill[0])
            if events is not None:
                events.emit(Health, -1, replica=kill[0], url=urls[kill[0]], state="down")
        r = router.choose(a.tokens if prompt == "tokens" else a.text, a.key, loads, alive)
        routes[a.id] = r
        loads[r] += 1
        if events is not None:
            events.emit(Route, a.id, replica=r, policy=router.name, key=a.key, prompt_tokens=len(a.tokens))
        cached[a.id] = fleet[r].start(a.id, a.tokens, a.max_new_tokens)
        heapq.heappush(finishing, (now + len(a.tokens) - cached[a.id] + DECODE_COST * a.max_new_tokens, a.id))

    def finish() -> float:
        now, done = heapq.heappop(finishing)
        loads[routes[done]] -= 1
        fleet[routes[done]].finish(done)
        return now

    queue = sorted(arrivals, key=lambda a: a.id)
    for a in queue[:concurrency]:
        send(a, 0.0)
    for a in queue[concurrency:]:
        send(a, finish())
    while finishing:
        finish()
    return _summary(router.name, replicas, arrivals, routes, cached)


def _summary(policy: str, replicas: int, arrivals: Sequence[Arrival], routes: list[int],
             cached: list[int]) -> Replay:
    prompt = [0] * replicas
    hit = [0] * replicas
    for a in arrivals:
        prompt[routes[a.id]] += len(a.tokens)
        hit[routes[a.id]] += cached[a.id]
    per_replica = [routes.count(r) for r in range(replicas)]
    total, found = sum(prompt), sum(hit)
    return Replay(policy, replicas, routes, cached, total, found, total - found, found / total, per_replica,
                      max(per_replica) * replicas / len(arrivals),
                      [h / p if p else 0.0 for h, p in zip(hit, prompt)])


def sweep(arrivals: Sequence[Arrival], replicas: Sequence[int] = (2, 4, 8, 16, 32, 64),
          policies: Sequence[str] = POLICIES, **settings) -> list[Replay]:
    """simulate() for every replica count and policy, the same arrivals and `settings` (kv_blocks, ...) each time.

    Without a `concurrency` setting the clients grow with the cluster, 2 per replica: with fewer clients than
    replicas, least-loaded choices pile onto the first idle replicas and balance says nothing. Where does
    cache-aware routing stop gaining over consistent hashing, and what does balance cost in hit rate? Compare
    `hit_rate` and `balance` across the results, e.g. as a table by (replicas, policy)."""
    return [simulate(arrivals, n, policy, **{"concurrency": 2 * n, **settings})
            for n in replicas for policy in policies]
