"""Locks as leases: an unlock gives back only a lock its request took, and a prefix lease goes back on every way out.

The tree is checked against a reference that knows who holds what (a hypothesis state machine with double unlocks,
unlocks of paths never locked and unlocks by the wrong request); the prefix cache's `lease` with real KV, with
exceptions, KeyboardInterrupts and event subscribers that raise at every point where a lock is taken or given back.
"""

from __future__ import annotations

import re
from collections import Counter
from contextlib import nullcontext

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from teachspec import kv
from teachspec.events import Evict, EventLog, Lock, Unlock
from teachspec.radix.tree import InvariantError, Node, RadixCache


def cache_with_log(**kw) -> tuple[RadixCache, EventLog]:
    log = EventLog()
    return RadixCache(events=log, debug=True, **kw), log


def ids_of(tokens):
    return [100 + t for t in tokens]


# -- the tree: the repro and its neighbours -------------------------------------------------------------------------

def test_a_second_unlock_is_refused_and_changes_nothing():
    """The issue's repro: lock a = [1, 2] and b = [1, 2, 3, 4], unlock(a) twice. The second used to find b's lock on
    a's node and take it, after which unlock(b) drove a count to -1 and those tokens could never be evicted."""
    cache, log = cache_with_log()
    cache.insert([1, 2, 3, 4], ids_of([1, 2, 3, 4]))
    a = cache.match_prefix([1, 2]).node
    b = cache.match_prefix([1, 2, 3, 4]).node
    cache.lock(a)
    cache.lock(b)
    cache.unlock(a)
    before, n_events = cache.dump(), len(log)
    with pytest.raises(ValueError, match=f"cannot unlock node {a.id}: it is not locked by request -1 "
                                         f"\\(node {a.id} is locked only as part of longer locked prefixes"):
        cache.unlock(a)
    assert cache.dump() == before and len(log) == n_events and (a.locks, b.locks) == (1, 1)
    cache.unlock(b)
    cache.check_invariants()
    assert (cache.protected_size, cache.evict(10**9), cache.total_size) == (0, 4, 0)


def test_only_the_request_that_took_a_lock_can_give_it_back():
    cache, log = cache_with_log()
    cache.insert([1, 2, 3], ids_of([1, 2, 3]))
    node = cache.match_prefix([1, 2, 3]).node
    cache.lock(node, request=3)
    before, n_events = cache.dump(), len(log)
    for wrong in (4, -1):
        with pytest.raises(ValueError, match=f"not locked by request {wrong} \\(node {node.id} is locked by "
                                             f"requests \\[3\\]; request {wrong} holds no locks\\)"):
            cache.unlock(node, request=wrong)
    assert cache.dump() == before and len(log) == n_events
    assert (cache.holds(node, 3), cache.holds(node, 4), cache.holds(node)) == (1, 0, 0)
    cache.unlock(node, request=3)
    assert (cache.protected_size, cache.holds(node, 3)) == (0, 0)
    assert [e.request for e in log.of(Lock, Unlock)] == [3, 3]


def test_unlocks_of_paths_never_locked_are_refused():
    cache, _ = cache_with_log()
    cache.insert([1, 2, 3], ids_of([1, 2, 3]))
    cache.insert([1, 2, 4], ids_of([1, 2, 4]))
    a = cache.match_prefix([1, 2, 3]).node
    b = cache.match_prefix([1, 2, 4]).node
    with pytest.raises(ValueError, match=f"node {b.id} is not locked at all; request -1 holds no locks"):
        cache.unlock(b)
    cache.lock(a, request=1)
    with pytest.raises(ValueError, match=f"request 1 holds locks on nodes \\[{a.id}\\]"):
        cache.unlock(a.parent, request=1)                      # a's parent is locked, but only as part of a
    with pytest.raises(ValueError, match="cannot unlock node 0"):
        cache.unlock(cache.root, request=1)                    # the root too: it was never leased
    cache.check_invariants()
    assert (a.locks, a.parent.locks, b.locks, cache.protected_size) == (1, 1, 0, 3)


def test_a_lease_counts_each_lock_and_survives_a_split():
    cache, _ = cache_with_log()
    cache.insert([1, 2, 3, 4], ids_of([1, 2, 3, 4]))
    node = cache.match_prefix([1, 2, 3, 4]).node
    cache.lock(node, request=5)
    cache.lock(node, request=5)
    head = cache.match_prefix([1, 2], request=6).node          # splits the leased node: it keeps its id and tail
    assert (cache.holds(node, 5), cache.holds(head, 5), head.locks) == (2, 0, 2)
    cache.unlock(node, request=5)
    cache.unlock(node, request=5)
    with pytest.raises(ValueError, match="not locked by request 5"):
        cache.unlock(node, request=5)
    assert (cache.protected_size, head.locks, node.locks) == (0, 0, 0)


@pytest.mark.parametrize("request_, error, match", [
    ("3", TypeError, "request must be an int, got str '3'"),
    (True, TypeError, "request must be an int, got bool True"),
    (-2, ValueError, "request must be >= -1, got -2"),
])
def test_bad_request_ids_are_refused_before_anything_changes(request_, error, match):
    cache, log = cache_with_log()
    cache.insert([1, 2], ids_of([1, 2]))
    node = cache.match_prefix([1, 2]).node
    before, n_events = cache.dump(), len(log)
    for call in (cache.lock, cache.unlock, cache.holds):
        with pytest.raises(error, match=match):
            call(node, request_)
    assert cache.dump() == before and len(log) == n_events


def test_check_invariants_recounts_the_leases():
    """The new invariant can fail: a count that no lease explains, or a lease that no count reflects."""
    cache, _ = cache_with_log()
    cache.insert([1, 2], ids_of([1, 2]))
    node = cache.match_prefix([1, 2]).node
    cache.lock(node, request=0)
    cache._leases.clear()                                      # the counts stay, whose they were is forgotten
    with pytest.raises(InvariantError, match=f"node {node.id}: it has 1 locks but 0 leases"):
        cache.check_invariants()
    cache._leases[(0, node)] = 2                               # more leases than locks
    with pytest.raises(InvariantError, match="it has 1 locks but 2 leases"):
        cache.check_invariants()


def test_a_lock_event_subscriber_that_raises_leaves_the_lock_taken_and_says_so():
    """lock() changes the tree first and emits second; `holds` is how a caller learns the lock was taken."""
    cache, log = cache_with_log()
    cache.insert([1, 2], ids_of([1, 2]))
    node = cache.match_prefix([1, 2]).node

    def refuse_locks(event):
        if isinstance(event, Lock):
            raise RuntimeError("a view that broke")

    log.subscribe(refuse_locks)
    with pytest.warns(RuntimeWarning, match="refuse_locks"), pytest.raises(RuntimeError, match="a view"):
        cache.lock(node, request=2)
    assert cache.holds(node, 2) == 1 and cache.protected_size == 2
    cache.unlock(node, request=2)                              # the subscriber is gone: this one goes through
    assert cache.protected_size == 0


# -- the tree against a reference that tracks leases ----------------------------------------------------------------

def counting_only(cache_cls: type[RadixCache]) -> type[RadixCache]:
    """The old unlock as a mutant: it refuses a node only at zero locks, whoever locked it."""
    class CountingOnly(cache_cls):
        def unlock(self, node: Node, request: int = -1) -> None:
            path = self._path_up(node)
            if path and node.locks == 0:
                raise ValueError(f"cannot unlock node {node.id}: it is not locked")
            for n in path:
                n.locks -= 1
                if n.locks == 0:
                    self._protected -= len(n.key)
                    self._evictable += len(n.key)
                    self._refresh(n)
            held = self._leases.get((request, node), 0)        # keep the ledger as it would be, where it can
            if held:
                self._leases[request, node] = held - 1
    return CountingOnly


def machine(page_size: int, cache_cls: type[RadixCache] = RadixCache):
    # few distinct tokens and short sequences, so prefixes are shared and the same node is locked again and again
    sequences = st.lists(st.integers(0, 1), max_size=3 * page_size)
    requests = st.sampled_from([-1, 0, 1])

    class LeasesVsReference(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.log = EventLog()
            self.cache = cache_cls(page_size=page_size, events=self.log)
            self.handles: list[tuple[Node, tuple[int, ...]]] = []  # (node, its prefix) of every match so far
            self.stale: set[int] = set()                         # indices of handles whose node was evicted
            self.leases: Counter[tuple[int, tuple[int, ...]]] = Counter()  # (request, prefix) -> locks held

        @rule(tokens=sequences)
        def insert(self, tokens):
            self.cache.insert(tokens, ids_of(tokens))

        @rule(tokens=sequences)
        def match(self, tokens):
            result = self.cache.match_prefix(tokens)
            self.handles.append((result.node, tuple(tokens[:result.length])))

        @precondition(lambda self: self.handles)
        @rule(data=st.data(), request=requests)
        def lock(self, data, request):
            i = data.draw(st.integers(0, len(self.handles) - 1))
            node, prefix = self.handles[i]
            if i in self.stale:
                self.refused(lambda: self.cache.lock(node, request), "not in this cache")
                return
            self.cache.lock(node, request)
            self.leases[request, prefix] += 1

        @precondition(lambda self: self.handles)
        @rule(data=st.data(), request=requests)
        def unlock(self, data, request):
            # any handle, any request: most of these are wrong (double, never locked, another request's, evicted)
            i = data.draw(st.integers(0, len(self.handles) - 1))
            node, prefix = self.handles[i]
            if i in self.stale or self.leases[request, prefix] == 0:
                self.refused(lambda: self.cache.unlock(node, request), "not in this cache|not locked by request")
                return
            self.cache.unlock(node, request)
            self.leases[request, prefix] -= 1

        @rule(n=st.integers(0, 4 * page_size))
        def evict(self, n):
            self.cache.evict(n)
            for i, (node, prefix) in enumerate(self.handles):
                if self.cache.peek_prefix(prefix) < len(prefix):  # its path is cut: the node itself went
                    self.stale.add(i)
                    assert not any(self.leases[r, prefix] for r in (-1, 0, 1)), "a leased prefix was evicted"

        def refused(self, call, match):
            before, n_events = self.cache.dump(), len(self.log)
            try:
                call()
            except ValueError as error:
                assert re.search(match, str(error)), str(error)
            else:
                raise AssertionError("a wrong lock or unlock was accepted")
            assert self.cache.dump() == before and len(self.log) == n_events

        @invariant()
        def agrees(self):
            self.cache.check_invariants()
            held = [prefix for (_, prefix), count in self.leases.items() if count]
            pages = {p[:j] for p in held for j in range(page_size, len(p) + 1, page_size)}
            assert self.cache.protected_size == len(pages) * page_size
            stack = [(self.cache.root, ())]
            while stack:                                         # every count is the leases at or below its node
                node, prefix = stack.pop()
                for child in node.children.values():
                    run = prefix + child.key
                    assert child.locks >= 0
                    assert child.locks == sum(c for (_, p), c in self.leases.items() if p[:len(run)] == run)
                    stack.append((child, run))
            for i, (node, prefix) in enumerate(self.handles):
                if i not in self.stale:
                    assert [self.cache.holds(node, r) for r in (-1, 0, 1)] == \
                        [self.leases[r, prefix] for r in (-1, 0, 1)]

    return LeasesVsReference


SETTINGS = settings(max_examples=150, stateful_step_count=40, deadline=None)


@pytest.mark.parametrize("page_size", [1, 2])
def test_random_lock_unlock_evict_insert_agree_with_a_lease_reference(page_size):
    run_state_machine_as_test(machine(page_size), settings=SETTINGS)


def test_the_reference_catches_an_unlock_that_only_counts():
    """Mutation check: the old count-only unlock accepts a wrong unlock, and the machine must find one."""
    with pytest.raises(AssertionError, match="a wrong lock or unlock was accepted"):
        run_state_machine_as_test(machine(1, counting_only(RadixCache)),
                                  settings=settings(SETTINGS, database=None, report_multiple_bugs=False))


# -- the prefix cache's lease --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pair():
    from helpers.pairs import make_pair
    return make_pair()


@pytest.fixture
def prefix(pair):
    from teachspec.radix.prefix import PrefixCache
    cache = PrefixCache(pair, 4096, EventLog())
    run(cache, 0, list(range(10, 30)))                          # something cached, so the next lease locks a node
    return cache


def run(cache, request: int, ids: list[int]) -> None:
    """One request's worth of KV: the prompt through the target, stored by finish inside the lease."""
    with cache.lease(request, ids) as lease:
        cache.finish(request, lease, ids, computed(cache, lease, ids), None)


def computed(cache, lease, ids):
    target = lease.target
    kv.forward(cache.pair.target, ids[lease.cached:], target, 1, cache.pair.vocab_size)
    return target


def clean(cache) -> None:
    assert cache.tree.protected_size == 0
    cache.tree.check_invariants()


IDS = list(range(10, 25)) + [7, 8]  # shares 15 tokens with what the fixture cached


def test_a_lease_locks_inside_the_block_and_finish_stores_and_unlocks_once(prefix):
    with prefix.lease(1, IDS) as lease:
        assert lease.held and lease.cached == 15 and prefix.tree.holds(lease.node, 1) == 1
        assert prefix.tree.protected_size == 15
        prefix.finish(1, lease, IDS, computed(prefix, lease, IDS), None)
        assert not lease.held and prefix.tree.holds(lease.node, 1) == 0
    clean(prefix)
    assert prefix.tree.peek_prefix(IDS) == len(IDS)
    assert len(prefix.tree.events.of(Unlock)) == len(prefix.tree.events.of(Lock)) == 2


@pytest.mark.parametrize("error", [RuntimeError("out of memory, say"), KeyboardInterrupt()])
def test_any_way_out_of_the_block_unlocks_and_stores_nothing(prefix, error):
    stored = prefix.tree.total_size
    with pytest.raises(type(error)):
        with prefix.lease(1, IDS) as lease:
            computed(prefix, lease, IDS)
            raise error
    assert not lease.held and prefix.tree.total_size == stored
    clean(prefix)


def test_a_block_that_never_calls_finish_still_unlocks(prefix):
    with prefix.lease(1, IDS) as lease:
        pass
    assert not lease.held
    clean(prefix)
    with pytest.raises(ValueError, match="already given back"):
        prefix.finish(1, lease, IDS, lease.target, None)
    with pytest.raises(ValueError, match="request must be the lease's own request 2, got 1"):
        with prefix.lease(2, IDS) as lease:
            prefix.finish(1, lease, IDS, lease.target, None)
    clean(prefix)


def raising_on(kind: type, error: BaseException):
    """A subscriber that raises `error` at the first event of `kind`, then never again."""
    def subscriber(event):
        if isinstance(event, kind) and not subscriber.done:
            subscriber.done = True
            raise error
    subscriber.done = False
    return subscriber


def reported(error: BaseException):
    """An Exception from a subscriber is reported by a warning naming it; a KeyboardInterrupt just propagates."""
    return pytest.warns(RuntimeWarning, match="subscriber") if isinstance(error, Exception) else nullcontext()


@pytest.mark.parametrize("error", [RuntimeError("a broken view"), KeyboardInterrupt()])
def test_a_lock_subscriber_that_raises_in_start_leaves_no_lock_behind(prefix, error):
    """The issue's repro at the cache: the Lock event comes after the lock is taken, so start must give it back."""
    prefix.tree.events.subscribe(raising_on(Lock, error))
    with reported(error), pytest.raises(type(error)):
        prefix.start(1, IDS)
    clean(prefix)
    run(prefix, 2, IDS)                                        # the next request is untouched by it
    clean(prefix)
    assert prefix.tree.peek_prefix(IDS) == len(IDS)


@pytest.mark.parametrize("kind", [Lock, Evict, Unlock])
@pytest.mark.parametrize("error", [RuntimeError("a broken view"), KeyboardInterrupt()])
def test_a_subscriber_raising_anywhere_in_the_lease_unlocks_exactly_once(pair, kind, error):
    """Lock in start, Evict in finish's eviction, Unlock in finish's release: the lock is back once, and the
    original error is the one that comes out (a second unlock would be refused and hide it)."""
    from teachspec.radix.prefix import PrefixCache
    cache = PrefixCache(pair, 24, EventLog())                  # small: storing IDS must evict what run() cached
    run(cache, 0, list(range(40, 60)))
    cache.tree.events.subscribe(raising_on(kind, error))
    with reported(error), pytest.raises(type(error)) as raised:
        with cache.lease(1, IDS) as lease:
            cache.finish(1, lease, IDS, computed(cache, lease, IDS), None)
    assert raised.value is error
    clean(cache)
    log = cache.tree.events
    assert len(log.of(Unlock)) == len(log.of(Lock))           # one unlock for every lock taken
    run(cache, 2, IDS)
    clean(cache)
