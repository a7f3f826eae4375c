"""Trees of guesses in the engine: one target pass over every node, exactly the per-path logits; greedy output
identical to plain decoding on every family; sampled output distributed exactly as the target's."""

import itertools

import pytest
import torch
from scipy.stats import chisquare

from helpers.families import FAMILIES, TEXT, family_pair, stop_rules
from helpers.models import assert_draft_holds_committed_tokens, build_model
from teachspec import Engine, kv, load_pair
from teachspec.sampling import SamplingParams, warp
from teachspec.request import Request
from teachspec.speculative.policies import make_policy
from teachspec.speculative.tree_policy import make_tree_policy
from teachspec.speculative.tree import TokenTree
from teachspec.stopping import StopRule

TREE = TokenTree(parents=(-1, 0, 0, 1, 1, 2, 3), tokens=(0, 7, 8, 9, 10, 11, 12))


@pytest.mark.parametrize("arch", FAMILIES)
def test_one_pass_over_a_tree_gives_each_node_the_logits_of_its_own_path(arch):
    """Position ids by depth, a mask of ancestors (and the sliding window where layers slide): every node's logits
    equal a plain pass over the context and that node's path, and keep() leaves the cache of the path alone."""
    model = build_model(arch, vocab_size=4160, seed=1)
    ids = [5, 17, 300, 9] + list(range(40, 52))
    tree = TokenTree(TREE.parents, (ids[-1],) + TREE.tokens[1:])
    cache = kv.new_cache(model)
    kv.forward(model, ids[:-3], cache, 1, 4160)  # some of the context cached, some computed with the tree
    logits = kv.forward_tree(model, ids, tree.parents, tree.tokens, cache, 4160)
    for node in range(len(tree.tokens)):
        path, j = [], node
        while j > 0:
            path.append(tree.tokens[j])
            j = tree.parents[j]
        ref = kv.forward(model, ids + path[::-1], kv.new_cache(model), 1, 4160)[0]
        assert torch.allclose(logits[node], ref, atol=1e-4), (arch, node)
    kv.keep(cache, list(range(len(ids))) + [len(ids) - 1 + 2, len(ids) - 1 + 5])  # the path root -> 2 -> 5
    after = kv.forward(model, [99], cache, 1, 4160)[0]
    ref = kv.forward(model, ids + [tree.tokens[2], tree.tokens[5], 99], kv.new_cache(model), 1, 4160)[0]
    assert torch.allclose(after, ref, atol=1e-4)


COPY = "def parse(path):\n    with open(path) as f:\n        return f.read()\n\ndef parse(path):\n    with open"


@pytest.mark.parametrize("arch", ["llama", "gemma2", "mistral", "gpt2"])
def test_greedy_trees_are_plain_decoding_token_for_token_on_families_with_stops_and_a_warm_cache(arch):
    target, draft, tok = family_pair(arch)
    eos, stop = stop_rules(target, tok)
    target.generation_config.eos_token_id = eos
    pair = load_pair(target=target, draft=draft, tokenizer=tok)
    for stops in (None, stop):
        ref = Engine(pair, cache_tokens=0).generate(TEXT + TEXT, 40, speculate=None, stop=stops)
        warm = Engine(pair)
        shapes = [*itertools.product(("model", "ngram", "oracle"), ((1,), (2, 2), (3, 2, 2, 1))),
                  ("model", "dynamic"), ("oracle", "dynamic")]
        for speculate, shape in shapes:
            for engine in (Engine(pair, cache_tokens=0), warm):
                out = engine.generate(TEXT + TEXT, 40, speculate=speculate, tree=shape, stop=stops)
                assert out.tokens == ref.tokens and out.finish_reason == ref.finish_reason, (arch, shape, stops)
        warm.radix.check_invariants()
        assert warm.radix.protected_size == 0


def test_trees_of_several_matches_take_fewer_passes_and_keep_only_the_accepted_path():
    pair = load_pair("tiny")
    plain = Engine(pair, cache_tokens=0).generate(COPY, 48, speculate=None)
    engine = Engine(pair)
    out = engine.generate(COPY, 48, speculate="ngram", tree=(3, 2, 2, 1))
    assert out.tokens == plain.tokens
    assert out.stats.target_passes < plain.stats.target_passes
    kinds = {e.kind for e in engine.events}
    assert {"tree_draft", "accept", "reject"} <= kinds
    stored = engine.radix.match_prefix(out.prompt + out.tokens + [0]).length
    assert stored == len(out.prompt) + len(out.tokens) - 1  # committed tokens only, no rejected branch


def test_a_rejected_branchs_kv_kept_by_mistake_is_caught(monkeypatch):
    """The classic tree bug: compacting to the first rows instead of the accepted path's."""
    pair = load_pair("tiny")
    plain = Engine(pair, cache_tokens=0).generate(COPY, 48, speculate=None).tokens
    monkeypatch.setattr(kv, "keep", lambda cache, rows: kv.crop_to(cache, len(rows)))
    wrong = Engine(pair, cache_tokens=0).generate(COPY, 48, speculate="ngram", tree=(3, 2, 2, 1)).tokens
    assert wrong != plain


def exact_law(pair, prompt: list[int], params: SamplingParams) -> dict[tuple[int, int], float]:
    """The target's own law of the first two tokens, by enumeration over the warped support."""
    target, V = pair.target, pair.vocab_size
    p1 = warp(kv.forward(target, prompt, kv.new_cache(target), 1, V), params)[0].double()
    law = {}
    for x1 in p1.nonzero().flatten().tolist():
        p2 = warp(kv.forward(target, prompt + [x1], kv.new_cache(target), 1, V), params)[0].double()
        for x2 in p2.nonzero().flatten().tolist():
            law[(x1, x2)] = float(p1[x1] * p2[x2])
    total = sum(law.values())  # 1 up to float32 rounding in warp
    return {o: v / total for o, v in law.items()}


@pytest.mark.parametrize("speculate, shape", [("ngram", (2, 2)), ("ngram", (3, 1)), ("model", (3, 1))])
def test_sampled_output_through_a_tree_is_the_targets_law(speculate, shape):
    """A prompt that repeats with several different continuations, so prompt lookup drafts real branches (the draft
    model samples its own); at temperature 1 with top-k = 4 the first two tokens' law has 16 outcomes, checked by
    a chi-square test. The draft model's (2, 2) and dynamic trees, three tokens deep and with the mutants this
    test must catch: test_tree_sampling.py."""
    pair = load_pair("tiny")
    a, b = pair.encode(" open"), pair.encode(" read")
    prompt = (a + b) * 2 + a + pair.encode(" close") + a + pair.encode(" write") + a
    params = SamplingParams(temperature=1.0, top_k=4)
    law = exact_law(pair, prompt, params)
    engine, n = Engine(pair, cache_tokens=0), 1500
    counts = dict.fromkeys(law, 0)
    for seed in range(n):
        out = engine.generate(prompt, 2, temperature=1.0, top_k=4, speculate=speculate, tree=shape, seed=seed)
        counts[tuple(out.tokens)] += 1
    branched = sum(len(e.parents) > 2 for e in engine.events if e.kind == "tree_draft")
    assert branched > n // 2  # most steps really judged several branches
    outcomes = sorted(law, key=law.get, reverse=True)
    observed = [counts[o] for o in outcomes]
    expected = [n * law[o] for o in outcomes]
    keep = [i for i, e in enumerate(expected) if e >= 5]  # chi-square needs enough expected per cell
    rest = [i for i in range(len(outcomes)) if i not in keep]
    obs = [observed[i] for i in keep] + ([sum(observed[i] for i in rest)] if rest else [])
    exp = [expected[i] for i in keep] + ([sum(expected[i] for i in rest)] if rest else [])
    assert chisquare(obs, exp).pvalue > 1e-3


@pytest.mark.parametrize("tree, message", [
    ((0, 2), r"tree must be None, 'adaptive', 'dynamic' or a tuple of 1 to 16 branching factors.* got \(0, 2\)"),
    ("wide", r"tree must be None, 'adaptive', 'dynamic' or a tuple"),
    ("dynamic", r"tree='dynamic' ranks the drafter's own probabilities, and speculate='ngram' has none"),
    ((2, 2), r"tree=\(2, 2\) needs a drafter that can propose several branches: .* got speculate='adversary'"),
])
def test_bad_trees_are_refused_before_anything_runs(tree, message):
    engine = Engine(load_pair("tiny"))
    speculate = "adversary" if tree == (2, 2) else "ngram"
    with pytest.raises(ValueError, match=message):
        engine.generate(COPY, 4, speculate=speculate, tree=tree)
    assert engine.requests == 0


def test_a_tree_too_big_to_check_is_refused_before_anything_is_allocated():
    """(16, 16, 16, 16) passes the per-depth limits, and guesses 69,904 tokens: its pass once took 19.5 GB. It is
    refused from its shape, with the count, before the first tensor; the call's peak memory stays small."""
    import subprocess
    import sys

    script = ("import resource; from teachspec import Engine, load_pair\n"
              "engine = Engine(load_pair('tiny'), cache_tokens=0)\n"
              "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
              "try:\n    engine.generate('def f(x):', 8, speculate='model', tree=(16, 16, 16, 16))\n"
              "except ValueError as e:\n    print(e)\n"
              "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    message, grown_kib = done.stdout.strip().splitlines()
    assert "tree=(16, 16, 16, 16) guesses 69,904 tokens in one pass, more than the 1,024" in message, done.stderr
    assert int(grown_kib) < 3 * 2**20  # KiB: under 3 GB (in fact about nothing)


def test_a_tree_whose_pass_would_not_fit_in_free_memory_is_refused(monkeypatch):
    """Under the node limit, a shape is still refused when its pass needs more than half the free memory: the
    check reads the machine (here told it has 64 MiB free) before anything runs."""
    import teachspec.engine as engine_module

    engine = Engine(load_pair("tiny"))
    monkeypatch.setattr(engine_module, "available_bytes", lambda device: 64 * 2**20)
    nodes, vocab = 8 + 64 + 512, engine.pair.vocab_size
    assert engine_module.tree_pass_bytes(nodes, vocab) > 32 * 2**20  # so the shape below cannot fit
    with pytest.raises(ValueError, match=r"tree=\(8, 8, 8\) guesses 584 tokens, whose pass needs about .* GiB .* "
                                         r"0.1 GiB free: use a smaller shape"):
        engine.generate(COPY, 4, speculate="model", tree=(8, 8, 8))
    assert engine.requests == 0
    monkeypatch.setattr(engine_module, "available_bytes", lambda device: None)  # unknown: not refused for it
    assert engine.generate(COPY, 2, speculate="model", tree=(2, 2)).tokens


@torch.inference_mode()
@pytest.mark.parametrize("tree", [(3, 2, 2), "dynamic"])
def test_after_every_tree_step_the_draft_models_cache_holds_only_committed_tokens(tree):
    """The draft grows the tree level by level in its own cache; after verification only the accepted path's rows
    stay, then the usual roll back: its keys and values equal a fresh prefill of what it holds."""
    pair = load_pair("tiny")
    engine = Engine(pair, cache_tokens=0)
    r = Request(engine.next_id(), pair.encode(TEXT), 40, SamplingParams(temperature=1.0), StopRule(),
                engine.drafter("model"), make_policy(0), torch.Generator().manual_seed(0),
                tree=make_tree_policy(tree, adaptive=None))
    with engine.running(r):
        while not r.done:
            engine.step(r)
            assert_draft_holds_committed_tokens(r, pair)
    assert r.stats.rejected >= 3
