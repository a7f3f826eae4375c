"""Consistent hashing as vllm-router does it: FurcHash on a ring of virtual nodes.

Consistent hashing (Karger et al., "Consistent Hashing and Random Trees", STOC 1997) places every worker at many
points of a circle of hash values and sends a key to the first worker point at or after the key's own hash,
wrapping past the top. Adding or removing a worker moves only the keys of the arcs it owned: about 1/N of them,
where a plain `hash(key) % N` would move almost all. Each worker gets `VIRTUAL_NODES` points, named
"{url}:{i}", so that the arcs even out (with one point each, two workers would split the circle unevenly).

vllm-router (src/policies/consistent_hash.rs) hashes the points and the keys with `fbi_hash`:

    fbi_hash(s) = MurmurHash64A(le32(furc_hash(s, 2**23 - 1)), seed=4193360111)

FurcHash (mcrouter, lib/fbi/hash.c) is itself a consistent hash of a key onto the range [0, m): it reads a
stream of pseudo-random bits of the key (MurmurHash64A of the key, then of the previous 64-bit word, again and
again), finds the highest "level" d whose bit is 1, then builds a d-bit number from bits FURC_SHIFT apart;
a number >= m is retried, up to MAX_TRIES times, then 0. Growing m moves few keys, as jump consistent hash does.
Here it is only a well-mixed 23-bit hash, widened to 64 bits by one more MurmurHash64A.

One detail follows the router, not hash.c: when the level's bit is 0, hash.c decrements d and returns 0 at
d == 0; the router checks d == 0 *before* decrementing, so it may still try level 0 (and return 1). The ring
must match the live router's, so this module does what the router does.

The key a request hashes is `header:x-session-id:<value>` when the client sends that header (src/policies/
hash_key.rs; other headers and body fields come after it). The session key decides the replica; nothing about
the prompt does.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Sequence

MASK = (1 << 64) - 1
M = 0xC6A4A7935BD1E995         # MurmurHash64A's multiplier
R = 47                         # and its shift
SEED = 4193360111              # hash.c's seed, for every hash here
FURC_SHIFT = 23                # bits between two digits of a FurcHash draw
MAX_TRIES = 32                 # FurcHash draws before it gives up and returns 0
FURC_MODULUS = (1 << 23) - 1   # fbi_hash's range for furc_hash: the largest FurcHash supports
VIRTUAL_NODES = 160            # points per worker on vllm-router's ring
SESSION_HEADER = "x-session-id"


def murmur_hash_64a(data: bytes, seed: int = SEED) -> int:
    """Austin Appleby's MurmurHash64A of `data`: 8-byte little-endian words mixed into h, then the tail."""
    h = (seed ^ (len(data) * M)) & MASK
    whole = len(data) - len(data) % 8
    for i in range(0, whole, 8):
        k = int.from_bytes(data[i:i + 8], "little") * M & MASK
        k ^= k >> R
        k = k * M & MASK
        h = (h ^ k) * M & MASK
    if whole < len(data):  # the 1-7 bytes left, as one little-endian number
        h = (h ^ int.from_bytes(data[whole:], "little")) * M & MASK
    h ^= h >> R
    h = h * M & MASK
    return h ^ (h >> R)


def _rehash(k: int) -> int:
    """MurmurHash64A of one 64-bit word (hash.c's murmur_rehash_64A): the next word of FurcHash's bit stream."""
    return murmur_hash_64a(k.to_bytes(8, "little"))


class _Bits:
    """FurcHash's bit stream of a key: word 0 is MurmurHash64A(key), word n the rehash of word n - 1."""

    def __init__(self, key: bytes):
        self.words = [murmur_hash_64a(key)]

    def __getitem__(self, i: int) -> int:
        while len(self.words) <= i >> 6:
            self.words.append(_rehash(self.words[-1]))
        return self.words[i >> 6] >> (i & 63) & 1


def furc_hash(key: str | bytes, m: int) -> int:
    """FurcHash of `key` onto [0, m), as vllm-router computes it (see the module docstring)."""
    if m <= 1:
        return 0
    bits = _Bits(key.encode() if isinstance(key, str) else key)
    d = (m - 1).bit_length()  # the least d with m <= 2**d
    a = d
    for _ in range(MAX_TRIES):
        while not bits[a]:  # find the highest level whose bit is set
            if d == 0:
                return 0
            d -= 1
            a = d
        a += FURC_SHIFT
        num = 1
        for _ in range(d - 1):  # the level's bit is the leading 1; d - 1 more bits below it
            num = num << 1 | bits[a]
            a += FURC_SHIFT
        if num < m:
            return num
    return 0


@functools.lru_cache(maxsize=1 << 16)  # a ring hashes its points again for every new policy
def fbi_hash(key: str) -> int:
    """vllm-router's 64-bit hash of a ring point or a key: FurcHash to 23 bits, widened by MurmurHash64A."""
    return murmur_hash_64a(furc_hash(key, FURC_MODULUS).to_bytes(4, "little"))


def session_key(value: str) -> str:
    """What the router hashes for a request that carries `x-session-id: value`."""
    return f"header:{SESSION_HEADER}:{value}"


class Ring:
    """The hash ring of some workers: VIRTUAL_NODES points each, a key owned by the first point at or after it."""

    def __init__(self, urls: Sequence[str], virtual_nodes: int = VIRTUAL_NODES):
        if not urls:
            raise ValueError("urls is empty: a ring needs at least one worker")
        points = {}
        for worker, url in enumerate(urls):
            for i in range(virtual_nodes):
                points[fbi_hash(f"{url}:{i}")] = worker  # a later worker's equal hash replaces it, as a BTreeMap's
        self.hashes = sorted(points)
        self.owners = [points[h] for h in self.hashes]

    def lookup(self, key: str) -> int:
        """The worker (an index into `urls`) that owns `key`: the first point with hash >= fbi_hash(key)."""
        i = bisect.bisect_left(self.hashes, fbi_hash(key))
        return self.owners[i % len(self.hashes)]  # past the last point: wrap to the first
