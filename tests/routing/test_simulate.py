"""The simulator against a brute-force count of whole-block hits, its memory budget, a killed replica, its event log
round trip, and cache_aware against round robin on tenants() when round robin must evict."""

import random

import pytest

from teachspec import workloads as W
from teachspec.events import EventLog, Evict, Health, Insert, Route
from teachspec.radix.tree import RadixCache
from teachspec.routing import POLICIES
from teachspec.routing import simulate as S
from teachspec.routing.policies import make_policy
from teachspec.routing.simulate import Arrival, arrivals, simulate, sweep

BLOCK = 8


def synthetic(n=60, tenants=4, seed=0) -> list[Arrival]:
    """Requests of a few tenants: a tenant's long random prefix, then a short random tail of its own."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(1000) for _ in range(rng.randrange(20, 60))] for _ in range(tenants)]
    out = []
    for i in range(n):
        t = rng.randrange(tenants)
        tokens = prefixes[t] + [rng.randrange(1000) for _ in range(rng.randrange(1, 30))]
        out.append(Arrival(i, f"tenant {t}", " ".join(map(str, tokens)), tokens, rng.randrange(1, 6)))
    return out


def reference_hits(items: list[Arrival], routes: list[int], block: int) -> list[int]:
    """Whole-block hits with unbounded memory, from sets of cached block prefixes: the longest run of whole blocks
    of the prompt less its last token that this replica has seen, and then every whole block of the prompt."""
    seen = [set() for _ in range(max(routes) + 1)]
    hits = []
    for a in items:
        blocks = seen[routes[a.id]]
        k = (len(a.tokens) - 1) // block
        while k and tuple(a.tokens[:k * block]) not in blocks:
            k -= 1
        hits.append(k * block)
        blocks.update(tuple(a.tokens[:j * block]) for j in range(1, len(a.tokens) // block + 1))
    return hits


def check_hits_are_whole_block_matches(items: list[Arrival]) -> None:
    for policy in POLICIES:
        for concurrency in (1, 3):
            sim = simulate(items, 3, policy, kv_blocks=10_000, block_size=BLOCK, concurrency=concurrency)
            assert sim.cached == reference_hits(items, sim.routes, BLOCK), (policy, concurrency)
            assert sim.cached_tokens + sim.computed_tokens == sim.prompt_tokens == sum(len(a.tokens) for a in items)


def test_hits_match_a_brute_force_count_of_whole_blocks():
    check_hits_are_whole_block_matches(synthetic())


class PartialBlocks(S.ReplicaCache):
    """A mutant: a cache that serves the matching part of a block too (SGLang's page size 1, not vLLM's blocks)."""

    def __post_init__(self):
        super().__post_init__()
        self.cache = RadixCache(page_size=1)


def test_the_block_check_catches_a_cache_that_matches_partial_blocks(monkeypatch):
    monkeypatch.setattr(S, "ReplicaCache", PartialBlocks)
    with pytest.raises(AssertionError):
        check_hits_are_whole_block_matches(synthetic())


def test_memory_stays_within_kv_blocks_and_eviction_lowers_hits():
    items = synthetic(n=80, tenants=6)
    roomy = simulate(items, 2, "round_robin", kv_blocks=10_000, block_size=BLOCK, concurrency=2)
    log = EventLog()
    tight = simulate(items, 2, "round_robin", kv_blocks=24, block_size=BLOCK, concurrency=2, events=log)
    assert log.of(Evict) and tight.cached_tokens < roomy.cached_tokens
    held = [0, 0]
    for e in log.of(Insert, Evict):  # the tree's blocks per replica, replayed from its events
        held[e.replica] += BLOCK * (e.tokens // BLOCK) * (1 if isinstance(e, Insert) else -1)
        assert held[e.replica] <= 24 * BLOCK


def test_a_killed_replica_gets_nothing_after_and_every_arrival_is_routed_once():
    items = synthetic(n=50)
    for policy in POLICIES:
        log = EventLog()
        sim = simulate(items, 3, policy, block_size=BLOCK, kill=(1, 20), events=log)
        assert 1 not in sim.routes[20:], policy
        routes = log.of(Route)
        assert sorted(e.request for e in routes) == list(range(50))
        assert [e.replica for e in sorted(routes, key=lambda e: e.request)] == sim.routes
        assert [(e.replica, e.state) for e in log.of(Health)] == [(0, "up"), (1, "up"), (2, "up"), (1, "down")]
        assert sum(sim.per_replica) == 50


def test_the_routers_worker_order_is_who_goes_first():
    items = synthetic(n=20)
    plain = simulate(items, 2, "round_robin", kv_blocks=64, block_size=BLOCK)
    flipped = simulate(items, 2, "round_robin", kv_blocks=64, block_size=BLOCK, order=[1, 0])
    assert plain.routes[:4] == [0, 1, 0, 1] and flipped.routes == [1 - r for r in plain.routes]
    assert flipped.hit_rate == plain.hit_rate and flipped.per_replica == plain.per_replica[::-1]
    first = simulate(items, 2, "cache_aware", kv_blocks=64, block_size=BLOCK, order=[1, 0]).routes[0]
    assert first == 1  # the first request, every load 0: the router's first worker


def test_bad_settings_are_refused():
    items = synthetic(n=5)
    with pytest.raises(ValueError, match="order must list the replicas"):
        simulate(items, 2, order=[0, 2])
    with pytest.raises(ValueError, match=r"\['order'\] configure a policy made here"):
        simulate(items, 2, make_policy("round_robin", 2), order=[1, 0])
    with pytest.raises(ValueError, match="kill"):
        simulate(items, 2, kill=(2, 0))
    with pytest.raises(ValueError, match="urls"):
        simulate(items, 2, urls=["http://a"])
    with pytest.raises(ValueError, match="numbered"):
        simulate(items[1:], 2)


def test_the_event_log_round_trips_through_a_file(tmp_path):
    log = EventLog()
    simulate(synthetic(n=30), 2, "cache_aware", kv_blocks=20, block_size=BLOCK, events=log)
    assert {e.replica for e in log.of(Insert)} == {0, 1}
    again = EventLog.load(log.save(tmp_path / "cluster.jsonl"))
    assert again.to_dicts() == log.to_dicts()


def test_sweep_runs_every_replica_count_and_policy():
    runs = sweep(synthetic(n=40), replicas=(2, 8), block_size=BLOCK)
    assert [(r.replicas, r.policy) for r in runs] == [(n, p) for n in (2, 8) for p in POLICIES]
    assert all(len(r.per_replica) == r.replicas and r.balance >= 1 for r in runs)


# -- the tenants workload, as the cluster bench runs it ---------------------------------------------------------

@pytest.fixture(scope="module")
def tenants():
    return arrivals(W.tenants())


def test_cache_aware_hits_half_again_as_much_as_round_robin_when_memory_is_short(tenants):
    log = EventLog()
    rr = simulate(tenants, 2, "round_robin", kv_blocks=S.BENCH_KV_BLOCKS, events=log)
    ca = simulate(tenants, 2, "cache_aware", kv_blocks=S.BENCH_KV_BLOCKS)
    assert log.of(Evict)  # round robin caches every tenant on both replicas: they do not fit
    assert ca.hit_rate >= 1.5 * rr.hit_rate, (ca.hit_rate, rr.hit_rate)
    assert ca.balance < 1.25  # and it still spreads the requests


def test_a_router_sent_token_ids_routes_by_tokens_and_hits_as_whole_blocks():
    """prompt="tokens" is vllm-router 0.1.17 given ids, as the bench sends them: cache_aware's tree is over the ids.
    Here every arrival's text is its ids written out, so the two trees see the same prefixes and keep tenants
    together alike; the hits are still the replicas' whole blocks."""
    items = synthetic(n=60)
    by_tokens = simulate(items, 2, "cache_aware", kv_blocks=10_000, block_size=BLOCK, prompt="tokens")
    assert by_tokens.cached == reference_hits(items, by_tokens.routes, BLOCK)
    for t in {a.key for a in items}:
        assert len({by_tokens.routes[a.id] for a in items if a.key == t}) == 1  # one replica per tenant
    with pytest.raises(ValueError, match="prompt must be one of"):
        simulate(items, 2, prompt="bytes")
