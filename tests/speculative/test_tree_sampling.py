"""Sampled trees drafted without replacement: the draw itself, the dynamic tree's budget, and the engine's output law.

A node's children are drawn from q without replacement (`draw_without_replacement`, Gumbel-top-k) and judged by
recursive rejection sampling (`verify_tree(kind="without_replacement")`). Three checks:

- the draw: b distinct tokens, the first from q, the next from q without it renormalised, and so on, against that
  law enumerated exactly;
- the dynamic tree keeps, at every node, the first children drawn in the order drawn (a child kept for its own
  likelihood would no longer be a sample of q; `ModelDrafter.propose_dynamic`);
- the engine end to end: `Engine.generate` at temperature 1 through a static tree (2, 2) and the dynamic tree, the
  first three tokens against the target's own law by enumeration (a chi-square test over seeds), and the same test
  failing on the classic multi-draft bugs, planted one at a time (the mutants of `test_verify_tree`, and the engine
  telling the rule the children were drawn independently).
"""

import inspect
import itertools
import sys
import types
from collections import Counter

import pytest
import torch
from scipy.stats import chisquare

import teachspec.engine as engine_module
import teachspec.speculative.drafters as drafters_module
import teachspec.speculative.tree as tree_module
from helpers.families import TEXT
from helpers.tree_law import MUTANTS, mutant
from teachspec import Engine, kv, load_pair
from teachspec.request import Request
from teachspec.sampling import SamplingParams, warp
from teachspec.speculative.drafters import draw_without_replacement
from teachspec.speculative.policies import make_policy
from teachspec.speculative.tree_policy import DynamicTree
from teachspec.stopping import StopRule


# -- the draw --------------------------------------------------------------------------------------------------------

def sequential_law(q: list[float], b: int) -> dict[tuple[int, ...], float]:
    """Every ordered tuple of b distinct tokens with its probability: x_1 from q, x_2 from q without x_1, ..."""
    law = {}
    for xs in itertools.permutations([x for x, w in enumerate(q) if w > 0], b):
        prob, left = 1.0, 1.0
        for x in xs:
            prob *= q[x] / left
            left -= q[x]
        law[xs] = prob
    return law


def test_draws_without_replacement_follow_the_sequential_law():
    q = torch.tensor([0.4, 0.0, 0.25, 0.2, 0.1, 0.05], dtype=torch.float64)  # a zero: never drawn
    n = 40_000
    draws = draw_without_replacement(q.expand(n, -1), 3, torch.Generator().manual_seed(0))  # one row per draw
    assert all(len(set(xs)) == 3 and 1 not in xs for xs in draws)
    law, seen = sequential_law(q.tolist(), 3), Counter(map(tuple, draws))
    assert set(seen) <= set(law)
    cells = sorted(law, key=law.get, reverse=True)
    total = sum(law.values())  # 1 up to rounding
    assert chisquare([seen[c] for c in cells], [n * law[c] / total for c in cells]).pvalue > 1e-3


def test_a_row_with_fewer_tokens_than_asked_gives_all_of_them_and_rows_are_drawn_apart():
    q = torch.tensor([[0.0, 0.7, 0.0, 0.3], [0.25, 0.25, 0.25, 0.25]])
    g = torch.Generator().manual_seed(1)
    rows = [draw_without_replacement(q, 3, g) for _ in range(200)]
    assert all(sorted(first) == [1, 3] and len(set(second)) == 3 for first, second in rows)
    assert len({tuple(second) for _, second in rows}) > 10  # the second row's own draws, not the first's


# -- the dynamic tree's budget ---------------------------------------------------------------------------------------

def recorded_draws(monkeypatch) -> list[tuple[torch.Tensor, list[int]]]:
    """Every row handed to `draw_without_replacement` and what was drawn from it."""
    seen, draw = [], drafters_module.draw_without_replacement

    def recording(q, b, generator):
        picks = draw(q, b, generator)
        seen.extend(zip(q, picks))
        return picks

    monkeypatch.setattr(drafters_module, "draw_without_replacement", recording)
    return seen


def kept_children_are_the_first_drawn(pair, monkeypatch, steps: int = 12) -> bool:
    """Step a sampled request with tree="dynamic"; at every node of every drafted tree, are its children the first
    ones drawn at that node, in the order drawn? (The node is found by its q, which the proposal returns.)"""
    engine = Engine(pair, cache_tokens=0)
    draws = recorded_draws(monkeypatch)
    r = Request(engine.next_id(), pair.encode(TEXT), 64, SamplingParams(temperature=1.0), StopRule(),
                engine.drafter("model"), make_policy(0), torch.Generator().manual_seed(0), tree=DynamicTree())
    proposals, propose = [], r.drafter.propose_dynamic

    def keep(*args, **kwargs):
        proposals.append(propose(*args, **kwargs))
        return proposals[-1]

    r.drafter.propose_dynamic = keep
    with torch.inference_mode(), engine.running(r):
        for _ in range(steps):
            engine.step(r)
    assert proposals and all(p.kind == "without_replacement" for p in proposals)
    for proposal in proposals:
        for node, children in enumerate(proposal.tree.children):
            if children:
                drawn = next(picks for row, picks in draws if torch.equal(row, proposal.q[node]))
                if [proposal.tree.tokens[c] for c in children] != drawn[:len(children)]:
                    return False
    return True


def test_the_dynamic_tree_keeps_each_nodes_first_children_in_the_order_drawn(monkeypatch):
    assert kept_children_are_the_first_drawn(load_pair("tiny"), monkeypatch)


def test_keeping_the_likeliest_children_drawn_is_caught(monkeypatch):
    """EAGLE-2's rerank by each drawn child's own confidence: the budget then keeps likely samples, not samples."""
    source = inspect.getsource(drafters_module)
    old = "value = confidence[node] + (math.log(left) if left > 0 else -math.inf)"
    assert source.count(old) == 1, "the line this mutant changes is no longer in drafters.py"
    module = types.ModuleType("teachspec_drafters_mutant")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    try:
        exec(compile(source.replace(old, "value = confidence[node] + math.log(q_x)"), drafters_module.__file__,
                     "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    monkeypatch.setattr(drafters_module.ModelDrafter, "propose_dynamic", module.ModelDrafter.propose_dynamic)
    # the mutant draws through the real module's function, so that its draws are recorded too
    monkeypatch.setattr(module, "draw_without_replacement", lambda *a: drafters_module.draw_without_replacement(*a))
    assert not kept_children_are_the_first_drawn(load_pair("tiny"), monkeypatch)


# -- the engine's output law -----------------------------------------------------------------------------------------

PARAMS = SamplingParams(temperature=1.0, top_k=4)  # four tokens a position: the law of three tokens has 64 outcomes
SEEDS = 400  # the mutants below fail with p ~ 1e-6 or less at this many


def prompt_of(pair) -> list[int]:
    """A prompt after which the draft and the target disagree: q puts 0.6 on one token, p spreads its mass."""
    a, b = pair.encode(" open"), pair.encode(" read")
    return (a + b) * 2 + a + pair.encode(" close") + a + pair.encode(" write") + a


def target_law(pair, prompt: list[int], m: int) -> dict[tuple[int, ...], float]:
    """The target's own law of its first m tokens under PARAMS, by enumeration over the warped support."""
    law = {(): 1.0}
    for _ in range(m):
        grown = {}
        for seq, prob in law.items():
            logits = kv.forward(pair.target, prompt + list(seq), kv.new_cache(pair.target), 1, pair.vocab_size)
            p = warp(logits, PARAMS)[0].double()
            for x in p.nonzero().flatten().tolist():
                grown[seq + (x,)] = prob * float(p[x])
        law = grown
    total = sum(law.values())  # 1 up to float32 rounding in warp
    return {seq: prob / total for seq, prob in law.items()}


def output_pvalue(tree) -> float:
    """Chi-square p-value of the first three tokens `generate` emits over SEEDS seeds, against the target's law.
    Three new tokens: the first step drafts two levels (the budget caps the depth), so the second level's q, the
    rule below an accepted child and the bonus at a leaf are all on the way."""
    pair = load_pair("tiny")
    prompt = prompt_of(pair)
    law = target_law(pair, prompt, 3)
    engine, seen = Engine(pair, cache_tokens=0), Counter()
    for seed in range(SEEDS):
        out = engine.generate(prompt, 3, temperature=PARAMS.temperature, top_k=PARAMS.top_k, speculate="model",
                              tree=tree, seed=seed)
        seen[tuple(out.tokens)] += 1
    branched = [e for e in engine.events if e.kind == "tree_draft" and max(e.parents) > 0]
    assert len(branched) > SEEDS // 2  # most first steps drafted two levels
    # chi-square needs enough expected per cell: outcomes expected fewer than 5 times share one cell, along with
    # the least likely common one
    common = [c for c in sorted(law, key=law.get, reverse=True) if law[c] * SEEDS >= 5][:-1]
    observed = [seen[c] for c in common] + [SEEDS - sum(seen[c] for c in common)]
    expected = [law[c] * SEEDS for c in common] + [SEEDS * (1 - sum(law[c] for c in common))]
    return chisquare(observed, expected).pvalue


@pytest.mark.parametrize("tree", [(2, 2), "dynamic"])
def test_sampled_trees_drafted_without_replacement_emit_the_targets_law(tree):
    assert output_pvalue(tree) > 1e-3


@pytest.mark.parametrize("tree", [(2, 2), "dynamic"])
def test_the_output_law_test_catches_children_judged_as_drawn_independently(monkeypatch, tree):
    """The engine bug: children drawn without replacement, the rule not told so, so each sibling is judged by q
    although the earlier ones were removed from what it was drawn from."""
    rule = tree_module.verify_tree
    monkeypatch.setattr(engine_module, "verify_tree",
                        lambda p, q, t, generator, kind, check: rule(p, q, t, generator, kind="independent",
                                                                     check=check))
    assert output_pvalue(tree) < 1e-3


@pytest.mark.parametrize("name", ["residual not updated between siblings", "correction drawn from p"])
def test_the_output_law_test_catches_the_rules_mutants(monkeypatch, name):
    """verify_tree looks its per-node rule up in its module: the mutant replaces it there."""
    old, new, _ = MUTANTS[name]
    monkeypatch.setattr(tree_module, "verify_children", mutant(old, new))
    assert output_pvalue((2, 2)) < 1e-3
