"""FurcHash and the ring against their definitions: MurmurHash64A byte by byte as hash.c writes it, FurcHash's
consistency (growing the range moves few keys), the ring's spread and what a lost worker moves."""

import random

import pytest

from teachspec.routing import hashing as H

MASK = (1 << 64) - 1


def murmur_reference(data: bytes, seed: int) -> int:
    """MurmurHash64A as hash.c spells it: 8-byte words, then a switch over the 1-7 tail bytes, one shift each."""
    h = (seed ^ (len(data) * H.M)) & MASK
    n = len(data) // 8 * 8
    for i in range(0, n, 8):
        k = sum(data[i + j] << (8 * j) for j in range(8))
        k = k * H.M & MASK
        k ^= k >> H.R
        k = k * H.M & MASK
        h ^= k
        h = h * H.M & MASK
    tail = data[n:]
    for j in reversed(range(len(tail))):  # case 7: h ^= data[6] << 48; ... fall through to case 1
        h ^= tail[j] << (8 * j)
    if tail:
        h = h * H.M & MASK
    h ^= h >> H.R
    h = h * H.M & MASK
    h ^= h >> H.R
    return h


@pytest.mark.parametrize("length", [0, 1, 3, 7, 8, 9, 15, 16, 23, 40])
def test_murmur_matches_the_byte_by_byte_definition(length):
    data = bytes(random.Random(length).randrange(256) for _ in range(length))
    assert H.murmur_hash_64a(data) == murmur_reference(data, H.SEED)
    assert H.murmur_hash_64a(data, 7) == murmur_reference(data, 7)
    assert 0 <= H.murmur_hash_64a(data) < 2 ** 64


def test_furc_hash_is_deterministic_and_in_range():
    keys = [f"header:x-session-id:tenant {i}" for i in range(300)]
    for m in (1, 2, 3, 10, 1000, H.FURC_MODULUS):
        values = [H.furc_hash(k, m) for k in keys]
        assert values == [H.furc_hash(k, m) for k in keys]
        assert all(0 <= v < m for v in values) if m > 1 else set(values) == {0}


def test_furc_hash_is_consistent_growing_the_range_moves_few_keys():
    """The defining property: from m to m + 1 buckets only about 1/(m + 1) of the keys move, all to the new one."""
    keys = [f"key {i}" for i in range(3000)]
    for m in (5, 10, 17):
        before = [H.furc_hash(k, m) for k in keys]
        after = [H.furc_hash(k, m + 1) for k in keys]
        moved = [(b, a) for b, a in zip(before, after) if a != b]
        assert len(moved) / len(keys) < 2 / (m + 1)
        assert {a for _, a in moved} <= {m}


def test_furc_hash_spreads_keys_as_the_router_does():
    """Level by level: bucket b >= 2 has probability 1/8 each. At level 1 the router (unlike hash.c, which
    returns 0 there) tries one more bit, level 0: bucket 1 gets 1/8 + 1/16 and bucket 0 only 1/16."""
    counts = [0] * 8
    for i in range(4000):
        counts[H.furc_hash(f"k{i}", 8)] += 1
    assert all(420 < c < 580 for c in counts[2:])  # 500 expected
    assert 190 < counts[0] < 310 and 660 < counts[1] < 840  # 250 and 750 expected


def test_fbi_hash_widens_the_furc_value_with_one_more_murmur():
    key = "http://127.0.0.1:8000:0"
    furc = H.furc_hash(key, H.FURC_MODULUS)
    assert H.fbi_hash(key) == murmur_reference(furc.to_bytes(4, "little"), H.SEED)
    assert H.session_key("tenant 3") == "header:x-session-id:tenant 3"


def test_ring_spreads_keys_and_a_lost_worker_moves_only_its_own():
    urls = [f"http://127.0.0.1:{8000 + i}" for i in range(3)]
    ring, smaller = H.Ring(urls), H.Ring(urls[:2])
    assert len(ring.hashes) == 3 * H.VIRTUAL_NODES
    keys = [H.session_key(f"tenant {i}") for i in range(600)]
    owners = [ring.lookup(k) for k in keys]
    assert all(150 < owners.count(w) < 250 for w in range(3))  # 200 each expected
    for key, owner in zip(keys, owners):
        if owner != 2:
            assert smaller.lookup(key) == owner  # keys of the surviving workers stay where they were
