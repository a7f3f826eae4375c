"""Choosing the tree from measurements: the best expected tokens per second among no guess, chains and trees.

Most tests feed the policy a synthetic world: children accepted with known chances h[d][r] (the positional model
the policy assumes), passes and drafting that cost known seconds, optionally with noise. The policy must find the
best shape, pay little for finding it, and leave trees for a chain quickly when trees stop paying.
"""

import random

import pytest

from teachspec import Engine, load_pair
from teachspec.sampling import SamplingParams
from teachspec.speculative.tree import NodeRecord, TokenTree, TreeVerdict
from teachspec.speculate import start_k
from teachspec.speculative.tree_policy import CANDIDATES, CHAINS, AdaptiveTree, load
from teachspec.theory import static_tree, static_tree_expected_tokens, tree_expected_tokens
from teachspec.workloads import docs_completion


class World:
    """Acceptance h[d][r] (depths and ranks beyond the table repeat its last), a pass over n nodes costing
    pass_s(n) seconds, drafting `per_pass` seconds a draft pass plus `per_node` a node fed; timings off by up to
    `noise` (a uniform factor in [1 - noise, 1 + noise])."""

    def __init__(self, h, pass_s, per_pass=0.05, per_node=0.0, noise=0.0, seed=0):
        self.h, self.pass_s, self.per_pass, self.per_node, self.noise = h, pass_s, per_pass, per_node, noise
        self.rng = random.Random(seed)

    def draft_s(self, shape) -> float:
        _, passes, fed = load(shape)
        return self.per_pass * passes + self.per_node * fed

    def rate(self, shape) -> float:
        """The true expected tokens per second of a shape."""
        return static_tree_expected_tokens(shape, self.h) / (self.draft_s(shape) + self.pass_s(load(shape)[0]))

    def best(self, shapes=CANDIDATES):
        return max(shapes, key=self.rate)

    def step(self, policy: AdaptiveTree) -> tuple[tuple[int, ...], int]:
        """One step: the policy's shape, a verification under h, the timings reported; (shape, tokens)."""
        shape = policy.next_shape()
        parents = static_tree(shape)
        tree = TokenTree(parents, (0,) * len(parents))
        node, path, records = 0, [], []
        while tree.children[node]:
            row = self.h[min(tree.depth[node], len(self.h) - 1)]
            for r, child in enumerate(tree.children[node]):
                ok = self.rng.random() < row[min(r, len(row) - 1)]
                records.append(NodeRecord(node=child, parent=node, depth=tree.depth[child], token=0, q=1.0, p=0.5,
                                          ratio=0.5, u=None, decision="accept" if ok else "reject"))
                if ok:
                    path.append(child)
                    node = child
                    break
            else:
                break
        verdict = TreeVerdict(path, [0] * (len(path) + 1), records)
        jitter = lambda: 1 + self.noise * (2 * self.rng.random() - 1)  # noqa: E731
        draft_s, target_s = self.draft_s(shape) * jitter(), self.pass_s(len(parents)) * jitter()
        policy.update(tree, verdict, len(shape), draft_s, target_s)
        return shape, len(path) + 1

    def run(self, policy: AdaptiveTree, steps: int) -> tuple[list[tuple[int, ...]], float]:
        """The shapes chosen over `steps` steps, and the tokens per second they are worth: their expected tokens
        over their expected seconds (the luck of the acceptances left out, so that a test compares choices)."""
        shapes = [self.step(policy)[0] for _ in range(steps)]
        tokens = sum(static_tree_expected_tokens(shape, self.h) for shape in shapes)
        return shapes, tokens / sum(self.draft_s(shape) + self.pass_s(load(shape)[0]) for shape in shapes)


H = [[0.8, 0.5, 0.3], [0.75, 0.45, 0.3], [0.7, 0.4, 0.3]]  # a good draft: a first child usually right


def test_a_flat_pass_and_a_cheap_draft_choose_a_big_tree():
    """A GPU: a pass over 45 nodes costs what one over 2 does; every node is nearly free."""
    world = World(H, pass_s=lambda n: 1.0, per_pass=0.01)
    shapes, rate = world.run(AdaptiveTree(), 300)
    assert shapes[-50:].count(world.best()) >= 40 and len(static_tree(world.best())) >= 16
    assert rate >= 0.95 * world.rate(world.best())


def test_passes_that_grow_with_their_nodes_choose_a_chain_and_lose_little_finding_it():
    """Two CPU cores: every node costs a fifth of a pass. The best shape is a chain; the policy's warm-up tries a
    tree once, its probes try close contenders, and over the run it realises at least 0.97 of the best chain."""
    world = World(H, pass_s=lambda n: 1.0 + 0.2 * (n - 1), per_pass=0.1)
    assert world.best() in CHAINS
    shapes, rate = world.run(AdaptiveTree(), 300)
    assert sum(shape in CHAINS for shape in shapes[-100:]) >= 95
    assert rate >= 0.97 * world.rate(world.best(CHAINS))


def test_bad_guesses_choose_no_guess():
    world = World([[0.05, 0.05]], pass_s=lambda n: 1.0 + 0.2 * (n - 1), per_pass=0.2)
    shapes, _ = world.run(AdaptiveTree(), 200)
    assert shapes[-50:].count(()) >= 45


@pytest.mark.parametrize("seed", range(3))
def test_with_noisy_timings_it_still_lands_near_the_best(seed):
    """Timings off by up to 30% each (a busy machine): the policy's estimates pool over sizes and steps."""
    world = World(H, pass_s=lambda n: 1.0 + 0.08 * (n - 1), per_pass=0.1, per_node=0.02, noise=0.3, seed=seed)
    policy = AdaptiveTree()
    world.run(policy, 100)
    _, rate = world.run(policy, 400)
    assert rate >= 0.95 * world.rate(world.best())


def test_it_leaves_trees_for_a_chain_soon_after_trees_stop_paying():
    """Passes flat (trees pay), then steep (another program takes the cores): within a few dozen steps the
    policy has moved to a chain."""
    flat = World(H, pass_s=lambda n: 1.0, per_pass=0.02)
    steep = World(H, pass_s=lambda n: 1.0 + 0.3 * (n - 1), per_pass=0.02)
    policy = AdaptiveTree()
    shapes, _ = flat.run(policy, 200)
    assert set(shapes[-1]) != {1}
    shapes, _ = steep.run(policy, 60)
    assert sum(set(s) == {1} for s in shapes[-30:]) >= 27


def test_the_warm_up_is_the_start_chain_and_one_tree_each_timed():
    world = World(H, pass_s=lambda n: 1.0 + 0.05 * n)
    policy = AdaptiveTree()
    assert policy.start == (1, 1, 1) and policy.warmup == ((1, 1, 1), (2, 2, 1), (1, 1, 1), (1, 1, 1))
    assert policy.next_shape() == (1, 1, 1)
    policy.update(TokenTree(static_tree((1, 1, 1)), (0,) * 4), TreeVerdict([], [0]), 3, None, None)  # read the prompt
    assert policy.next_shape() == (1, 1, 1)  # untimed: tried again
    shapes = [world.step(policy)[0] for _ in range(5)]
    assert shapes[:4] == [(1, 1, 1), (2, 2, 1), (1, 1, 1), (1, 1, 1)] and policy.warmed == 4
    assert AdaptiveTree.cold(start_k("eagle")).start == (1,) * 5
    assert AdaptiveTree.cold(start_k("model")).start == (1, 1, 1)
    assert AdaptiveTree.cold(start_k("eagle")).warmup[:2] == ((1,) * 5, (2, 2, 1))


def test_drafting_that_also_read_the_prompt_counts_for_acceptance_and_the_pass_but_not_for_drafting():
    policy, shape = AdaptiveTree(), (2, 1)
    tree = TokenTree(static_tree(shape), (0,) * len(static_tree(shape)))
    record = NodeRecord(node=1, parent=0, depth=1, token=0, q=1.0, p=0.5, ratio=0.5, u=None, decision="accept")
    policy.update(tree, TreeVerdict([1], [0, 0], [record]), 2, None, 1.0, step_s=5.0)
    assert policy.tried[(0, 0)] == 1 and policy.passes[len(tree.tokens)] == [1.0, 1]
    assert set(policy.draft.values()) == {0.0} and policy.overhead == [0.0, 0.0]


def test_a_cold_policy_loses_little_to_the_chain_it_starts_from():
    """Two CPU cores, a good draft: over the first 40 steps (warm-up and probes included) the policy realises at
    least 0.95 of the expected tokens per second of its start chain, and of the best chain."""
    world = World(H, pass_s=lambda n: 1.0 + 0.05 * (n - 1), per_pass=0.12)
    start = AdaptiveTree.cold(start_k("model"))
    _, rate = world.run(start, 40)
    assert rate >= 0.95 * world.rate((1, 1, 1)) and rate >= 0.95 * world.rate(world.best(CHAINS))


def test_the_engine_keeps_one_tree_policy_across_requests_and_times_no_drafting_that_read_the_prompt():
    from helpers.pairs import PROMPT, make_pair
    heard = []

    class Spy(AdaptiveTree):  # hears chain steps and tree steps alike
        def _measure(self, tried, nodes, passes, fed, draft_s, target_s, step_s, overhead):
            heard.append((nodes, draft_s, target_s))
            super()._measure(tried, nodes, passes, fed, draft_s, target_s, step_s, overhead)
    engine = Engine(make_pair(), cache_tokens=0)
    spy = engine.adaptive[("tree", "model", SamplingParams())] = Spy(candidates=((1, 1, 1),))
    for request in range(2):
        before = len(heard)
        engine.generate(PROMPT[request:], 24, speculate="model", tree="adaptive")
        drafting = [draft_s for nodes, draft_s, _ in heard[before:] if nodes > 1]
        assert drafting[0] is None and None not in drafting[1:] and len(drafting) >= 3
    assert engine.adaptive[("tree", "model", SamplingParams())] is spy and spy.steps == len(heard)


def test_it_chooses_the_best_predicted_and_probes_only_close_contenders_least_recently_tried_first():
    world = World(H, pass_s=lambda n: 1.0 + 0.05 * (n - 1), per_pass=0.05)
    policy = AdaptiveTree()
    world.run(policy, 100)
    probes = 0
    for _ in range(8 * policy.probe_every):
        rates, used, probing = policy.rates(), dict(policy.used), policy.steps % policy.probe_every == 0
        ranked = sorted(rates, key=rates.get, reverse=True)
        close = [s for s in ranked[1:] if rates[s] >= (1 - policy.margin) * rates[ranked[0]]]
        shape = world.step(policy)[0]
        if not probing:
            assert shape == ranked[0]
        elif close:
            probes += 1
            assert shape == min(close, key=lambda s: used.get(s, -1))
        else:
            assert shape in ranked[:2]
    assert probes >= 4  # close contenders exist here, and are tried


def test_the_expected_tokens_it_ranks_by_are_the_theorys():
    policy = AdaptiveTree()
    for d, row in enumerate([[0.7, 0.4], [0.6, 0.3, 0.2]]):
        for r, rate in enumerate(row):
            policy.tried[(d, r)], policy.accepted[(d, r)] = 1000.0, 1000.0 * rate
    policy.passes = {n: [2.0, 2.0] for n in (1, 4, 11)}  # one second a pass, whatever its size
    table = policy.acceptance()
    for shape in CANDIDATES:
        assert policy.tokens_per_s(shape) == pytest.approx(tree_expected_tokens(static_tree(shape), table))


def test_the_closed_form_for_static_trees_is_sequoias_sum_over_nodes():
    """theory.static_tree_expected_tokens, 1 + A_0 + A_0 A_1 + ..., which the policy ranks by, against the walk over
    every node, on random tables (rows and ranks shorter than the tree repeat their last entry in both)."""
    rng = random.Random(0)
    for _ in range(300):
        table = [[rng.random() for _ in range(rng.randint(1, 3))] for _ in range(rng.randint(1, 4))]
        shape = tuple(rng.randint(1, 4) for _ in range(rng.randint(0, 5)))
        assert static_tree_expected_tokens(shape, table) == pytest.approx(
            tree_expected_tokens(static_tree(shape), table), rel=1e-12)
    assert static_tree_expected_tokens((1, 1, 1), 0.5) == 1.875  # Eq. (1): 1 + 1/2 + 1/4 + 1/8
    with pytest.raises(ValueError, match=r"branching\[0\] must be an int >= 1"):
        static_tree_expected_tokens((0,), 0.5)


def test_pass_times_are_each_sizes_mean_shrunk_towards_a_line_and_the_draft_a_fit_per_pass_and_node():
    policy = AdaptiveTree(prior=4.0)
    policy.passes = {4: [10.0, 10.0], 11: [30.0, 10.0]}  # 1 s at 4 nodes, 3 s at 11: the line through them
    assert policy.pass_s(4) == pytest.approx(1.0) and policy.pass_s(11) == pytest.approx(3.0)
    assert policy.pass_s(18) == pytest.approx(5.0)  # never timed: on the line
    policy.passes[7] = [6.0, 2.0]  # two timings of 3 s, where the line says 1 + 3 * 2 / 7: shrunk towards it
    line = policy.pass_curve()
    assert line(4) < line(7) < 3.0
    world = World(H, pass_s=lambda n: 1.0, per_pass=0.3, per_node=0.1)
    for shape in [(1, 1, 1), (2, 2, 1), (3, 2), (1,)]:
        _, passes, fed = load(shape)
        policy.update(TokenTree(static_tree(shape), (0,) * len(static_tree(shape))), TreeVerdict([], [0]), passes,
                      world.draft_s(shape), None)
    assert policy.draft_cost() == pytest.approx((0.3, 0.1))
    # the rest of a step, the same for every shape
    policy.update(TokenTree((-1,), (0,)), TreeVerdict([], [0]), 0, 0.0, 1.0, step_s=1.5)
    assert policy.overhead[0] / policy.overhead[1] == pytest.approx(0.5)
    rates, policy.overhead = policy.rates(), [0.0, 0.0]
    without = policy.rates()
    assert rates[(1, 1, 1, 1)] / rates[()] > without[(1, 1, 1, 1)] / without[()]  # deep shapes pay it over more tokens


def test_the_adaptive_tree_is_plain_decoding_when_greedy_and_learns_as_it_goes():
    pair = load_pair("tiny")
    engine = Engine(pair, cache_tokens=0)
    for request in docs_completion(n_prompts=4).requests:
        plain = engine.generate(request.prompt, 32, speculate=None).tokens
        assert engine.generate(request.prompt, 32, speculate="model", tree="adaptive").tokens == plain
    policy = next(p for key, p in engine.adaptive.items() if key[0] == "tree")
    assert policy.warmed == len(policy.warmup) and policy.last in CANDIDATES
    assert sum(policy.tried.values()) > 20 and len(policy.passes) >= 2
    a, b = policy.draft_cost()
    assert a > 0 and b >= 0


@pytest.mark.parametrize("kwargs, message", [
    (dict(decay=1.0), r"decay must be in \(0, 1\), got 1.0"),
    (dict(margin=1.5), r"margin must be in \[0, 1\), got 1.5"),
    (dict(probe_every=0), "probe_every must be an int >= 1, got 0"),
    (dict(cost_decay=0.0), r"cost_decay must be in \(0, 1\), got 0.0"),
    (dict(prior=0), "prior must be > 0 pseudo-observations, got 0"),
    (dict(candidates=((2, 0),)), r"branching\[1\] must be an int >= 1"),
])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AdaptiveTree(**kwargs)


def test_a_chain_the_policy_chooses_runs_as_a_chain_step_with_the_same_tokens():
    """A chain chosen by tree="adaptive" goes through the engine's chain step (Draft events, no TreeDraft), and
    greedy output is still plain decoding's; a tree it chooses still goes through the tree step."""
    from helpers.pairs import PROMPT, make_pair

    pair = make_pair()
    plain = Engine(pair, cache_tokens=0).generate(PROMPT, 24, speculate=None).tokens
    for shape, step in (((1, 1, 1), "draft"), ((2, 2, 1), "tree_draft")):
        engine = Engine(pair, cache_tokens=0)
        engine.adaptive[("tree", "model", SamplingParams())] = AdaptiveTree(candidates=(shape,), warmup=(shape,),
                                                                            start=shape)
        out = engine.generate(PROMPT, 24, speculate="model", tree="adaptive")
        kinds = {e.kind for e in engine.events}
        assert out.tokens == plain and step in kinds and ({"draft", "tree_draft"} - {step}).isdisjoint(kinds)


def test_chains_and_trees_pay_their_own_overhead():
    """The engine's own work per step is measured apart for chain steps and tree steps: a dear tree step makes the
    trees' predicted rate fall and leaves the chains' as it was."""
    policy = AdaptiveTree()
    for _ in range(6):  # chain steps: 3 guesses, 2 accepted, 1 ms drafting, 5 ms pass, 1 ms of the engine's own
        policy.update_chain(3, 2, 3, 0.001, 0.005, 0.007)
    assert policy.chain_overhead[1] > 0 and policy.overhead[1] == 0
    before = policy.rates()
    assert before[(1, 1, 1)] == pytest.approx(policy.rates([(1, 1, 1)])[(1, 1, 1)])
    policy.overhead = [0.05, 1.0]  # a tree step measured at 50 ms of the engine's own work
    after = policy.rates()
    assert after[(1, 1, 1)] == pytest.approx(before[(1, 1, 1)]) and after[(2, 2, 1)] < 0.5 * before[(2, 2, 1)]
    # and the chain step fed acceptance at depths 0..2, rank 0: 2 of the 3 guesses judged were accepted
    assert policy.tried[0, 0] > 0 and policy.tried[2, 0] > 0 and policy.accepted.get((2, 0), 0.0) == 0.0
