"""The router's policies: from the request and the live loads to one replica, as vllm-router 0.1.17 decides.

Every policy sees what a router sees when a request comes in: its prompt (text, or token ids as the bench sends
it to vllm-router), its session key (the x-session-id header,
"" for none), how many requests each replica has in flight (`loads`, counted by the router itself: +1 when it
sends one, -1 when the answer is back) and which replicas are alive. It returns the replica's index.

The router keeps its workers in a list of its own, `order` (replica indices), and goes through it in that order:
round_robin counts along it, and every "least loaded" takes the first of equals in it. vllm-router 0.1.17 draws
that order anew each time it starts (its registry is a hash map keyed by random ids): measured here, one router
sent every request to replica 1 while the loads were even, the next one to replica 0. The default is 0, 1, 2, ...

    round_robin      a counter over the live replicas
    random           a live replica, uniformly
    power_of_two     two distinct live replicas at random, the less loaded (the first drawn on a tie): Mitzenmacher,
                     "The Power of Two Choices in Randomized Load Balancing" (2001), the longest queue falls from
                     log n / log log n to log log n
    consistent_hash  the ring of hashing.py over the session key; a dead owner's keys go to the first live replica
    cache_aware      SGLang's cache-aware load balancer, below

cache_aware, step by step (min and max over the live replicas' loads):

    1. imbalanced = (max - min) > balance_abs_threshold  and  max > min * balance_rel_threshold
       then the least loaded replica (the first of equals), and the text still goes into the tree;
    2. otherwise match the prompt against the approximate tree (approx_tree.py): rate = matched / prompt elements
       (tokens for a prompt of ids, as vllm-router 0.1.17 matches; characters for text, as sgl-router does);
       rate > cache_threshold: the replica holding where the match ends (cache affinity);
       else: the least loaded replica (vllm-router 0.1.17; `low_match="smallest_tree"` is sgl-router's older
       rule, the replica whose tree holds the fewest elements, "the most room");
    3. insert the prompt for the chosen replica; evict each replica's tree to max_tree_size elements.

The rules are vllm-router's src/policies/*.rs; the defaults are 0.1.17's (`vllm-router --help`): cache_threshold
0.3, balance_abs_threshold 64, balance_rel_threshold 1.5, max_tree_size 2**25 elements. With 64 requests of
slack, a closed loop of a few clients never trips the balance rule: the policy is then pure cache affinity plus
least-loaded for new prefixes. sgl-router's code defaults are 0.5 / 32 / 1.0001.
"""

from __future__ import annotations

import math

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from teachspec.routing import POLICIES
from teachspec.routing.approx_tree import ApproxTree, Prompt
from teachspec.routing.hashing import Ring, fbi_hash, session_key
from teachspec.validate import check_int

LOW_MATCH = ("least_loaded", "smallest_tree")


def default_urls(replicas: int) -> list[str]:
    """The replicas' URLs when none are given: what a ring hashes, so the live router's ports matter."""
    return [f"http://127.0.0.1:{8000 + i}" for i in range(replicas)]


def _least_loaded(live: list[int], loads: Sequence[int]) -> int:
    return min(live, key=lambda i: loads[i])  # min keeps the first of equals, as Rust's min_by_key does


def check_order(order: Sequence[int] | None, replicas: int) -> list[int]:
    """The router's worker order: a permutation of 0 .. replicas - 1 (None: that order)."""
    if order is None:
        return list(range(replicas))
    if (not all(isinstance(i, int) and not isinstance(i, bool) for i in order)
            or sorted(order) != list(range(replicas))):
        raise ValueError(f"order must list the replicas 0 .. {replicas - 1} once each (the router's worker order), "
                         f"got {list(order)!r}")
    return list(order)


class Policy:
    """A routing rule; `choose` may update the policy's own state (a counter, a tree)."""
    name: ClassVar[str]

    def __init__(self, replicas: int, order: Sequence[int] | None = None):
        self.replicas = check_int("replicas", replicas, 1)
        self.order = check_order(order, replicas)

    def _live(self, alive: Sequence[bool]) -> list[int]:
        """The live replicas, in the router's order."""
        live = [i for i in self.order if alive[i]]
        if not live:
            raise RuntimeError("every replica is down: there is nowhere to send the request")
        return live

    def choose(self, text: Prompt, key: str, loads: Sequence[int], alive: Sequence[bool]) -> int:
        """`text` is the prompt as the router gets it: a str, or token ids (a list of ints)."""
        raise NotImplementedError

    def remove(self, replica: int) -> None:
        """`replica` died: forget what the policy knew about it (only cache_aware knows anything)."""


class RoundRobin(Policy):
    name = "round_robin"

    def __init__(self, replicas: int, order: Sequence[int] | None = None):
        super().__init__(replicas, order)
        self.count = 0

    def choose(self, text, key, loads, alive):
        live = self._live(alive)
        self.count += 1
        return live[(self.count - 1) % len(live)]


class RandomChoice(Policy):
    name = "random"

    def __init__(self, replicas: int, seed: int = 0, order: Sequence[int] | None = None):
        super().__init__(replicas, order)
        self.rng = random.Random(seed)

    def choose(self, text, key, loads, alive):
        return self.rng.choice(self._live(alive))


class PowerOfTwo(Policy):
    name = "power_of_two"

    def __init__(self, replicas: int, seed: int = 0, order: Sequence[int] | None = None):
        super().__init__(replicas, order)
        self.rng = random.Random(seed)

    def choose(self, text, key, loads, alive):
        live = self._live(alive)
        if len(live) == 1:
            return live[0]
        a, b = self.rng.sample(live, 2)
        return a if loads[a] <= loads[b] else b


class ConsistentHash(Policy):
    name = "consistent_hash"

    def __init__(self, replicas: int, urls: Sequence[str] | None = None, order: Sequence[int] | None = None):
        super().__init__(replicas, order)
        self.urls = list(urls) if urls is not None else default_urls(replicas)
        if len(self.urls) != replicas:
            raise ValueError(f"urls must give one URL per replica ({replicas}), got {len(self.urls)}")
        self.ring = Ring(self.urls)  # every replica, dead or alive: the router keeps an unhealthy worker listed

    def choose(self, text, key, loads, alive):
        live = self._live(alive)
        owner = self.ring.lookup(hash_key(text, key))
        return owner if alive[owner] else live[0]


def hash_key(text: Prompt, key: str) -> str:
    """The string vllm-router hashes: the session header if sent, else the request itself (hash_key.rs). Without
    a session key a prompt of token ids is hashed here as its ids written out, which is not the router's own
    serialisation: only the session key's ring is checked against the router."""
    if key:
        return session_key(key)
    if not isinstance(text, str):
        text = " ".join(map(str, text))
    return f"request_hash:{fbi_hash(text):016x}" if len(text) > 100 else f"request:{text}"


@dataclass(frozen=True)
class CacheAwareConfig:
    """cache_aware's knobs, vllm-router 0.1.17's defaults."""
    cache_threshold: float = 0.3             # least match rate that routes by cache affinity (strictly above)
    balance_abs_threshold: int = 64          # loads may differ by this many requests before balance takes over...
    balance_rel_threshold: float = 1.5       # ...and also by this factor
    max_tree_size: int = 2 ** 25             # elements (tokens, or characters of text) per replica's tree
    low_match: str = "least_loaded"          # below the threshold: "least_loaded" (0.1.17) or "smallest_tree"

    def __post_init__(self) -> None:
        for name in ("cache_threshold", "balance_rel_threshold"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{name} must be a number, got {value!r}")
        if not 0 <= self.cache_threshold <= 1:
            raise ValueError(f"cache_threshold must be in [0, 1] (a fraction of the request's characters), got "
                             f"{self.cache_threshold}")
        check_int("balance_abs_threshold", self.balance_abs_threshold, 0)
        if self.balance_rel_threshold < 1:
            raise ValueError(f"balance_rel_threshold must be >= 1 (max load over min load), got "
                             f"{self.balance_rel_threshold}")
        check_int("max_tree_size", self.max_tree_size, 0)
        if self.low_match not in LOW_MATCH:
            raise ValueError(f"low_match must be one of {LOW_MATCH}, got {self.low_match!r}")


class CacheAware(Policy):
    name = "cache_aware"

    def __init__(self, replicas: int, order: Sequence[int] | None = None, **options):
        super().__init__(replicas, order)
        self.config = CacheAwareConfig(**options)
        self.tree = ApproxTree()
        self.decisions: list[str] = []  # per request: "balance", "affinity" or "low_match", for reports

    def imbalanced(self, loads: Sequence[int], live: list[int]) -> bool:
        c = self.config
        low, high = min(loads[i] for i in live), max(loads[i] for i in live)
        return high - low > c.balance_abs_threshold and high > low * c.balance_rel_threshold

    def choose(self, text, key, loads, alive):
        live = self._live(alive)
        if self.imbalanced(loads, live):
            pick, decision = _least_loaded(live, loads), "balance"
        else:
            match = self.tree.match(text)
            if match.rate > self.config.cache_threshold and match.worker is not None and alive[match.worker]:
                pick, decision = match.worker, "affinity"
            elif self.config.low_match == "smallest_tree":
                pick, decision = min(live, key=self.tree.size), "low_match"
            else:
                pick, decision = _least_loaded(live, loads), "low_match"
        self.decisions.append(decision)
        self.tree.insert(text, pick)
        self.tree.evict(self.config.max_tree_size)
        return pick

    def remove(self, replica: int) -> None:
        self.tree.remove(replica)


def make_policy(name: str, replicas: int, seed: int = 0, *, urls: Sequence[str] | None = None,
                order: Sequence[int] | None = None, **options) -> Policy:
    """A fresh policy called `name` (one of POLICIES) for `replicas` replicas.

    `seed` drives random and power_of_two; `urls` are the replicas' URLs, which place them on consistent_hash's
    ring; `order` is the router's worker order (the module docstring); `options` are cache_aware's CacheAwareConfig
    fields."""
    if name not in POLICIES:
        raise ValueError(f"name must be one of {POLICIES}, got {name!r}")
    check_int("seed", seed)
    if options and name != "cache_aware":
        raise ValueError(f"options {sorted(options)} are cache_aware's; {name} takes none")
    if name == "round_robin":
        return RoundRobin(replicas, order)
    if name == "random":
        return RandomChoice(replicas, seed, order)
    if name == "power_of_two":
        return PowerOfTwo(replicas, seed, order)
    if name == "consistent_hash":
        return ConsistentHash(replicas, urls, order)
    return CacheAware(replicas, order, **options)
