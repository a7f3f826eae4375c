"""A radix tree of cached token prefixes: the data structure behind RadixAttention.

RadixAttention (Zheng et al., "SGLang: Efficient Execution of Structured Language Model Programs", arXiv:2312.07104,
section 3) keeps the KV cache of finished requests instead of freeing it, indexed by the token ids that produced it.
A new request whose prompt starts with a cached run of tokens skips the prefill of that run. The index is a radix
tree: every edge is labelled with a run of token ids, every node holds the KV of its run, and the tokens on the path
from the root to a node are the prefix that path's KV was computed from.

    root ── (1 2 3) ─┬─ (4 5)       "1 2 3 4 5" and "1 2 3 9" are cached;
                     └─ (9)         their shared "1 2 3" is stored once.

The operations, named as in SGLang's mem_cache/radix_cache.py:

match_prefix   the longest cached prefix of a query. It CHANGES the tree: it stamps the access time and hit count
               of every node on the path, and when the match ends inside a node it splits that node in two, so the
               match ends on a node boundary and the caller gets a node to lock. `peek_prefix` gives the same length
               and changes nothing.
insert         stores a sequence's KV and returns how many leading tokens were already cached, so the caller can
               free its own duplicate copy of them.
lock, unlock   a running request pins its prefix: every node on the path root -> node gains one lock. Locked tokens
               are *protected*, the others *evictable*; only the 0 <-> 1 transitions move tokens between the two.
               Each lock is a *lease* held by the request that took it: unlock(node, request) undoes one earlier
               lock(node, request) and refuses anything else (a second unlock, a node that request never locked,
               another request's lock) before it changes anything. Counting alone could not tell: after lock(a)
               and lock(b) for b below a, a second unlock(a) finds a lock on a (b's) and would take it.
evict          frees memory by removing unlocked leaves, cheapest first under the policy (LRU by default). Removing
               a leaf can leave its parent an unlocked leaf, which becomes a candidate in turn (the cascade). Only
               leaves go, so whatever stays cached is still a path from the root.

The tree is pure Python. A node's `payload` is opaque (a list of slot ids, a handle into a KV pool, an array): it
only needs `len()` and slicing, `payload[i]` belonging to `key[i]`. A payload that would pin a large buffer when
sliced should copy on slicing (SGLang `.clone()`s both halves of a split); the tree only ever slices. With
`page_size` > 1 the KV lives in pages of that many tokens: keys are whole pages and matches count whole pages, so a
hit loses on average (page_size - 1) / 2 tokens.

Invariants, recounted from scratch by `check_invariants()` (and after every operation when `debug=True`):
    evictable_size + protected_size == total_size == the tokens held by all nodes
    a non-root node never has more locks than its parent      (a lock covers the whole path to the root)
    a node's locks == the leases held on it and below it      (every lock belongs to a request that took it)
    siblings start with different first tokens (first pages)  (so a lookup follows at most one edge)
    0 < len(key) == len(payload), and len(key) is a multiple of page_size
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from numbers import Integral
from typing import Any

from teachspec.events import EventLog, Evict, Insert, Lock, Match, ReplicaLog, Split, Unlock
from teachspec.renamed import old_names
from teachspec.validate import plain_token_ids


class InvariantError(RuntimeError):
    """The tree's bookkeeping disagrees with a recount from scratch: a bug in the tree, never in its caller."""


@dataclass(slots=True, eq=False, repr=False)
class Node:
    id: int                      # stable for the node's life, never reused; the root is 0
    key: tuple[int, ...]         # the token run on the edge from the parent
    payload: Any                 # the KV of `key`: payload[i] belongs to key[i]
    parent: Node | None          # None for the root and for evicted nodes
    children: dict[Hashable, Node] = field(default_factory=dict)  # by first token (first page when paged)
    locks: int = 0               # leases held on this node or below it; > 0 means protected
    last_access: float = 0       # clock of the last match or insert that reached it (LRU)
    hits: int = 0                # matches that reached it (LFU)
    created: float = 0           # clock when its tokens were first stored (FIFO)

    def __repr__(self) -> str:
        return f"Node(id={self.id}, tokens={len(self.key)}, locks={self.locks})"


# Eviction orders: the leaf with the smallest key goes first. The node id breaks ties, so the order is deterministic.
EVICTION: dict[str, Callable[[Node], tuple]] = {
    "lru": lambda n: (n.last_access, n.id),            # least recently used
    "lfu": lambda n: (n.hits, n.last_access, n.id),    # least frequently used, then least recently
    "fifo": lambda n: (n.created, n.id),               # oldest first
}


@dataclass(slots=True)
class MatchResult:
    length: int                  # tokens matched, a multiple of page_size
    node: Node                   # the deepest node matched (the root when length == 0): what a request locks
    payloads: list[Any]          # the payload of every node root -> node, in order, `length` tokens in all
    path: list[int]              # node ids root -> node


@dataclass(slots=True)
class MemoryUse:
    """A token budget split three ways. Engines usually report `cached` as used, although evict() can free it."""
    budget: int
    in_use: int                  # protected: pinned by running requests
    cached: int                  # evictable: kept in case it is reused
    free: int


@dataclass(slots=True)
class RadixMetrics:
    """Counters in tokens, like vLLM's prefix_cache_queries/hits. A query counts in full, including any partial
    last page the tree cannot match, so the page-size loss shows up in the hit rate."""
    window: int = 100                                      # matches in window_hit_rate
    hit_tokens: int = 0                                    # matched, over all matches
    query_tokens: int = 0                                  # asked for, over all matches
    cached_tokens: dict[int, int] = field(default_factory=dict)  # request -> tokens its latest match found
    evictions: int = 0                                     # nodes evicted
    evicted_tokens: int = 0
    recent: deque[tuple[int, int]] = field(init=False)     # (hit, query) of the last `window` matches

    def __post_init__(self) -> None:
        self.recent = deque(maxlen=self.window)

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.query_tokens if self.query_tokens else 0.0

    @property
    def window_hit_rate(self) -> float:
        query = sum(q for _, q in self.recent)
        return sum(h for h, _ in self.recent) / query if query else 0.0

    def record_match(self, request: int, hit: int, query: int) -> None:
        self.hit_tokens += hit
        self.query_tokens += query
        self.recent.append((hit, query))
        if request != -1:  # -1 is "no request": a what-if lookup, not a prefill
            self.cached_tokens[request] = hit


def _check_count(name: str, value: Any, minimum: int) -> None:
    if not isinstance(value, Integral) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def _check_request(request: Any) -> int:
    """A request id as a plain int: -1 for "no request", else >= 0. It keys the lease ledger, so it must match."""
    _check_count("request", request, -1)
    return int(request)


def _as_tokens(tokens: Any) -> tuple[int, ...]:
    """Token ids as a tuple of Python ints (hashable, so a run can be a dict key); anything else is refused."""
    if isinstance(tokens, (str, bytes, bytearray, Mapping)) or not hasattr(tokens, "__len__") \
            or not hasattr(tokens, "__getitem__"):
        raise TypeError(f"tokens must be a sequence of token ids (a list, tuple or 1-D integer array), "
                        f"got {type(tokens).__name__}")
    if plain_token_ids(tokens):
        return tuple(tokens)
    for i, t in enumerate(tokens):
        if not isinstance(t, Integral) or isinstance(t, bool):
            raise TypeError(f"tokens[{i}] must be an int token id, got {type(t).__name__} {t!r}")
        if t < 0:
            raise ValueError(f"tokens[{i}] must be a non-negative token id, got {t}")
    return tuple(int(t) for t in tokens)


class RadixCache:
    """A radix tree over token ids whose nodes hold opaque KV payloads; see the module docstring.

    `clock()` must return non-decreasing numbers; by default a counter that ticks once per match or insert, so LRU
    order depends only on the order of operations. `on_evict(payload)` is called for every evicted node, for the
    owner to free that KV. Every operation emits its events into `events` when one is given.
    """

    def __init__(self, page_size: int = 1, policy: str = "lru", events: EventLog | ReplicaLog | None = None,
                 clock: Callable[[], float] | None = None, on_evict: Callable[[Any], None] | None = None,
                 window: int = 100, debug: bool = False):
        _check_count("page_size", page_size, 1)
        _check_count("window", window, 1)
        if policy not in EVICTION:
            raise ValueError(f"policy must be one of {sorted(EVICTION)}, got {policy!r}")
        for name, fn in (("clock", clock), ("on_evict", on_evict)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be callable or None, got {type(fn).__name__}")
        if events is not None and not isinstance(events, (EventLog, ReplicaLog)):
            raise TypeError(f"events must be an EventLog, a ReplicaLog (one replica's share of a cluster's log) or "
                            f"None, got {type(events).__name__}")
        self.page_size, self.policy, self.events = page_size, policy, events
        self.clock = clock if clock is not None else itertools.count(1).__next__
        self.on_evict, self.debug = on_evict, debug
        self.metrics = RadixMetrics(window=window)
        self.root = Node(0, (), [], None)
        self._ids = itertools.count(1)
        self._evictable = 0                    # tokens in unlocked nodes
        self._protected = 0                    # tokens in locked nodes
        # The eviction candidates (unlocked non-root leaves), kept up to date by every operation so evict() need
        # not search the whole tree; evict() heapifies them by policy on each call: O(c log c) for c candidates.
        self._leaves: set[Node] = set()
        # Who holds which lock: (request, node) -> lock(node, request) calls not undone yet. node.locks says how
        # many leases cover a node; this ledger says whose they are, so unlock can check the lease it undoes.
        self._leases: dict[tuple[int, Node], int] = {}

    # -- sizes ---------------------------------------------------------------------------------------------------

    @property
    def evictable_size(self) -> int:
        return self._evictable

    @property
    def protected_size(self) -> int:
        return self._protected

    @property
    def total_size(self) -> int:
        return self._evictable + self._protected

    def memory(self, budget: int) -> MemoryUse:
        """How a pool of `budget` tokens splits into in use (protected), cached (evictable) and free."""
        _check_count("budget", budget, 0)
        if budget < self.total_size:
            raise ValueError(f"budget must be >= total_size ({self.total_size} tokens are cached), got {budget}")
        return MemoryUse(budget, self._protected, self._evictable, budget - self.total_size)

    # -- lookup --------------------------------------------------------------------------------------------------

    def _first(self, key: tuple[int, ...], i: int) -> Hashable:
        """The child-table key of the run key[i:]: its first token, or its first page when paged."""
        return key[i] if self.page_size == 1 else key[i:i + self.page_size]

    def _aligned(self, key: tuple[int, ...]) -> tuple[int, ...]:
        return key[:len(key) - len(key) % self.page_size]

    def _walk(self, key: tuple[int, ...]) -> tuple[list[Node], int, Node | None, int]:
        """Follow `key` (page-aligned) down from the root, changing nothing.

        Returns (path of fully matched nodes from the root, tokens matched, the node the match ends inside or None,
        how many of that node's tokens matched)."""
        node, path, i = self.root, [self.root], 0
        while i < len(key) and (child := node.children.get(self._first(key, i))) is not None:
            if key[i:i + len(child.key)] == child.key:  # the usual case, compared in one step: the whole edge
                n = len(child.key)
            else:
                n = 0
                for a, b in zip(child.key, key[i:]):
                    if a != b:
                        break
                    n += 1
            n -= n % self.page_size  # a page is shared only if all of it is; the first page always is
            i += n
            if n < len(child.key):
                return path, i, child, n
            path.append(child)
            node = child
        return path, i, None, 0

    def peek_prefix(self, tokens: Any) -> int:
        """How many leading tokens match_prefix would match, without splitting, touching or emitting anything."""
        return self._walk(self._aligned(_as_tokens(tokens)))[1]

    def match_prefix(self, tokens: Any, request: int = -1) -> MatchResult:
        """The longest cached prefix of `tokens`, in whole pages.

        THIS CHANGES THE TREE. Every node on the path gets last_access = now and one more hit (that is what LRU and
        LFU rank by), and if the match ends inside a node, that node is split there so that the match ends exactly
        at `result.node` (a Split event, then the Match event). Use peek_prefix for a lookup with no side effects.
        """
        query = _as_tokens(tokens)
        path, length, inside, at = self._walk(self._aligned(query))
        if inside is not None:
            path.append(self._split(inside, at, request))
        now = self.clock()
        for node in path[1:]:
            node.last_access = now
            node.hits += 1
        self.metrics.record_match(request, length, len(query))
        ids = [node.id for node in path]
        self._emit(Match, request, node=path[-1].id, length=length, path=ids)
        self._after()
        return MatchResult(length, path[-1], [node.payload for node in path[1:]], ids)

    # -- growing and shrinking -----------------------------------------------------------------------------------

    def _split(self, node: Node, at: int, request: int) -> Node:
        """Cut `node` after `at` tokens; the new parent takes the head and everything the head shares with it.

        `node` keeps its id and keeps the tail, so a node a request has already been handed (and locked) still
        ends where that request's prefix ends. Sizes and the leaf set do not change: no token comes or goes."""
        parent = node.parent
        head = Node(next(self._ids), node.key[:at], node.payload[:at], parent, locks=node.locks,
                    last_access=node.last_access, hits=node.hits, created=node.created)
        node.key, node.payload, node.parent = node.key[at:], node.payload[at:], head
        head.children[self._first(node.key, 0)] = node
        parent.children[self._first(head.key, 0)] = head
        self._emit(Split, request, node=node.id, new=head.id, parent=parent.id, at=at)
        return head

    def insert(self, tokens: Any, payload: Any, request: int = -1) -> int:
        """Store `payload` (one entry per token) as the KV of `tokens`; returns how many leading tokens were cached.

        Only the new suffix is stored, as one new leaf: the caller still owns payload[:cached], a duplicate of KV
        the tree already holds, and should free it. With page_size > 1 only whole pages are stored, and the
        caller also keeps the unaligned tail payload[len(tokens) // page_size * page_size:]. Inserting fewer
        tokens than one page (none at all, in particular) stores nothing, emits nothing and returns 0.
        """
        key = _as_tokens(tokens)
        if not (hasattr(payload, "__len__") and hasattr(payload, "__getitem__")):
            raise TypeError(f"payload must support len() and slicing (a list, an array, a KV handle), "
                            f"got {type(payload).__name__}")
        if len(payload) != len(key):
            raise ValueError(f"payload must hold one entry per token: len(payload) is {len(payload)}, "
                             f"len(tokens) is {len(key)}")
        key = self._aligned(key)
        if not key:
            return 0
        path, cached, inside, at = self._walk(key)
        if inside is not None:
            path.append(self._split(inside, at, request))
        now = self.clock()
        for node in path[1:]:
            node.last_access = now
        parent, leaf = path[-1], None
        if cached < len(key):
            leaf = Node(next(self._ids), key[cached:], payload[cached:len(key)], parent, last_access=now,
                        created=now)
            parent.children[self._first(leaf.key, 0)] = leaf
            self._evictable += len(leaf.key)
            self._refresh(leaf)
            self._refresh(parent)
        self._emit(Insert, request, node=leaf.id if leaf else -1, parent=parent.id, tokens=len(key) - cached,
                   cached=cached, ids=list(key[cached:]))
        self._after()
        return cached

    def _refresh(self, node: Node) -> bool:
        """Put `node` in or out of the eviction candidates; True if it is one now."""
        if node is not self.root and not node.children and node.locks == 0:
            self._leaves.add(node)
            return True
        self._leaves.discard(node)
        return False

    def evict(self, n_tokens: int, request: int = -1) -> int:
        """Remove unlocked leaves, lowest policy key first, until `n_tokens` are freed or no candidate is left.

        Returns the tokens freed: whole nodes go, so it can exceed `n_tokens`. A parent left as an unlocked leaf
        joins the candidates at once (the cascade), ranked by its own key. Locked nodes and the root never go."""
        _check_count("n_tokens", n_tokens, 0)
        rank = EVICTION[self.policy]
        heap = [(rank(node), node) for node in self._leaves]  # keys end in the unique id: nodes are never compared
        heapq.heapify(heap)
        freed = 0
        while freed < n_tokens and heap:
            _, node = heapq.heappop(heap)
            parent = node.parent
            del parent.children[self._first(node.key, 0)]
            node.parent = None  # marks it evicted: lock() refuses it from now on
            self._leaves.discard(node)
            self._evictable -= len(node.key)
            freed += len(node.key)
            self.metrics.evictions += 1
            self.metrics.evicted_tokens += len(node.key)
            if self._refresh(parent):
                heapq.heappush(heap, (rank(parent), parent))
            self._emit(Evict, request, node=node.id, parent=parent.id, tokens=len(node.key))
            if self.on_evict is not None:
                self.on_evict(node.payload)
        self._after()
        return freed

    # -- locks ---------------------------------------------------------------------------------------------------

    def _path_up(self, node: Node) -> list[Node]:
        """The nodes node -> root, root excluded; refuses a node that is not (or no longer) in this tree."""
        if not isinstance(node, Node):
            raise TypeError(f"node must be a Node (MatchResult.node), got {type(node).__name__}")
        path, top = [], node
        while top.parent is not None:
            path.append(top)
            top = top.parent
        if top is not self.root:
            raise ValueError(f"node {node.id} is not in this cache: it was evicted, or belongs to another RadixCache")
        return path

    def lock(self, node: Node, request: int = -1) -> None:
        """Protect the prefix root -> node from eviction (one more lock on every node of the path), as a lease of
        `request`: only unlock(node, request) with the same node and request gives it back.

        Locking the root, which an empty match returns, protects nothing; it is allowed so callers need no special
        case, and it is a lease like any other. The Lock event is emitted after the lock is taken: a subscriber
        that raises leaves it taken, and `holds` tells the caller so."""
        path = self._path_up(node)
        request = _check_request(request)
        self._leases[request, node] = self._leases.get((request, node), 0) + 1
        for n in path:
            if n.locks == 0:
                self._evictable -= len(n.key)
                self._protected += len(n.key)
            n.locks += 1
            self._leaves.discard(n)
        self._emit(Lock, request, node=node.id, locks=node.locks, protected=self._protected)
        self._after()

    def unlock(self, node: Node, request: int = -1) -> None:
        """Undo one lock(node, request). Anything else is refused before anything changes: a node this request
        holds no lock on (never locked, already unlocked, or locked by another request)."""
        path = self._path_up(node)
        request = _check_request(request)
        held = self._leases.get((request, node), 0)
        if held == 0:
            raise ValueError(self._refusal(node, request))
        if held == 1:
            del self._leases[request, node]
        else:
            self._leases[request, node] = held - 1
        for n in path:  # this lease counts on every node of the path, so none goes below zero
            n.locks -= 1
            if n.locks == 0:
                self._protected -= len(n.key)
                self._evictable += len(n.key)
                self._refresh(n)
        self._emit(Unlock, request, node=node.id, locks=node.locks, protected=self._protected)
        self._after()

    def holds(self, node: Node, request: int = -1) -> int:
        """How many locks on `node` `request` holds: its lock(node, request) calls not undone yet."""
        if not isinstance(node, Node):
            raise TypeError(f"node must be a Node (MatchResult.node), got {type(node).__name__}")
        return self._leases.get((_check_request(request), node), 0)

    def _refusal(self, node: Node, request: int) -> str:
        """Why unlock(node, request) is refused, with who does hold what, so the caller can find its mistake."""
        owners = sorted({r for r, n in self._leases if n is node})
        mine = sorted({n.id for r, n in self._leases if r == request})
        held = (f"node {node.id} is locked by requests {owners}" if owners else
                f"node {node.id} is locked only as part of longer locked prefixes" if node.locks else
                f"node {node.id} is not locked at all")
        own = f"request {request} holds locks on nodes {mine}" if mine else f"request {request} holds no locks"
        return (f"cannot unlock node {node.id}: it is not locked by request {request} ({held}; {own}); every "
                f"unlock must undo an earlier lock(node, request) of the same node by the same request")

    # -- checking and showing ------------------------------------------------------------------------------------

    def _emit(self, cls: type, request: int, **fields: Any) -> None:
        if self.events is not None:
            self.events.emit(cls, request=request, **fields)

    def _after(self) -> None:
        if self.debug:
            self.check_invariants()

    def check_invariants(self) -> None:
        """Recount everything from scratch and raise InvariantError where the tree disagrees with itself."""
        root = self.root
        if root.key or root.parent is not None or root.locks:
            raise InvariantError("the root must have an empty key, no parent and no locks")
        # every lock is a lease: a node's count is the leases held on it and on the nodes below it
        covered: dict[Node, int] = {}
        for (request, leased), count in self._leases.items():
            if count < 1:
                raise InvariantError(f"request {request} holds {count} leases on node {leased.id}")
            n = leased
            while n is not None and n is not root:
                covered[n] = covered.get(n, 0) + count
                n = n.parent
            if n is None:
                raise InvariantError(f"request {request} holds a lease on node {leased.id}, which is not in the tree")
        evictable = protected = 0
        leaves, ids, stack = set(), {root.id}, [root]
        while stack:  # an explicit stack: a long chain of splits must not hit Python's recursion limit
            node = stack.pop()
            for first, child in node.children.items():
                bad = None
                if child.parent is not node:
                    bad = f"its parent pointer is not node {node.id}"
                elif not child.key:
                    bad = "a non-root node has an empty key"
                elif len(child.key) % self.page_size:
                    bad = f"its key has {len(child.key)} tokens, not a multiple of page_size={self.page_size}"
                elif len(child.payload) != len(child.key):
                    bad = f"len(payload)={len(child.payload)} but len(key)={len(child.key)}"
                elif first != self._first(child.key, 0):  # filed under its own first page: siblings differ there
                    bad = f"it is filed under {first!r} but starts with {self._first(child.key, 0)!r}"
                elif child.locks < 0 or (node is not root and node.locks < child.locks):
                    bad = f"it has {child.locks} locks, its parent {node.id} has {node.locks}"
                elif child.locks != covered.get(child, 0):
                    bad = f"it has {child.locks} locks but {covered.get(child, 0)} leases on it and below it"
                elif child.id in ids:
                    bad = "its id is used twice"
                if bad:
                    raise InvariantError(f"node {child.id}: {bad}")
                ids.add(child.id)
                if child.locks:
                    protected += len(child.key)
                else:
                    evictable += len(child.key)
                    if not child.children:
                        leaves.add(child)
                stack.append(child)
        if (evictable, protected) != (self._evictable, self._protected):
            raise InvariantError(f"sizes: counted evictable={evictable} protected={protected}, maintained "
                                 f"evictable={self._evictable} protected={self._protected}")
        if leaves != self._leaves:
            raise InvariantError(f"eviction candidates: counted {sorted(n.id for n in leaves)}, maintained "
                                 f"{sorted(n.id for n in self._leaves)}")

    def dump(self, max_tokens: int = 12) -> str:
        """The tree as text: one line per node with its id, token run, length, locks, hits and last access."""
        lines = [f"RadixCache(page_size={self.page_size}, policy={self.policy!r}) total={self.total_size} "
                 f"evictable={self._evictable} protected={self._protected}"]
        stack = [(self.root, "", "")]  # (node, what its line starts with, what its children's lines start with)
        while stack:
            node, lead, indent = stack.pop()
            if node is self.root:
                lines.append("#0 root")
            else:
                run = " ".join(map(str, node.key[:max_tokens]))
                more = f" ... +{len(node.key) - max_tokens}" if len(node.key) > max_tokens else ""
                lines.append(f"{lead}#{node.id} [{run}{more}] len={len(node.key)} locks={node.locks} "
                             f"hits={node.hits} t={node.last_access:g}")
            kids = sorted(node.children.values(), key=lambda c: c.key)
            for i in reversed(range(len(kids))):  # pushed last to first, so popped first to last
                last = i == len(kids) - 1
                stack.append((kids[i], indent + ("└── " if last else "├── "), indent + ("    " if last else "│   ")))
        return "\n".join(lines)

    __str__ = dump

    def __repr__(self) -> str:
        return (f"RadixCache(page_size={self.page_size}, policy={self.policy!r}, total_size={self.total_size}, "
                f"protected_size={self._protected})")


__getattr__ = old_names(__name__, {"POLICIES": "EVICTION"}, globals())  # POLICIES: also the schedules
