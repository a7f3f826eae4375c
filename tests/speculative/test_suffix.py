"""speculate="suffix": guesses from the request's own suffix tree and the engine's tree of earlier outputs
(teachspec/speculative/suffix.py). What it guesses and remembers, tested on its own; in the engine, greedy output
identical to plain decoding across requests that teach it, and sampled output with the target's exact law, chain
and tree, with the rule's mutants that this test must catch. (The every-drafter greedy test in test_engine.py runs
it at every k too.)"""

import tempfile
import importlib
from collections import Counter
from pathlib import Path

import pytest

from helpers.laws import follows, target_law
from helpers.tree_law import MUTANTS, mutant
from teachspec import Engine, load_pair
from teachspec.sampling import SamplingParams
from teachspec.speculative import tree as tree_module
from teachspec.speculative.drafters import ModelDrafter
from teachspec.speculative.suffix import HybridDrafter, SuffixCache, SuffixDrafter

verify_module = importlib.import_module("teachspec.speculative.verify")  # the package's `verify` is the function


# -- the cache of earlier outputs --------------------------------------------------------------------------------

def test_the_cache_evicts_the_least_recently_used_output_first():
    cache = SuffixCache(tokens=10, depth=4)
    assert cache.extend(0, [1, 2, 3, 4]) and cache.extend(1, [5, 6, 7])
    assert cache.extend(0, [9])  # 0 used again: 1 is now the least recently used
    assert cache.extend(2, [8, 8, 8])  # 5 + 3 + 3 > 10: out goes 1
    assert set(cache.tree.sequences) == {0, 2} and len(cache.tree) == 8
    assert cache.tree.sequences[0] == [1, 2, 3, 4, 9]


def test_an_output_longer_than_the_cache_is_not_kept_and_evicts_nothing():
    cache = SuffixCache(tokens=6, depth=4)
    cache.extend(0, [1, 2, 3])
    assert not cache.extend(1, list(range(7)))
    assert set(cache.tree.sequences) == {0}
    cache.extend(2, [4, 4])
    assert not cache.extend(2, [5] * 5)  # its own growth past the whole cache: refused, the cache unchanged
    assert cache.tree.sequences == {0: [1, 2, 3], 2: [4, 4]}


def test_a_request_growing_itself_never_evicts_its_own_output():
    cache = SuffixCache(tokens=8, depth=4)
    cache.extend(0, [1, 1])
    for t in range(8):  # past 6 tokens, the other output has to go; its own never does
        assert cache.extend(1, [t])
    assert set(cache.tree.sequences) == {1} and cache.tree.sequences[1] == list(range(8))


@pytest.mark.parametrize("kwargs, message", [(dict(factor=0), "factor"), (dict(min_prob=2), "min_prob"),
                                             (dict(factor=True), "factor")])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SuffixDrafter(**kwargs)
    with pytest.raises(ValueError, match="tokens"):
        SuffixCache(tokens=0)


# -- what the drafter guesses ------------------------------------------------------------------------------------

def test_it_guesses_from_the_prompt_then_from_an_earlier_request():
    cache = SuffixCache(depth=8)
    first = SuffixDrafter(cache)
    prompt = [1, 2, 3, 4, 5, 9, 1, 2, 3]
    assert first.propose(prompt, 3).tokens == [4, 5, 9]  # "1 2 3" was followed by "4 5 9" in the prompt
    first.propose(prompt + [4, 5, 6, 7, 8], 3)  # what it wrote goes into the engine's cache
    second = SuffixDrafter(cache)
    assert second.propose([40, 41, 5, 6], 3).tokens == [7, 8]  # only the earlier output knows "5 6 -> 7 8"
    assert second.propose([40, 41, 99], 3).tokens == []  # nothing ever followed 99


def test_a_short_match_earns_a_short_guess():
    cache = SuffixCache(depth=8)
    drafter = SuffixDrafter(cache, factor=1.0)
    prompt = [7, 1, 2, 3, 4, 5, 6, 8, 1]
    proposal = drafter.propose(prompt, 5)
    assert proposal.tokens == [2]  # a match of one token ("1"): one guess
    long = SuffixDrafter(cache, factor=2.0).propose(prompt, 5)
    assert long.tokens == [2, 3]


def test_a_tree_follows_the_shape_and_holds_each_continuation_once():
    drafter = SuffixDrafter(SuffixCache(depth=8))
    prompt = [5, 1, 2, 3, 6, 1, 2, 4, 7, 1, 2]  # "1 2" was followed by 3 and by 4
    proposal = drafter.propose_tree(prompt, (2, 1))
    tree = proposal.tree
    assert proposal.q is None and tree.tokens[0] == prompt[-1]
    assert sorted(tree.tokens[i] for i in range(1, len(tree.tokens)) if tree.parents[i] == 0) == [3, 4]
    assert all(tree.depth[i] <= 2 for i in range(len(tree.tokens)))


def test_the_hybrid_takes_the_trees_guess_when_confident_and_the_draft_models_otherwise():
    pair = load_pair("tiny")
    cache = SuffixCache(depth=8)
    hybrid = HybridDrafter(SuffixDrafter(cache), ModelDrafter(pair.draft, pair.vocab_size), threshold=1.0)
    seen = pair.encode("def read(path):\n    with open(path) as f:\n        return f.read()")
    cache.extend(cache.new_id(), seen)
    params = SamplingParams()
    known = hybrid.propose(seen[:8], 3, params, None)
    assert hybrid.last == "suffix" and known.q is None and known.passes == 0
    assert len(known.tokens) > 3 and known.tokens == seen[8:8 + len(known.tokens)]  # a chain past the model's k
    capped = HybridDrafter(SuffixDrafter(cache), ModelDrafter(pair.draft, pair.vocab_size), longest=4)
    assert capped.propose(seen[:8], 3, params, None).tokens == seen[8:12]
    novel = pair.encode("The weather on Mars")
    hybrid.reset()
    fresh = hybrid.propose(novel, 3, params, None)
    alone = ModelDrafter(pair.draft, pair.vocab_size).propose(novel, 3, params, None)
    assert hybrid.last == "model" and fresh.tokens == alone.tokens and fresh.passes == 3 and fresh.q is not None
    with pytest.raises(ValueError, match="threshold"):
        HybridDrafter(SuffixDrafter(cache), ModelDrafter(pair.draft, pair.vocab_size), threshold=-1)
    with pytest.raises(ValueError, match="longest"):
        HybridDrafter(SuffixDrafter(cache), ModelDrafter(pair.draft, pair.vocab_size), longest=0)


# -- in the engine ----------------------------------------------------------------------------------------------

def test_greedy_output_is_plain_decodings_and_an_engine_that_saw_it_guesses_it():
    pair = load_pair("tiny")
    plain = Engine(pair, cache_tokens=0)
    engine = Engine(pair, cache_tokens=0)
    prompts = ["def read(path):\n    with open(path) as", "Return a new dictionary", "def read(path):\n    with"]
    passes = []
    for prompt in prompts + prompts:
        out = engine.generate(prompt, 40, speculate="suffix", k=6)
        assert out.tokens == plain.generate(prompt, 40, speculate=None).tokens
        passes.append(out.stats.tokens_per_target_pass)
    # the same request again: its whole continuation is in the engine's tree (the third prompt's first run already
    # shares the first one's opening)
    assert passes[3] > 1.5 * passes[0] and passes[4] > 1.5 * passes[1], passes
    tree = engine.generate(prompts[0], 40, speculate="suffix", tree=(2, 2, 1))
    assert tree.tokens == plain.generate(prompts[0], 40, speculate=None).tokens


PARAMS = SamplingParams(temperature=1.0, top_k=4)
SEEDS = 1500
MUTANT_SEEDS = 600  # a mutant's law is far off: fewer seeds find it

def output_pvalue(tree, speculate: str = "suffix", seeds: int = SEEDS) -> float:
    """Chi-square p-value of the first two tokens over `seeds` seeds against the target's exact law. The prompt is
    a line three times, followed the first two times by the target's two likeliest next tokens: the suffix trees
    guess those (a chain, the likelier; a tree, both), and the target gives each a good share of p, so guesses are
    accepted and rejected alike (a guess outside p's support is always rejected, and would test nothing)."""
    pair = load_pair("tiny")
    line, newline = pair.encode("def read(path):\n    with open(path) as"), pair.encode("\n")
    after = target_law(pair, line, PARAMS, 1)
    first, second = sorted(after, key=after.get, reverse=True)[:2]
    prompt = line + list(first) + newline + line + list(second) + newline + line
    law = target_law(pair, prompt, PARAMS, 2)
    engine, seen = Engine(pair, cache_tokens=0), Counter()
    for seed in range(seeds):
        out = engine.generate(prompt, 2, temperature=1.0, top_k=4, speculate=speculate, k=2, tree=tree,
                              seed=seed)
        seen[tuple(out.tokens)] += 1
    judged = Counter(e.kind for e in engine.events if e.kind in ("accept", "reject"))
    assert judged["accept"] > seeds // 10 and judged["reject"] > seeds // 10, judged  # both sides of the rule
    if tree is None:
        guessed = [e for e in engine.events if e.kind == "draft" and e.tokens]
        assert len(guessed) > seeds // 2
    else:
        branched = [e for e in engine.events if e.kind == "tree_draft" and len(e.parents) > 2]
        assert len(branched) > seeds // 2
    return follows(law, seen)


@pytest.mark.parametrize("speculate, tree", [("suffix", None), ("suffix", (2, 2)), ("hybrid", None)],
                         ids=["chain", "tree", "hybrid"])
def test_sampled_output_is_the_targets_law(speculate, tree):
    """The hybrid's steps mix certain guesses and the draft model's samples (with their q)."""
    assert output_pvalue(tree, speculate) > 1e-3


def test_the_law_test_catches_a_chains_correction_drawn_from_p(monkeypatch):
    """The classic bug: a rejected guess replaced by a draw from p instead of norm(max(0, p - q)); for a certain
    guess the residual is p without the guessed token, so the bug emits the rejected token again."""
    monkeypatch.setattr(verify_module, "residual", lambda p, q: p.double() / p.double().sum())
    assert output_pvalue(None, seeds=MUTANT_SEEDS) < 1e-3


def test_the_law_test_catches_a_trees_correction_drawn_from_p(monkeypatch):
    """The same bug in the tree's per-node rule (verify_children), every child rejected."""
    old, new, _ = MUTANTS["correction drawn from p"]
    monkeypatch.setattr(tree_module, "verify_children", mutant(old, new))
    assert output_pvalue((2, 2), seeds=MUTANT_SEEDS) < 1e-3


# -- recorded, and drawn by the radix cache's view -----------------------------------------------------------------

def nodes_of(tree) -> dict[int, tuple[int, int]]:
    """The tree's own nodes: id -> (parent id, token)."""
    out, stack = {}, [tree.root]
    while stack:
        node = stack.pop()
        for t, child in node.children.items():
            out[child.id] = (node.id, t)
            stack.append(child)
    return out


def test_the_engines_tree_records_itself_and_the_radix_view_draws_it_node_for_node():
    from teachspec.events import EventLog, Match
    from teachspec.widgets import RadixTreeView

    log = EventLog()
    cache = SuffixCache(tokens=12, depth=3, events=log)
    cache.extend(0, [1, 2, 3, 1, 2])
    cache.extend(1, [2, 3, 4])
    cache.extend(2, [5, 1, 2, 3, 6])  # 13 > 12 tokens: the least recently used output (0) goes
    assert set(cache.tree.sequences) == {1, 2}
    drafter = SuffixDrafter(cache, factor=1.0)  # one guess per matched token: "2" alone earns one, "1 2" two
    drafter.propose([9, 1, 2], 2)
    matches = log.of(Match)
    assert matches and matches[-1].length == 2  # "1 2", as the view will highlight it
    one_two_three = cache.tree.root.children[1].children[2].children[3]
    assert matches[-1].proposed == [one_two_three.id]  # the guess: 3, the node below the match
    again = EventLog.load(log.save(Path(tempfile.mkdtemp()) / "suffix.jsonl"))  # a trace that loads
    view = RadixTreeView(again, max_nodes=500, max_depth=8)
    fading = {i["id"] for i in view.snapshot().items.values() if i.get("mark") == "evicted"}
    drawn = {n: (view.nodes[n].parent, view.nodes[n].ids) for n in view.nodes if n and n not in fading}
    assert drawn == {n: (parent, [t]) for n, (parent, t) in nodes_of(cache.tree).items()}
    items = view.snapshot().items.values()
    assert [i["id"] for i in items if i.get("proposed")] == [one_two_three.id]
    assert sorted(i["id"] for i in items if i.get("matched")) == sorted(matches[-1].path)


def test_without_a_log_the_tree_records_nothing():
    cache = SuffixCache(depth=4)
    cache.extend(0, [1, 2, 3])
    assert cache.tree.events is None
