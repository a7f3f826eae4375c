"""The radix tree, unit by unit and then against a brute-force reference under random operation sequences."""

from collections import Counter

import numpy as np
import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from teachspec.events import Evict, EventLog, Insert, Lock, Match, Split, Unlock
from teachspec.radix import InvariantError, RadixCache


def ids_of(tokens):
    """A payload that names what it holds: entry i is the prefix tokens[:i + 1] whose KV it stands for."""
    return [tuple(tokens[:i + 1]) for i in range(len(tokens))]


def flat(payloads):
    return [x for piece in payloads for x in piece]


def cache_with_log(**kwargs):
    log = EventLog()
    return RadixCache(events=log, debug=True, **kwargs), log


# -- match and insert --------------------------------------------------------------------------------------------

def test_match_ending_inside_a_node_splits_it():
    cache, log = cache_with_log()
    cache.insert([1, 2, 3, 4, 5], ids_of([1, 2, 3, 4, 5]))
    leaf = log.of(Insert)[0].node
    result = cache.match_prefix([1, 2, 3, 9, 9])
    assert result.length == 3
    assert flat(result.payloads) == ids_of([1, 2, 3])
    (split,) = log.of(Split)
    assert (split.node, split.parent, split.at) == (leaf, 0, 3)
    assert result.node.id == split.new and result.path == [0, split.new]
    assert result.node.key == (1, 2, 3) and list(result.node.children.values())[0].key == (4, 5)
    assert cache.total_size == 5
    # the match after the split runs over two nodes and returns both pieces of payload, in order
    again = cache.match_prefix([1, 2, 3, 4, 5, 6])
    assert again.length == 5 and again.path == [0, split.new, leaf]
    assert flat(again.payloads) == ids_of([1, 2, 3, 4, 5])


def test_insert_returns_the_cached_length_and_stores_only_the_suffix():
    cache, log = cache_with_log()
    assert cache.insert([1, 2, 3], ids_of([1, 2, 3])) == 0
    assert cache.insert([1, 2, 3, 4, 5], ids_of([1, 2, 3, 4, 5])) == 3
    assert cache.insert([1, 2, 7], ids_of([1, 2, 7])) == 2   # diverges inside the first node: split, then a leaf
    assert cache.insert([1, 2, 3], ids_of([1, 2, 3])) == 3   # nothing new
    assert cache.total_size == 6
    inserts = log.of(Insert)
    assert [(e.tokens, e.cached) for e in inserts] == [(3, 0), (2, 3), (1, 2), (0, 3)]
    assert inserts[-1].node == -1
    assert inserts[2].parent == log.of(Split)[0].new
    assert flat(cache.match_prefix([1, 2, 3, 4, 5]).payloads) == ids_of([1, 2, 3, 4, 5])


def test_a_split_keeps_the_stamps_and_locks_of_the_node_it_cuts():
    cache = RadixCache(debug=True)
    cache.insert([1, 2, 3, 4], ids_of([1, 2, 3, 4]))       # t1
    tail = cache.match_prefix([1, 2, 3, 4]).node           # t2
    cache.lock(tail)
    head = cache.match_prefix([1, 2]).node                  # t3: splits; the head was reached by both matches
    assert (head.created, head.last_access, head.hits, head.locks) == (1, 3, 2, 1)
    assert (tail.created, tail.last_access, tail.hits, tail.locks) == (1, 2, 1, 1)
    assert (head.key, tail.key, tail.parent, tail.id) == ((1, 2), (3, 4), head, 1)
    cache.insert([1, 9], ids_of([1, 9]))                    # t4: an insert splits too, and counts no hit
    top = cache.root.children[1]
    assert (top.key, top.created, top.last_access, top.hits, top.locks) == ((1,), 1, 4, 2, 1)


def test_empty_match_and_empty_insert():
    cache, log = cache_with_log()
    cache.insert([5, 6], ids_of([5, 6]))
    before, n_events = cache.dump(), len(log)
    assert cache.insert([], []) == 0
    assert cache.dump() == before and len(log) == n_events
    result = cache.match_prefix([])
    assert (result.length, result.node, result.payloads, result.path) == (0, cache.root, [], [0])
    assert cache.match_prefix([7]).node is cache.root
    assert [e.length for e in log.of(Match)] == [0, 0]


def test_numpy_tokens_are_accepted():
    cache = RadixCache(debug=True)
    assert cache.insert(np.array([3, 1, 4], dtype=np.int64), [0, 1, 2]) == 0
    assert cache.match_prefix([np.int32(3), 1, 4, 1]).length == 3
    assert cache.insert((3, 1, 4, 1), [0, 1, 2, 3]) == 3


def test_peek_changes_nothing():
    cache, log = cache_with_log()
    cache.insert([1, 2, 3, 4], ids_of([1, 2, 3, 4]))
    cache.match_prefix([1, 2, 3, 4])
    before, n_events, hits = cache.dump(), len(log), cache.metrics.hit_tokens
    assert cache.peek_prefix([1, 2, 9]) == 2
    assert cache.peek_prefix([1, 2, 3, 4, 5]) == 4
    assert cache.dump() == before and len(log) == n_events and cache.metrics.hit_tokens == hits
    assert cache.match_prefix([1, 2, 9]).length == 2
    assert cache.dump() != before  # the same lookup through match_prefix did split and touch


# -- locks -------------------------------------------------------------------------------------------------------

def test_lock_and_unlock_move_exactly_the_path_tokens():
    cache, log = cache_with_log()
    cache.insert([1, 2, 3, 4, 5], ids_of([1, 2, 3, 4, 5]))
    cache.insert([1, 2, 3, 9], ids_of([1, 2, 3, 9]))          # tree: (1 2 3) -> (4 5), (9)
    deep = cache.match_prefix([1, 2, 3, 4, 5]).node
    other = cache.match_prefix([1, 2, 3, 9]).node
    sizes = lambda: (cache.evictable_size, cache.protected_size, cache.total_size)
    assert sizes() == (6, 0, 6)
    cache.lock(deep)
    assert sizes() == (1, 5, 6)
    cache.lock(deep)                                          # 1 -> 2 on every node: nothing moves
    assert sizes() == (1, 5, 6)
    cache.lock(other)                                         # (1 2 3) is protected already: only (9) moves
    assert sizes() == (0, 6, 6)
    assert deep.parent.locks == 3 and deep.locks == 2 and other.locks == 1
    cache.unlock(deep)
    assert sizes() == (0, 6, 6)
    cache.unlock(deep)
    assert sizes() == (2, 4, 6)
    cache.unlock(other)
    assert sizes() == (6, 0, 6)
    assert [(e.node, e.locks, e.protected) for e in log.of(Lock)] == \
        [(deep.id, 1, 5), (deep.id, 2, 5), (other.id, 1, 6)]
    assert [(e.node, e.locks, e.protected) for e in log.of(Unlock)] == \
        [(deep.id, 1, 6), (deep.id, 0, 4), (other.id, 0, 0)]


def test_unlock_of_an_unlocked_node_is_refused_and_changes_nothing():
    cache, log = cache_with_log()
    cache.insert([1, 2, 3], ids_of([1, 2, 3]))
    cache.insert([1, 2, 4], ids_of([1, 2, 4]))
    a = cache.match_prefix([1, 2, 3]).node
    b = cache.match_prefix([1, 2, 4]).node
    cache.lock(a)                                              # the shared (1 2) is locked, b itself is not
    before, n_events = cache.dump(), len(log)
    with pytest.raises(ValueError, match=f"cannot unlock node {b.id}: it is not locked"):
        cache.unlock(b)
    assert cache.dump() == before and len(log) == n_events
    cache.check_invariants()
    assert b.parent.locks == 1


def test_a_locked_handle_survives_a_later_split():
    cache = RadixCache(debug=True)
    cache.insert([1, 2, 3, 4], ids_of([1, 2, 3, 4]))
    node = cache.match_prefix([1, 2, 3, 4]).node
    cache.lock(node)
    head = cache.match_prefix([1, 2]).node                     # splits the locked node
    assert head.locks == 1 and node.parent is head and cache.protected_size == 4
    cache.unlock(node)
    assert (cache.protected_size, cache.evictable_size, head.locks) == (0, 4, 0)


def test_locking_the_root_protects_nothing_but_is_a_lease_like_any_other():
    cache = RadixCache(debug=True)
    cache.insert([1, 2], [0, 1])
    root = cache.match_prefix([9]).node
    cache.lock(root)
    assert (cache.protected_size, cache.evictable_size, cache.holds(root)) == (0, 2, 1)
    cache.unlock(root)
    with pytest.raises(ValueError, match="cannot unlock node 0: it is not locked by request -1"):
        cache.unlock(root)                                     # a second unlock undoes nothing: refused
    assert (cache.protected_size, cache.evictable_size, cache.holds(root)) == (0, 2, 0)


# -- eviction ----------------------------------------------------------------------------------------------------

def test_lru_order_and_the_parent_cascade():
    evicted = []
    log = EventLog()
    cache = RadixCache(events=log, on_evict=evicted.append, debug=True)
    cache.insert([1, 2, 3, 4], ids_of([1, 2, 3, 4]))  # t1
    cache.insert([1, 2, 5], ids_of([1, 2, 5]))        # t2: splits into (1 2) -> (3 4), (5)
    cache.insert([7, 8], ids_of([7, 8]))              # t3
    cache.match_prefix([1, 2, 5])                     # t4: touches (1 2) and (5)
    cache.insert([9], ids_of([9]))                    # t5
    assert cache.evict(1) == 2                        # (3 4) is least recent: the whole node goes
    assert flat(evicted) == ids_of([1, 2, 3, 4])[2:]
    assert cache.evict(100) == 6
    # (5) t4 leaves (1 2) t4 an unlocked leaf; it is ranked at once and goes before (9) t5
    assert [tuple(p[-1][-len(p):]) for p in evicted] == [(3, 4), (7, 8), (5,), (1, 2), (9,)]
    assert [e.tokens for e in log.of(Evict)] == [2, 2, 1, 2, 1]
    assert [e.parent for e in log.of(Evict)][2:4] == [log.of(Evict)[3].node, 0]
    assert cache.total_size == 0 and cache.metrics.evictions == 5 and cache.metrics.evicted_tokens == 8


@pytest.mark.parametrize("policy, order", [("lru", [3, 1, 2]), ("lfu", [3, 2, 1]), ("fifo", [1, 2, 3])])
def test_policies_order(policy, order):
    evicted = []
    cache = RadixCache(policy=policy, on_evict=evicted.append, debug=True)
    for token in (1, 2, 3):
        cache.insert([token], [token])
    for token in (1, 1, 2):                            # 1: two hits, 2: one hit, 3: none; 2 is the most recent
        cache.match_prefix([token])
    assert cache.evict(3) == 3
    assert flat(evicted) == order


def test_locked_nodes_are_never_evicted():
    evicted = []
    cache = RadixCache(on_evict=evicted.append, debug=True)
    cache.insert([1, 2, 3, 4], ids_of([1, 2, 3, 4]))
    cache.insert([1, 2, 5, 6], ids_of([1, 2, 5, 6]))
    cache.insert([8], ids_of([8]))
    kept = cache.match_prefix([1, 2, 3, 4]).node
    cache.lock(kept)
    assert cache.evict(10**6) == 3                    # (5 6) and (8); (1 2) has a locked child
    assert cache.total_size == cache.protected_size == 4
    assert cache.match_prefix([1, 2, 3, 4]).length == 4
    cache.unlock(kept)
    assert cache.evict(1) == 2 and cache.evict(1) == 2  # leaf first, then its parent
    assert cache.total_size == 0 and len(evicted) == 4


def test_evicted_nodes_cannot_be_locked_and_ids_are_never_reused():
    cache, log = cache_with_log()
    cache.insert([1, 2], [0, 1])
    node = cache.match_prefix([1, 2]).node
    cache.evict(2)
    with pytest.raises(ValueError, match="evicted"):
        cache.lock(node)
    cache.insert([1, 2], [0, 1])
    assert cache.match_prefix([1, 2]).node.id > node.id
    created = [e.node for e in log.of(Insert) if e.node != -1] + [e.new for e in log.of(Split)]
    assert len(created) == len(set(created))


# -- pages -------------------------------------------------------------------------------------------------------

def test_pages_keep_keys_and_matches_aligned():
    cache, log = cache_with_log(page_size=4)
    tokens = list(range(10))
    assert cache.insert(tokens, ids_of(tokens)) == 0
    assert cache.total_size == 8                        # the unaligned tail (8 9) is not stored
    assert cache.match_prefix(tokens[:7]).length == 4   # the second page is incomplete: only one page matches
    assert cache.match_prefix([0, 1, 2, 3, 4, 5, 6, 99]).length == 4  # diverges inside page 2
    assert log.of(Split)[0].at == 4
    assert cache.match_prefix([0, 1, 2, 99]).length == 0  # a page matches whole or not at all
    assert cache.insert([0, 1, 2], ids_of([0, 1, 2])) == 0 and cache.total_size == 8
    assert cache.insert([0, 1, 2, 3, 9, 9, 9, 9, 9], ids_of([0, 1, 2, 3, 9, 9, 9, 9, 9])) == 4
    assert sorted(len(n.key) for n in cache.root.children[(0, 1, 2, 3)].children.values()) == [4, 4]
    assert cache.metrics.hit_tokens == 8 and cache.metrics.query_tokens == 7 + 8 + 4


# -- events ------------------------------------------------------------------------------------------------------

def test_events_name_nodes_consistently():
    cache, log = cache_with_log()
    cache.insert([1, 2, 3], [0, 1, 2], request=7)
    result = cache.match_prefix([1, 2], request=8)
    cache.lock(result.node, request=8)
    cache.unlock(result.node, request=8)
    cache.evict(10)
    kinds = [type(e) for e in log]
    assert kinds == [Insert, Split, Match, Lock, Unlock, Evict, Evict]
    insert, split, match, lock, unlock, leaf, head = log.events
    assert insert.request == 7 and {e.request for e in log.events[1:5]} == {8} and leaf.request == -1
    assert split.node == insert.node and split.new == match.node == lock.node == unlock.node == result.node.id
    assert match.path == [0, split.new] and match.length == 2
    assert (leaf.node, leaf.parent, leaf.tokens) == (insert.node, split.new, 1)
    assert (head.node, head.parent, head.tokens) == (split.new, 0, 2)


# -- metrics -----------------------------------------------------------------------------------------------------

def test_metrics_and_memory():
    cache = RadixCache(window=2, debug=True)
    cache.insert([1, 2, 3, 4], [0] * 4)
    cache.match_prefix([1, 2, 3, 4], request=1)   # 4 of 4
    cache.match_prefix([1, 2, 9, 9], request=2)   # 2 of 4
    cache.match_prefix([5, 5], request=1)         # 0 of 2
    cache.match_prefix([1, 2, 3])                 # 3 of 3, outside any request
    m = cache.metrics
    assert (m.hit_tokens, m.query_tokens) == (9, 13)
    assert m.hit_rate == pytest.approx(9 / 13)
    assert m.window_hit_rate == pytest.approx(3 / 5)
    assert m.cached_tokens == {1: 0, 2: 2}       # the latest match of each request; none for -1
    cache.lock(cache.match_prefix([1, 2]).node)
    use = cache.memory(10)
    assert (use.in_use, use.cached, use.free, use.budget) == (2, 2, 6, 10)
    with pytest.raises(ValueError, match="budget must be >= total_size"):
        cache.memory(3)


def test_a_custom_clock_stamps_access_times():
    now = [100.0]
    cache = RadixCache(clock=lambda: now[0])
    cache.insert([1], [0])
    now[0] = 250.0
    node = cache.match_prefix([1]).node
    assert (node.created, node.last_access, node.hits) == (100.0, 250.0, 1)


# -- errors ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, error, message", [
    (lambda c: c.insert([1, 2.0], [0, 0]), TypeError, r"tokens\[1\] must be an int"),
    (lambda c: c.insert([True], [0]), TypeError, r"tokens\[0\] must be an int"),
    (lambda c: c.insert([1, -3], [0, 0]), ValueError, r"tokens\[1\] must be a non-negative"),
    (lambda c: c.insert("abc", [0, 0, 0]), TypeError, "tokens must be a sequence"),
    (lambda c: c.insert({1, 2}, [0, 0]), TypeError, "tokens must be a sequence"),
    (lambda c: c.insert(np.array([1.0, 2.0]), [0, 0]), TypeError, r"tokens\[0\] must be an int"),
    (lambda c: c.insert([1, 2, 3, 9], [0, 0, 0]), ValueError, "len.payload. is 3, len.tokens. is 4"),
    (lambda c: c.insert([1, 2, 3, 9], 5), TypeError, "payload must support"),
    (lambda c: c.match_prefix([1, 2, 3.5]), TypeError, r"tokens\[2\]"),
    (lambda c: c.match_prefix(None), TypeError, "tokens must be a sequence"),
    (lambda c: c.peek_prefix([-1]), ValueError, r"tokens\[0\]"),
    (lambda c: c.evict(-1), ValueError, "n_tokens must be >= 0, got -1"),
    (lambda c: c.evict(1.5), TypeError, "n_tokens must be an int"),
    (lambda c: c.lock("node"), TypeError, "node must be a Node"),
    (lambda c: c.unlock(RadixCache().root), ValueError, "not in this cache"),
    (lambda c: c.memory(-1), ValueError, "budget must be >= 0"),
])
def test_bad_input_is_refused_before_anything_changes(call, error, message):
    cache, log = cache_with_log()
    cache.insert([1, 2, 3, 4], ids_of([1, 2, 3, 4]))
    cache.lock(cache.match_prefix([1, 2]).node)
    before, n_events = cache.dump(), len(log)
    with pytest.raises(error, match=message):
        call(cache)
    assert cache.dump() == before and len(log) == n_events
    cache.check_invariants()


@pytest.mark.parametrize("kwargs, error, message", [
    ({"page_size": 0}, ValueError, "page_size must be >= 1, got 0"),
    ({"page_size": 2.0}, TypeError, "page_size must be an int"),
    ({"page_size": True}, TypeError, "page_size must be an int"),
    ({"policy": "mru"}, ValueError, r"policy must be one of \['fifo', 'lfu', 'lru'\], got 'mru'"),
    ({"clock": 3}, TypeError, "clock must be callable"),
    ({"events": []}, TypeError, "events must be an EventLog"),
    ({"window": 0}, ValueError, "window must be >= 1"),
])
def test_constructor_arguments_are_checked(kwargs, error, message):
    with pytest.raises(error, match=message):
        RadixCache(**kwargs)


@pytest.mark.parametrize("corrupt, message", [
    (lambda c, n: setattr(c, "_evictable", c._evictable + 1), "sizes"),
    (lambda c, n: setattr(n, "payload", n.payload[:-1]), "len.payload."),
    (lambda c, n: setattr(n, "locks", n.parent.locks + 1), "locks"),
    (lambda c, n: setattr(n, "key", (7,) + n.key[1:]), "filed under"),
    (lambda c, n: setattr(n.parent, "key", ()), "empty key"),
    (lambda c, n: c._leaves.clear(), "eviction candidates"),
])
def test_check_invariants_catches_corruption(corrupt, message):
    cache = RadixCache()
    cache.insert([1, 2, 3, 4], ids_of([1, 2, 3, 4]))
    node = cache.match_prefix([1, 2, 3, 4]).node
    cache.match_prefix([1, 2])
    cache.lock(node.parent)
    cache.check_invariants()
    corrupt(cache, node)
    with pytest.raises(InvariantError, match=message):
        cache.check_invariants()


def test_unaligned_key_is_caught():
    cache = RadixCache(page_size=2)
    cache.insert([1, 2, 3, 4], ids_of([1, 2, 3, 4]))
    (node,) = cache.root.children.values()
    node.key, node.payload = node.key[:3], node.payload[:3]
    cache._evictable -= 1
    with pytest.raises(InvariantError, match="multiple of page_size=2"):
        cache.check_invariants()


def test_dump_shows_the_tree():
    cache = RadixCache()
    cache.insert([1, 2, 3], [0] * 3)
    cache.insert([1, 2, 4, 5], [0] * 4)
    cache.lock(cache.match_prefix([1, 2, 4, 5]).node)
    lines = str(cache).splitlines()
    assert lines[0].endswith("total=5 evictable=1 protected=4")
    assert lines[2].startswith("└── #") and "[1 2] len=2 locks=1" in lines[2]
    assert lines[3].startswith("    ├── #") and "[3] len=1 locks=0" in lines[3]
    assert lines[4].startswith("    └── #") and "[4 5] len=2 locks=1" in lines[4]


# -- against a brute-force reference -----------------------------------------------------------------------------

class Reference:
    """The cache with no tree: a dict from every cached page-aligned prefix to its [last access, hits, created].

    A prefix is cached iff it is a key; a query matches its longest cached prefix; a lock pins every page-aligned
    prefix of the locked match. Eviction removes pages one at a time: always the unlocked page with no cached
    extension whose policy key is smallest. The tree removes whole nodes, but all pages of a node carry the same
    stamps, so its order of pages must be a prefix of this one."""

    RANK = {"lru": lambda s: (s[0],), "lfu": lambda s: (s[1], s[0]), "fifo": lambda s: (s[2],)}

    def __init__(self, page_size):
        self.page_size, self.pages, self.locks, self.t = page_size, {}, Counter(), 0

    def prefixes(self, tokens):
        return [tuple(tokens[:j]) for j in range(self.page_size, len(tokens) + 1, self.page_size)]

    def match_length(self, tokens):
        length = 0
        for p in self.prefixes(tokens):
            if p not in self.pages:
                break
            length = len(p)
        return length

    def match(self, tokens):
        length = self.match_length(tokens)
        self.t += 1
        for p in self.prefixes(tokens[:length]):
            self.pages[p][0] = self.t
            self.pages[p][1] += 1
        return length

    def insert(self, tokens):
        if len(tokens) < self.page_size:
            return 0  # not one whole page: nothing to store, and the clock does not tick
        length = self.match_length(tokens)
        self.t += 1
        for p in self.prefixes(tokens):
            self.pages.setdefault(p, [self.t, 0, self.t])[0] = self.t
        return length

    def locked(self):
        return {p for prefix, n in self.locks.items() if n for p in self.prefixes(prefix)}

    def eviction_order(self, policy):
        locked, rank, order = self.locked(), self.RANK[policy], []
        children = Counter(p[:-self.page_size] for p in self.pages)
        candidates = {p for p in self.pages if not children[p] and p not in locked}
        while candidates:
            keys = sorted((rank(self.pages[p]), p) for p in candidates)
            assert len(keys) == 1 or keys[0][0] != keys[1][0], "the reference expects no ties"
            page = keys[0][1]
            order.append(page)
            candidates.remove(page)
            parent = page[:-self.page_size]
            children[parent] -= 1
            if parent and not children[parent] and parent not in locked:
                candidates.add(parent)
        return order


def stamps(cache):
    """The tree read back as the reference stores it: page-aligned prefix -> [last access, hits, created]."""
    pages, stack = {}, [(cache.root, ())]
    while stack:
        node, prefix = stack.pop()
        for child in node.children.values():
            run = prefix + child.key
            for j in range(len(prefix) + cache.page_size, len(run) + 1, cache.page_size):
                pages[run[:j]] = [child.last_access, child.hits, child.created]
            stack.append((child, run))
    return pages


def machine(page_size, policy):
    # few distinct pages, so sequences share prefixes often; two of them differ only in their last token
    templates = [(0,), (1,)] if page_size == 1 else [(0,) * page_size, (0,) * (page_size - 1) + (1,)]
    tails = st.lists(st.integers(0, 1), max_size=page_size - 1)
    sequences = st.builds(lambda pages, tail: [t for p in pages for t in p] + tail,
                          st.lists(st.sampled_from(templates), max_size=4), tails)

    class TreeVsReference(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.evicted = []
            self.cache = RadixCache(page_size=page_size, policy=policy, on_evict=self.evicted.append)
            self.ref = Reference(page_size)
            self.held = []  # (node, prefix) of every lock not yet undone

        @rule(tokens=sequences)
        def insert(self, tokens):
            assert self.cache.insert(tokens, ids_of(tokens)) == self.ref.insert(tokens)

        @rule(tokens=sequences, lock=st.booleans())
        def match(self, tokens, lock):
            result = self.cache.match_prefix(tokens)
            assert result.length == self.ref.match(tokens)
            assert flat(result.payloads) == ids_of(tokens[:result.length])
            if lock:
                self.cache.lock(result.node)
                self.held.append((result.node, tuple(tokens[:result.length])))
                self.ref.locks[self.held[-1][1]] += 1

        @rule(tokens=sequences)
        def peek(self, tokens):
            before = self.cache.dump()
            assert self.cache.peek_prefix(tokens) == self.ref.match_length(tokens)
            assert self.cache.dump() == before

        @precondition(lambda self: self.held)
        @rule(data=st.data())
        def unlock(self, data):
            node, prefix = self.held.pop(data.draw(st.integers(0, len(self.held) - 1)))
            self.cache.unlock(node)
            self.ref.locks[prefix] -= 1

        @rule(n=st.integers(0, 6 * page_size))
        def evict(self, n):
            order, locked = self.ref.eviction_order(policy), self.ref.locked()
            self.evicted.clear()
            freed = self.cache.evict(n)
            # a node's payload runs shallow -> deep; its pages leave deep -> shallow
            gone = [p for payload in self.evicted for p in reversed(payload) if len(p) % page_size == 0]
            assert gone == order[:len(gone)]
            assert freed == len(gone) * page_size
            assert freed >= n or gone == order           # enough, or everything evictable
            if self.evicted:
                assert freed - len(self.evicted[-1]) < n   # and not one node more than needed
            assert not locked & set(gone)
            for p in gone:
                del self.ref.pages[p]

        @invariant()
        def agrees(self):
            self.cache.check_invariants()
            assert stamps(self.cache) == self.ref.pages  # same pages, and both clocks tick once per match or insert
            assert self.cache.total_size == len(self.ref.pages) * page_size
            assert self.cache.protected_size == len(self.ref.locked()) * page_size

    return TreeVsReference


@pytest.mark.parametrize("policy", ["lru", "lfu", "fifo"])
@pytest.mark.parametrize("page_size", [1, 4, 16])
def test_random_operations_agree_with_the_reference(page_size, policy):
    run_state_machine_as_test(machine(page_size, policy),
                              settings=settings(max_examples=100, stateful_step_count=40, deadline=None))


# -- the public face -----------------------------------------------------------------------------------------------

def test_the_tree_is_exported_at_the_top_and_holds_no_torch():
    import subprocess
    import sys

    import teachspec

    assert teachspec.RadixCache is RadixCache
    # imported on its own, the tree must not pull in torch: it is a data structure a student reads in one sitting
    code = "import sys, teachspec.radix.tree; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
