"""Prefix reuse for the engine: the radix tree holding real KV for both models, under a token budget.

A request's life, as in SGLang's scheduler (`cache_finished_req`):

1. `start`: match the prompt against the tree, but at most len(prompt) - 1 tokens, so the target still has one
   token to run and logits for the next one; lock the matched path (the running request's prefix must not be
   evicted under it); glue the matched nodes' KV into fresh caches for the target and the draft.
2. the engine computes only the uncached suffix, speculating as usual;
3. `finish`: unlock, then insert the committed tokens (prompt and output, never a rejected guess) with their KV.
   Only the new suffix is stored; room is made first by evicting unlocked leaves (LRU by default).

A lock that is never given back pins its tokens for good: eviction can never free them. So the engine holds its
lock as a context manager, `lease`, which gives it back on every way out of the request (an exception, a
KeyboardInterrupt, an event subscriber that raises), exactly once:

    with prefix.lease(request, ids) as lease:       # start: match and lock; the block begins once the lock is held
        ...                                         # run the request on lease.target / lease.draft
        prefix.finish(request, lease, tokens, target, draft)   # the normal way out: store, then unlock
                                                    # any other way out: unlock only, nothing stored

Each node's payload is a `PairKV`: the same run of tokens' keys and values in the target and in the draft. A
request that ran without the draft model stores no draft KV; a later request that wants the draft recomputes the
draft's prefix itself (it is the cheap model).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from transformers import DynamicCache

from teachspec import kv
from teachspec.events import EventLog
from teachspec.models.pair import Pair
from teachspec.radix.tree import Node, RadixCache


@dataclass
class PairKV:
    target: kv.KVSlice
    draft: kv.KVSlice | None

    def __len__(self) -> int:
        return len(self.target)

    def __getitem__(self, index: slice) -> "PairKV":
        return PairKV(self.target[index], self.draft[index] if self.draft is not None else None)


@dataclass
class Lease:
    """What a running request holds: its locked node and the caches assembled from the matched prefix."""

    request: int
    node: Node
    cached: int
    target: DynamicCache
    draft: DynamicCache | None  # None when some matched node has no draft KV
    held: bool = True           # the lock is still taken; False once given back, so it goes back only once


class PrefixCache:
    """The radix tree holding both models' KV under a budget of `budget` tokens; see the module docstring."""

    def __init__(self, pair: Pair, budget: int, events: EventLog, policy: str = "lru", page_size: int = 1):
        self.pair, self.budget = pair, budget
        self.tree = RadixCache(page_size=page_size, policy=policy, events=events)

    def start(self, request: int, ids: list[int]) -> Lease:
        """Match `ids` (all but the last token), lock the match for `request` and build its caches.

        Prefer `lease`, which also gives the lock back. If anything fails once the lock is taken (a Lock event
        subscriber that raises, building the caches, an interrupt), start gives it back before re-raising."""
        match = self.tree.match_prefix(ids[:-1], request)
        before = self.tree.holds(match.node, request)
        try:
            self.tree.lock(match.node, request)
            target = kv.assemble(self.pair.target, [p.target for p in match.payloads])
            draft = None
            if self.pair.draft is not None and all(p.draft is not None for p in match.payloads):
                draft = kv.assemble(self.pair.draft, [p.draft for p in match.payloads])
        except BaseException:
            if self.tree.holds(match.node, request) > before:  # lock() may raise after taking the lock (its event)
                self.tree.unlock(match.node, request)
            raise
        return Lease(request, match.node, match.length, target, draft)

    @contextmanager
    def lease(self, request: int, ids: list[int]) -> Iterator[Lease]:
        """`start` as a context manager: the lock is given back on every way out of the `with` block.

        Call `finish` inside the block on the normal way out (it stores the tokens, then unlocks). Any other way
        out, an exception or a KeyboardInterrupt anywhere in the block (finish included) or a block that never
        calls finish, unlocks without storing. Either way the lock goes back exactly once. The block is entered
        only after the lock is taken; if start fails, it has already given the lock back itself."""
        lease = self.start(request, ids)
        try:
            yield lease
        finally:
            self.release(lease)

    def release(self, lease: Lease) -> None:
        """Give back the lease's lock without storing anything; nothing to do once it is back (finish, or here)."""
        if lease.held:
            lease.held = False  # first: unlock emits its event after the tree has let go, and a subscriber may raise
            self.tree.unlock(lease.node, lease.request)

    def finish(self, request: int, lease: Lease, tokens: list[int], target: DynamicCache,
               draft: DynamicCache | None) -> None:
        """Store `tokens` (whose KV the caches hold) for later requests, then unlock the request's prefix."""
        if request != lease.request:
            raise ValueError(f"request must be the lease's own request {lease.request}, got {request}")
        if not lease.held:
            raise ValueError(f"request {request}'s lease was already given back: finish stores and unlocks once")
        n = min(len(tokens), kv.length(target))
        tokens = tokens[:n]
        try:
            if n > self.budget:
                warnings.warn(f"a request of {n} tokens is longer than the whole cache (cache_tokens="
                              f"{self.budget}); it ran uncached and is not stored", stacklevel=3)
                return
            # make room while the prefix is still locked, so eviction cannot take the part we build on
            over = self.tree.total_size + n - self.tree.peek_prefix(tokens) - self.budget
            if over > 0:
                self.tree.evict(over, request)
        finally:
            self.release(lease)
        new = n - self.tree.peek_prefix(tokens)  # again: eviction may have taken an unlocked tail of our path
        if n == 0 or self.tree.total_size + new > self.budget:
            return  # what is left is locked by running requests: nothing more fits
        with_draft = draft is not None and kv.length(draft) >= n
        payload = PairKV(kv.view(target, 0, n), kv.view(draft, 0, n) if with_draft else None)
        self.tree.insert(tokens, payload, request)
