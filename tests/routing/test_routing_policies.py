"""Each policy's rule on hand-made replicas: the loads, the text and the key set, the pick checked. The cache_aware
checks are functions so that they also run against a mutant that must fail them."""

import pytest

from teachspec.routing import POLICIES
from teachspec.routing.policies import CacheAware, ConsistentHash, hash_key, make_policy

UP2, UP3 = [True, True], [True, True, True]
PREFIX = "You answer questions about the json module. " * 2  # 90 characters


def test_make_policy_knows_every_name_and_refuses_others():
    assert [make_policy(name, 2).name for name in POLICIES] == list(POLICIES)
    with pytest.raises(ValueError, match="must be one of"):
        make_policy("least_connections", 2)
    with pytest.raises(ValueError, match="cache_aware's"):
        make_policy("round_robin", 2, cache_threshold=0.5)
    with pytest.raises(ValueError, match="cache_threshold"):
        make_policy("cache_aware", 2, cache_threshold=1.5)


def test_round_robin_cycles_over_the_live_replicas():
    p = make_policy("round_robin", 3)
    assert [p.choose("x", "", [0] * 3, UP3) for _ in range(4)] == [0, 1, 2, 0]
    assert [p.choose("x", "", [0] * 3, [True, False, True]) for _ in range(4)] == [0, 2, 0, 2]  # count 4, 5, ...


def test_random_is_seeded_and_never_picks_a_dead_replica():
    picks = [make_policy("random", 3, seed=4).choose("x", "", [0] * 3, UP3) for _ in range(5)]
    assert len(set(picks)) == 1  # the same seed, the same first draw
    p = make_policy("random", 3, seed=1)
    assert {p.choose("x", "", [0] * 3, [True, False, True]) for _ in range(50)} == {0, 2}


def test_power_of_two_takes_the_less_loaded_of_two():
    p = make_policy("power_of_two", 2, seed=0)
    assert {p.choose("x", "", [5, 2], UP2) for _ in range(20)} == {1}
    p3 = make_policy("power_of_two", 3, seed=0)
    picks = [p3.choose("x", "", [9, 5, 0], UP3) for _ in range(60)]
    assert 0 not in picks and picks.count(2) > picks.count(1)  # the busiest never wins a pair


def test_consistent_hash_follows_the_session_key_and_falls_back_to_the_first_live():
    p = make_policy("consistent_hash", 3)
    owner = p.choose("any text", "tenant 4", [0] * 3, UP3)
    assert all(p.choose(f"other text {i}", "tenant 4", [i, 0, 0], UP3) == owner for i in range(5))
    alive = [r != owner for r in range(3)]
    assert p.choose("any text", "tenant 4", [0] * 3, alive) == alive.index(True)
    urls = [f"http://127.0.0.1:{9000 + i}" for i in range(3)]
    assert ConsistentHash(3, urls).ring.hashes != p.ring.hashes  # the URLs place the replicas


def test_the_routers_worker_order_sets_round_robins_turns_and_breaks_every_tie():
    rr = make_policy("round_robin", 3, order=[2, 0, 1])
    assert [rr.choose("x", "", [0] * 3, UP3) for _ in range(4)] == [2, 0, 1, 2]
    ca = make_policy("cache_aware", 2, order=[1, 0])
    assert ca.choose("a first prompt", "", [0, 0], UP2) == 1      # even loads: the first in the router's order
    assert ca.choose("another prompt", "", [0, 1], UP2) == 0      # uneven: still the least loaded
    ch = make_policy("consistent_hash", 3, order=[2, 0, 1])
    owner = ch.choose("any text", "tenant 4", [0] * 3, UP3)
    alive = [r != owner for r in range(3)]
    assert ch.choose("any text", "tenant 4", [0] * 3, alive) == next(r for r in [2, 0, 1] if alive[r])


@pytest.mark.parametrize("order", [[0, 0], [0, 1, 2], [1], [True, 0], ["0", 1], [0.0, 1]])
def test_an_order_that_is_not_the_replicas_once_each_is_refused(order):
    with pytest.raises(ValueError, match=r"order must list the replicas 0 \.\. 1 once each"):
        make_policy("round_robin", 2, order=order)


def test_the_hash_key_is_the_header_else_the_request():
    assert hash_key("text", "tenant 1") == "header:x-session-id:tenant 1"
    assert hash_key("short", "") == "request:short"
    assert hash_key("x" * 101, "").startswith("request_hash:")


# -- cache_aware ----------------------------------------------------------------------------------------------------

def check_prefix_goes_where_it_is_held(make) -> None:
    p = make()
    assert p.choose(PREFIX + "first question", "", [0, 0], UP2) == 0   # nothing matches: least loaded, first
    assert p.choose("unrelated text entirely", "", [1, 0], UP2) == 1   # nothing matches: least loaded
    assert p.choose(PREFIX + "second question", "", [3, 0], UP2) == 0  # the prefix is held by 0, though busier


def check_balance_needs_both_thresholds(make) -> None:
    for loads, expected in (([70, 0], 1),    # 70 > 64 and 70 > 0 * 1.5: imbalanced, shortest queue
                            ([64, 0], 0),    # 64 is not > 64: balanced, cache affinity
                            ([140, 90], 0),  # 50 apart: balanced
                            ([200, 135], 0),  # 65 apart but 200 < 135 * 1.5: balanced
                            ([210, 139], 1)):  # 71 apart and 210 > 208.5: imbalanced
        p = make()
        p.choose(PREFIX + "q", "", [0, 0], UP2)
        assert p.choose(PREFIX + "q2", "", loads, UP2) == expected, loads


def check_threshold_is_strict(make) -> None:
    held = "a" * 30
    for text, expected in ((held + "b" * 70, 1),   # rate 0.30 is not > 0.3: least loaded
                           (held + "b" * 69, 0)):  # rate 30/99 > 0.3: the holder, though busier
        p = make()
        p.choose(held + "c" * 70, "", [0, 0], UP2)
        assert p.choose(text, "", [1, 0], UP2) == expected, len(text)


CHECKS = [check_prefix_goes_where_it_is_held, check_balance_needs_both_thresholds, check_threshold_is_strict]


@pytest.mark.parametrize("check", CHECKS)
def test_cache_aware_rules(check):
    check(lambda: make_policy("cache_aware", 2))


class IgnoresThreshold(CacheAware):
    """A mutant: any match at all counts as affinity."""

    def __init__(self, replicas):
        super().__init__(replicas, cache_threshold=0.0)


class NeverBalances(CacheAware):
    """A mutant: the balance rule needs only the absolute gap."""

    def imbalanced(self, loads, live):
        low, high = min(loads[i] for i in live), max(loads[i] for i in live)
        return high - low > self.config.balance_abs_threshold


@pytest.mark.parametrize("mutant, check", [(IgnoresThreshold, check_threshold_is_strict),
                                           (NeverBalances, check_balance_needs_both_thresholds)])
def test_the_checks_catch_a_mutant(mutant, check):
    with pytest.raises(AssertionError):
        check(lambda: mutant(2))


def test_cache_aware_remembers_text_sent_while_balancing_and_forgets_a_dead_replica():
    p = make_policy("cache_aware", 2, balance_abs_threshold=1, balance_rel_threshold=1.0)
    assert p.choose(PREFIX + "q", "", [5, 0], UP2) == 1 and p.decisions == ["balance"]
    assert p.choose(PREFIX + "q2", "", [0, 0], UP2) == 1 and p.decisions[-1] == "affinity"
    p.remove(1)
    assert p.tree.size(1) == 0
    assert p.choose(PREFIX + "q3", "", [0, 0], [True, False]) == 0


def test_smallest_tree_is_the_older_low_match_rule():
    p = make_policy("cache_aware", 2, low_match="smallest_tree")
    p.choose("a long text sent to the first replica", "", [0, 0], UP2)
    assert p.choose("something else", "", [0, 5], UP2) == 1  # the emptier tree, though busier
