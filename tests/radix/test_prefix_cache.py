"""Prefix reuse in the engine: real KV in the radix tree, exact outputs, budgets and locks that always balance."""

from __future__ import annotations

import random

import pytest
import torch

from helpers.models import build_model
from helpers.pairs import make_pair
from teachspec import kv
from teachspec.engine import Engine
from teachspec.events import Prefill
from teachspec.models.pair import Pair

SYSTEM = list(range(100, 160))  # a shared "system prompt"


@pytest.fixture(scope="module")
def pair():
    return make_pair()


def test_logits_after_a_reused_prefix_equal_a_full_recompute(pair):
    ids = list(range(10, 90))
    full = kv.forward(pair.target, ids, kv.new_cache(pair.target), 5, pair.vocab_size)
    cache = kv.new_cache(pair.target)
    kv.forward(pair.target, ids[:60], cache, 1, pair.vocab_size)
    nodes = [kv.view(cache, 0, 60)[0:25], kv.view(cache, 0, 60)[25:60]]  # two tree nodes' worth of KV
    reused = kv.forward(pair.target, ids[60:], kv.assemble(pair.target, nodes), 5, pair.vocab_size)
    torch.testing.assert_close(reused, full, atol=1e-4, rtol=0)


def test_a_shared_prefix_is_computed_once_and_outputs_do_not_change(pair):
    on, off = Engine(pair, cache_tokens=4096), Engine(pair, cache_tokens=0)
    prompts = [SYSTEM + [200 + i, 201 + i, 7] for i in range(4)]
    for speculate in ("model", None):
        for p in prompts:
            a = on.generate(p, 12, speculate=speculate, k=3)
            b = off.generate(p, 12, speculate=speculate, k=3)
            assert a.tokens == b.tokens
    prefills = on.events.of(Prefill)
    assert prefills[0].cached == 0 and prefills[0].computed == len(prompts[0])
    assert all(e.cached >= len(SYSTEM) for e in prefills[1:])  # every later request reuses the system prompt
    assert on.radix.protected_size == 0
    on.radix.check_invariants()


def test_a_multi_turn_history_is_reused_whole_including_the_reply(pair):
    engine = Engine(pair)
    first = engine.generate(SYSTEM, 10, speculate="model", k=2)
    history = SYSTEM + first.tokens + [5, 6, 7]
    second = engine.generate(history, 10, speculate="model", k=2)
    assert second.stats.cached_tokens == len(SYSTEM) + len(first.tokens) - 1  # all but the reply's last token


def test_never_the_whole_prompt_is_served_from_cache(pair):
    engine = Engine(pair)
    engine.generate(SYSTEM, 5)
    again = engine.generate(SYSTEM, 5)
    assert again.stats.cached_tokens == len(SYSTEM) - 1


def test_rejected_guesses_are_never_inserted(pair):
    engine = Engine(pair)
    out = engine.generate(SYSTEM, 30, temperature=1.0, speculate="adversary", k=3, seed=0)
    assert out.stats.drafted > out.stats.accepted  # there were rejections
    committed = out.prompt + out.tokens
    assert engine.radix.peek_prefix(committed) == len(committed) - 1
    stored = engine.radix.total_size
    assert stored == len(committed) - 1  # nothing but the committed tokens


def test_the_budget_is_never_exceeded_and_lru_makes_room(pair):
    engine = Engine(pair, cache_tokens=150)
    for i in range(6):
        engine.generate([300 + i] * 3 + list(range(10, 70)), 8)
        assert engine.radix.total_size <= 150
        engine.radix.check_invariants()
    assert engine.radix.metrics.evictions > 0


def test_a_request_longer_than_the_budget_runs_uncached_and_says_so(pair):
    engine = Engine(pair, cache_tokens=20)
    with pytest.warns(UserWarning, match="longer than the whole cache"):
        out = engine.generate(SYSTEM, 5)
    assert len(out.tokens) == 5 and engine.radix.total_size == 0


def test_bad_budgets_are_refused(pair):
    with pytest.raises(ValueError, match="cache_tokens must be >= 0, got -1"):
        Engine(pair, cache_tokens=-1)
    with pytest.raises(ValueError, match="policy"):
        Engine(pair, cache_policy="random")


def test_a_failing_request_leaves_no_lock_behind(pair, monkeypatch):
    engine = Engine(pair)
    engine.generate(SYSTEM, 4)

    def boom(*a, **k):
        raise RuntimeError("out of memory, say")

    monkeypatch.setattr(kv, "forward", boom)
    with pytest.raises(RuntimeError, match="out of memory"):
        engine.generate(SYSTEM + [1, 2], 4)
    assert engine.radix.protected_size == 0
    engine.radix.check_invariants()


def test_soak_2000_random_requests_over_a_small_budget():
    """Invariants after every request, no lock left behind, outputs identical to a run without the cache."""
    torch.manual_seed(0)
    target = build_model("llama", seed=1, layers=1, hidden=32)
    draft = build_model("llama", seed=2, layers=1, hidden=16)
    from transformers import AutoTokenizer
    from helpers.models import TOKENIZER_DIR
    pair = Pair(target, draft, AutoTokenizer.from_pretrained(TOKENIZER_DIR), 4096, "soak", torch.device("cpu"))
    on, off = Engine(pair, cache_tokens=120), Engine(pair, cache_tokens=0)
    rng = random.Random(0)
    stems = [[rng.randrange(1, 4096) for _ in range(rng.randrange(5, 40))] for _ in range(12)]
    for i in range(2000):
        prompt = rng.choice(stems)[:rng.randrange(1, 40)] + [rng.randrange(1, 4096) for _ in range(rng.randrange(3))]
        speculate = rng.choice(["model", "ngram", None])
        n = rng.randrange(0, 4)
        a = on.generate(prompt, n, speculate=speculate, k=2)
        if i % 10 == 0:  # the uncached twin costs as much again; every tenth request is plenty to compare
            assert a.tokens == off.generate(prompt, n, speculate=speculate, k=2).tokens
        assert on.radix.protected_size == 0 and on.radix.total_size <= 120
        on.radix.check_invariants()
    assert on.radix.metrics.hit_tokens > 0 and on.radix.metrics.evictions > 0


def test_serve_returns_results_in_request_order_and_cache_aware_schedules_hit_more(pair):
    a, b = [300] * 40, [400] * 40  # two "subjects", interleaved as they arrive
    requests = [a + [i] for i in range(3)] + [b + [i] for i in range(3)]
    requests = [requests[i] for i in (0, 3, 1, 4, 2, 5)]
    results = {}
    for schedule in ("fcfs", "lpm", "dfs"):
        engine = Engine(pair, cache_tokens=60)  # room for one subject at a time
        outs = engine.serve(requests, schedule=schedule, max_new_tokens=4, speculate=None)
        assert [o.prompt for o in outs] == requests
        results[schedule] = (sum(o.stats.cached_tokens for o in outs), [o.tokens for o in outs])
    assert results["lpm"][1] == results["dfs"][1] == results["fcfs"][1]
    assert results["lpm"][0] > results["fcfs"][0] and results["dfs"][0] > results["fcfs"][0]


def test_serve_takes_each_request_s_own_length_unless_one_is_given_for_all(pair):
    from teachspec.workloads import Job

    requests = [Job([5, 6, 7], 3, "a"), Job([5, 6, 8], 5, "a")]
    engine = Engine(pair, cache_tokens=0)
    assert [len(o.tokens) for o in engine.serve(requests, speculate=None)] == [3, 5]
    assert [len(o.tokens) for o in engine.serve(requests, max_new_tokens=2, speculate=None)] == [2, 2]
    assert [len(o.tokens) for o in engine.serve([[5, 6]], speculate=None)] == [64]


def test_serve_refuses_unknown_schedules_and_lpm_without_a_cache(pair):
    with pytest.raises(ValueError, match="schedule='sjf' is not a schedule"):
        Engine(pair).serve([[1, 2]], schedule="sjf")
    with pytest.raises(ValueError, match="cache is off"):
        Engine(pair, cache_tokens=0).serve([[1, 2]], schedule="lpm")


def test_chat_keeps_token_ids_so_each_turn_reuses_the_whole_history(pair):
    from teachspec.chat import Chat
    from teachspec.workloads import chat_prompt

    chat = Chat(Engine(pair), system="Be brief.")
    first = chat.say("What does dict.copy return?", 6, speculate=None)
    second = chat.say("And list.copy?", 6, speculate=None)
    assert second.stats.cached_tokens == len(first.prompt) + len(first.tokens) - 1
    assert pair.decode(second.prompt) == chat_prompt(["What does dict.copy return?", first.text.removeprefix(" "), "And list.copy?"],
                                                     "Be brief.")
    with pytest.raises(ValueError, match="message must be a non-empty string"):
        chat.say("")


def test_a_small_slice_of_kv_is_copied_and_a_large_one_shares_its_memory(pair):
    cache = kv.new_cache(pair.target)
    kv.forward(pair.target, list(range(5, 105)), cache, 1, pair.vocab_size)
    whole = kv.view(cache, 0, 100)
    base = whole.layers[0][0].untyped_storage().data_ptr()
    small, large = whole[90:100], whole[10:100]
    assert all(k.untyped_storage().data_ptr() != base for k, _ in small.layers[:1])  # frees the big cache
    assert large.layers[0][0].untyped_storage().data_ptr() == base  # stored as it is: no copy
    for piece, (a, b) in ((small, (90, 100)), (large, (10, 100))):
        assert len(piece) == b - a
        for (k, v), layer in zip(piece.layers, cache.layers):
            assert torch.equal(k, layer.keys[:, :, a:b]) and torch.equal(v, layer.values[:, :, a:b])


def test_a_cache_grows_in_place_and_never_writes_into_a_reused_prefix(pair):
    prompt = list(range(5, 105))
    cache = kv.new_cache(pair.target)
    kv.forward(pair.target, prompt, cache, 1, pair.vocab_size)
    storage = cache.layers[0].keys.untyped_storage().data_ptr()
    for token in (7, 8, 9):  # decode steps append into the spare room: no copy of the whole cache
        kv.forward(pair.target, [token], cache, 1, pair.vocab_size)
    assert cache.layers[0].keys.untyped_storage().data_ptr() == storage and kv.length(cache) == 103

    stored = kv.view(cache, 0, 103)[0:103]  # what the tree keeps: it shares that room
    before = [k.clone() for k, _ in stored.layers]
    reused = kv.assemble(pair.target, [stored])
    kv.forward(pair.target, [1, 2, 3], reused, 1, pair.vocab_size)
    kv.crop_to(reused, 104)  # a rejected guess forgotten; the next step writes over its place
    got = kv.forward(pair.target, [4, 5], reused, 1, pair.vocab_size)
    assert all(torch.equal(k, b) for (k, _), b in zip(stored.layers, before))  # the stored prefix is untouched
    full = kv.forward(pair.target, prompt + [7, 8, 9, 1, 4, 5], kv.new_cache(pair.target), 1, pair.vocab_size)
    assert torch.allclose(got, full, atol=1e-5)
