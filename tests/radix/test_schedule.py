"""Scheduling policies: hand-made queues, Theorem 3.1 on random request trees, and the paper-shaped workloads."""

import random

import pytest

from teachspec import workloads as W
from teachspec.radix import RadixCache
from teachspec.radix.schedule import SCHEDULES, order, replay, simulate


def best_tokens(prompts):
    return round(W.best_hit_rate(prompts) * sum(map(len, prompts)))


def random_requests(rng, n, alphabet=3):
    """Prompts that branch off one another at random points: a random request tree, duplicates included."""
    prompts = []
    for _ in range(n):
        if prompts and rng.random() < 0.7:
            base = rng.choice(prompts)
            p = base[:rng.randint(0, len(base))] + [rng.randrange(alphabet) for _ in range(rng.randint(0, 5))]
        else:
            p = [rng.randrange(alphabet) for _ in range(rng.randint(1, 8))]
        prompts.append(p or [rng.randrange(alphabet)])
    return prompts


# -- ranking -----------------------------------------------------------------------------------------------------

def test_fcfs_is_arrival_order():
    assert order([[3], [1], [2]], "fcfs") == [0, 1, 2]
    assert order([], "dfs") == []


def test_lpm_ranks_by_cached_prefix_and_leaves_the_cache_untouched():
    cache = RadixCache()
    cache.insert([1, 2, 3, 4], range(4))
    cache.insert([5, 6], range(2))
    before, queries = cache.dump(), cache.metrics.query_tokens
    prompts = [[9, 9], [5, 6, 7], [1, 2, 3, 4], [1, 2, 3, 4, 5], [5, 6]]
    # reusable: 0, 2, 3, 4 and 1 tokens; [1 2 3 4] and [5 6] are cached whole, but their last tokens must run
    assert order(prompts, "lpm", cache) == [3, 2, 1, 4, 0]
    assert cache.dump() == before and cache.metrics.query_tokens == queries  # peeked (no split), never matched


def test_dfs_walks_the_heaviest_subtree_first_and_a_node_before_its_children():
    prompts = [[1, 2, 3], [4, 5], [1, 2, 9], [4, 6], [1, 2]]
    assert order(prompts, "dfs") == [4, 0, 2, 1, 3]
    assert order([[7], [1, 1], [1, 2], [1, 3]], "dfs") == [1, 2, 3, 0]  # three under [1] beat one under [7]
    assert order([[2, 2], [1, 1], [2, 2], [1, 1]], "dfs") == [0, 2, 1, 3]  # equal weights: earliest arrival
    assert order([[1, 2, 3], [1, 2]], "dfs", RadixCache()) == [1, 0]  # the cache is not looked at


# -- simulation --------------------------------------------------------------------------------------------------

def test_a_prompt_that_prefixes_another_should_run_first():
    prompts = [[1, 2, 3, 4], [1, 2]]
    assert replay(prompts, [0, 1], budget=10).cached == [0, 1]  # [1, 2] recomputes its last token
    assert replay(prompts, [1, 0], budget=10).cached == [2, 0]
    assert simulate(prompts, "dfs", budget=4).hit_tokens == best_tokens(prompts) == 2


def test_eviction_is_least_recently_used_and_room_is_made_for_the_computed_tokens():
    prompts = [[1, 2, 3], [4, 5, 6], [1, 2, 3, 9], [7, 8, 9], [1, 2, 3, 5]]
    run = simulate(prompts, "fcfs", budget=7)
    # [1 2 3] was used by request 2, so request 3 evicts the older [4 5 6] and request 4 still finds [1 2 3];
    # request 4 then needs one slot and evicts the least recent leaf, request 2's [9]
    assert run.cached == [0, 0, 3, 0, 3] and run.evicted_tokens == 3 + 1
    # recently USED, not recently created: the duplicate request 2 refreshes [1 2 3 4], so [5 6 7 8] goes
    prompts = [[1, 2, 3, 4], [5, 6, 7, 8], [1, 2, 3, 4], [9, 9, 9], [1, 2, 3, 4, 0]]
    assert simulate(prompts, "fcfs", budget=9).cached == [0, 0, 3, 0, 4]
    assert replay([[1, 2, 3], [4, 5, 6], [1, 2, 3, 7]], [0, 1, 2], budget=4).evicted_tokens == 6
    assert replay(prompts, range(5), budget=100).evicted_tokens == 0


def test_hand_made_interleaved_prefixes_thrash_fcfs_but_not_the_cache_aware_policies():
    a, b = [1] * 10, [2] * 10
    prompts = [(a if i % 2 == 0 else b) + [100 + i] for i in range(8)]
    best = best_tokens(prompts)
    assert best == 6 * 10
    assert simulate(prompts, "fcfs", budget=11).hit_tokens == 0
    for policy in ("lpm", "dfs"):
        run = simulate(prompts, policy, budget=11)
        assert run.hit_tokens == best, policy
        assert [i % 2 for i in run.order] in ([0] * 4 + [1] * 4, [1] * 4 + [0] * 4)
    assert simulate(prompts, "fcfs", budget=22).hit_tokens == best  # with room for both prefixes order is moot


def test_theorem_3_1_dfs_is_optimal_when_the_cache_holds_the_longest_request():
    rng = random.Random(0)
    for _ in range(300):
        prompts = random_requests(rng, rng.randint(1, 12))
        budget, best = max(map(len, prompts)), best_tokens(prompts)
        assert simulate(prompts, "dfs", budget).hit_tokens == best, prompts
        for policy in ("fcfs", "lpm"):
            assert simulate(prompts, policy, budget).hit_tokens <= best, (policy, prompts)
        shuffled = rng.sample(range(len(prompts)), len(prompts))
        assert replay(prompts, shuffled, sum(map(len, prompts))).hit_tokens <= best


@pytest.fixture(scope="module")
def paper_workloads():
    shapes = {"few_shot, 2 interleaved subjects": W.few_shot(n_questions=12, subjects=2),
              "multi_turn": W.multi_turn(), "system_prompt": W.system_prompt(),
              "tree_of_thought": W.tree_of_thought(), "few_shot, 4 subjects": W.few_shot(16, 3, subjects=4)}
    return {name: w.tokens() for name, w in shapes.items()}


def test_cache_aware_policies_reach_95_percent_of_the_best_on_paper_workloads(paper_workloads):
    for name, prompts in paper_workloads.items():
        best = W.best_hit_rate(prompts)
        assert best > 0.5, name
        for policy in ("lpm", "dfs"):
            run = simulate(prompts, policy, budget=max(map(len, prompts)))
            assert run.hit_rate >= 0.95 * best, (name, policy, run.hit_rate, best)


def test_fcfs_thrashes_on_interleaved_few_shot_with_a_small_cache(paper_workloads):
    prompts = paper_workloads["few_shot, 2 interleaved subjects"]
    longest = max(map(len, prompts))
    small = simulate(prompts, "fcfs", budget=int(1.5 * longest))  # less than the two prefixes together
    assert small.hit_rate < 0.1 < 0.7 < W.best_hit_rate(prompts)
    assert simulate(prompts, "lpm", budget=int(1.5 * longest)).hit_rate > 8 * small.hit_rate
    assert simulate(prompts, "fcfs", budget=3 * longest).hit_rate == pytest.approx(W.best_hit_rate(prompts))


# -- errors ------------------------------------------------------------------------------------------------------

def test_errors_name_the_parameter_and_what_is_allowed():
    with pytest.raises(ValueError, match=r"policy must be one of \['fcfs', 'lpm', 'dfs'\], got 'lru'"):
        order([[1]], "lru")
    with pytest.raises(ValueError, match="policy must be one of"):
        simulate([[1]], "sjf", budget=4)
    with pytest.raises(ValueError, match="policy='lpm' .* pass cache="):
        order([[1]], "lpm")
    with pytest.raises(TypeError, match="cache must be a RadixCache"):
        order([[1]], "lpm", cache={})
    with pytest.raises(ValueError, match=r"budget must be >= the longest prompt \(3 tokens\), got 2"):
        simulate([[1, 2, 3]], "fcfs", budget=2)
    with pytest.raises(ValueError, match="run_order must list every request index 0..1 exactly once"):
        replay([[1], [2]], [0, 0], budget=4)
    with pytest.raises(ValueError, match=r"prompts\[1\] is empty"):
        order([[1], []], "fcfs")
    with pytest.raises(ValueError, match=r"prompts\[0\]\[1\] must be a non-negative int"):
        order([[1, -2]], "dfs")
    with pytest.raises(ValueError, match="prompts is empty"):
        simulate([], "dfs", budget=4)
    assert set(SCHEDULES) == {"fcfs", "lpm", "dfs"}
