"""The multi-draft rule over a token tree, exactly: enumeration in float64, mutants it must catch, and `verify_tree`
case by case.

The exact law. A step drafts a tree of a fixed shape from a toy draft model (a node's children i.i.d. from q,
without replacement from q, or the draft's b most likely tokens proposed with certainty) and verifies it. The
law of what it emits is computed node by node, as the rule runs: every children tuple the draft can propose, with
its probability, is handed to the implementation's own `verify_children` with every uniform forced to reject; the
records then hold each child's acceptance chance a_j = min(1, p'/q') given the earlier rejections (a decision
is u_j < a_j, so integrating over u_j weighs "accept" by a_j and "reject" by 1 - a_j), and the returned residual is
what the token is drawn from when every child is rejected. An accepted child continues with the law of its own
subtree. Completed by the target's own samples, the emitted tokens must have, for every length m up to the tree's
depth + 1, exactly the target's law of m tokens: then repeated steps are exact too, by induction over the steps.

The toy models, the exact law and the mutants are in tests/helpers/tree_law.py.

A seeded Monte Carlo run of `verify_tree` itself, drafting its trees by sampling, checks that the sampling
implementation follows the same law; `verify_tree` on a chain agrees token for token with `verify`.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
import torch
from scipy import stats

import teachspec
from helpers.exact import make_table
from helpers.tree_law import MUTANTS, PROMPT, Model, StepLaw, draws, max_error, mutant, shape_of
from teachspec.sampling import SamplingParams, warp
from teachspec.speculative import verify
from teachspec.speculative.tree import TokenTree, verify_tree
from teachspec.theory import static_tree

F64 = torch.float64


# -- drafting: a sample of what a draft model proposes at a node (the law: helpers/tree_law.py) --------------------

def draw(q: list[float], b: int, kind: str, rng: random.Random) -> tuple[int, ...]:
    """One sample of `draws`' law."""
    tuples, weights = zip(*draws(q, b, kind))
    return rng.choices(tuples, weights)[0]


def random_parents(rng: random.Random, max_depth: int = 3) -> tuple[int, ...]:
    """A random tree: depth 1 .. max_depth, 0 .. 3 children per node (the first node of each level has at least
    one, so the tree reaches its depth)."""
    parents, level = [-1], [0]
    for _ in range(rng.randint(1, max_depth)):
        below = []
        for node in level:
            for _ in range(rng.randint(1 if node == level[0] else 0, 3)):
                parents.append(node)
                below.append(len(parents) - 1)
        level = below
    return tuple(parents)


def random_case(seed: int) -> tuple[Model, Model, tuple[int, ...]]:
    """Vocabulary 3 .. 5, zeros in p and q, a random tree."""
    rng = random.Random(seed)
    vocab = 3 + seed % 3
    target = Model(make_table(2 * seed, vocab, zeros=rng.choice([0.0, 0.3])))
    drafter = Model(make_table(2 * seed + 1, vocab, zeros=rng.choice([0.0, 0.3, 0.6])))
    return target, drafter, random_parents(rng)


KINDS = ["independent", "without_replacement", "certain"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(20))
def test_random_trees_emit_the_target_law(kind, seed):
    target, drafter, parents = random_case(seed)
    assert max_error(target, drafter, parents, kind) <= 1e-12


V = 4
CASES = {
    "p = q": (Model(make_table(20, V, zeros=0.3)), Model(make_table(20, V, zeros=0.3))),
    "disjoint supports": (Model(make_table(21, V, support=range(0, 2))), Model(make_table(22, V, support=range(2, 4)))),
    "one-hot p": (Model(make_table(23, V, one_hot=True)), Model(make_table(24, V))),
    "one-hot q": (Model(make_table(25, V)), Model(make_table(26, V, one_hot=True))),
    "q = 0 where p > 0": (Model(make_table(27, V)), Model(make_table(28, V, zeros=0.7))),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", CASES)
def test_special_cases_emit_the_target_law(case, kind):
    target, drafter = CASES[case]
    assert max_error(target, drafter, static_tree((3, 2)), kind) <= 1e-12


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("vocab", [3, 5])
def test_the_widest_tree_emits_the_target_law(vocab, kind):
    """Branching 3 at every depth, 3 deep: 39 drafted nodes; flat tables, so that most branches are reached."""
    target, drafter = Model(make_table(30, vocab, peak=1)), Model(make_table(31, vocab, peak=1))
    assert max_error(target, drafter, static_tree((3, 3, 3)), kind) <= 1e-12


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("kind", ["independent", "without_replacement"])
def test_low_precision_inputs_emit_the_target_law(kind, dtype):
    """The rule runs in float64: distributions held exactly in bfloat16 give exactly the target's law."""
    target, drafter = Model(make_table(40, 4, zeros=0.3, dtype=dtype)), Model(make_table(41, 4, zeros=0.3, dtype=dtype))
    assert max_error(target, drafter, static_tree((3, 2)), kind) <= 1e-12


# -- mutants: the classic multi-draft bugs, each planted in the implementation and caught ----------------------------

@pytest.mark.parametrize("name", MUTANTS)
def test_the_enumeration_catches_each_mutant(name):
    old, new, kinds = MUTANTS[name]
    judge = mutant(old, new)
    target, drafter = Model(make_table(50, 4)), Model(make_table(51, 4))
    for kind in kinds:
        assert max_error(target, drafter, static_tree((3, 2)), kind) <= 1e-12  # the same harness passes the rule
        assert max_error(target, drafter, static_tree((3, 2)), kind, judge) > 1e-3, kind


def test_the_mutants_are_wrong_only_where_they_differ():
    """One child per node has no sibling to misjudge: the first two mutants agree with the rule on chains."""
    target, drafter = Model(make_table(50, 4)), Model(make_table(51, 4))
    for name in ["residual not updated between siblings", "rejected token not removed from q"]:
        old, new, _ = MUTANTS[name]
        assert max_error(target, drafter, static_tree((1, 1)), "without_replacement", mutant(old, new)) <= 1e-12


# -- verify_tree itself --------------------------------------------------------------------------------------------

def draft(target: Model, drafter: Model, parents: tuple[int, ...], kind: str, rng: random.Random):
    """Sample a tree the way `draws` says, with the p and q rows the engine would hand to verify_tree."""
    tokens, contexts = [PROMPT[-1]], [PROMPT]
    children = TokenTree(parents, (0,) * len(parents)).children
    for node in range(len(parents)):  # parents come first, so each node's context is known when it is reached
        for child, x in zip(children[node], draw(drafter.probs(contexts[node]), len(children[node]), kind, rng)):
            tokens.append(x)
            contexts.append(contexts[node] + (x,))
    tree = TokenTree(parents, tuple(tokens))
    p = torch.stack([target(c) for c in contexts])  # (n_nodes, vocab)
    q = None if kind == "certain" else torch.stack([drafter(c) for c in contexts])
    return tree, p, q


@pytest.mark.parametrize("kind", KINDS)
def test_sampling_follows_the_exact_law(kind):
    """Chi-square of what verify_tree emits, trees drafted by sampling, against the enumerated law."""
    target, drafter = Model(make_table(60, 3, zeros=0.2, peak=1)), Model(make_table(61, 3, zeros=0.2, peak=1))
    parents = (-1, 0, 0, 0, 1, 1, 2, 4)  # ranks and depths that differ, leaves at three depths
    law = StepLaw(target, drafter, kind)(PROMPT, shape_of(parents))
    rng, g, n = random.Random(0), torch.Generator().manual_seed(0), 3000
    rule = "without_replacement" if kind == "certain" else kind
    seen = Counter()
    for _ in range(n):
        tree, p, q = draft(target, drafter, parents, kind, rng)
        seen[tuple(verify_tree(p, q, tree, g, kind=rule).tokens)] += 1
    assert set(seen) <= {seq for seq, prob in law.items() if prob > 0}
    # outcomes expected fewer than 5 times share one cell, along with the least likely common one
    ranked = sorted(law, key=law.get, reverse=True)
    common = [seq for seq in ranked if law[seq] * n >= 5][:-1]
    observed = [seen[seq] for seq in common] + [n - sum(seen[seq] for seq in common)]
    expected = [law[seq] * n for seq in common] + [n - sum(law[seq] * n for seq in common)]
    assert len(common) >= 5 and stats.chisquare(observed, expected).pvalue > 1e-4


@pytest.mark.parametrize("kind", ["independent", "without_replacement"])
@pytest.mark.parametrize("with_q", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_a_chain_is_verify_token_for_token(kind, with_q, dtype):
    g = torch.Generator().manual_seed(7)
    for seed in range(40):
        k = seed % 5
        p = torch.softmax(2 * torch.randn(k + 1, 6, generator=g), -1).to(dtype)
        q = torch.softmax(2 * torch.randn(k + 1, 6, generator=g), -1).to(dtype)
        xs = torch.multinomial(q[:k], 1, generator=g).squeeze(-1) if k else torch.zeros(0, dtype=torch.long)
        chain = verify(p, q[:k] if with_q else None, xs, torch.Generator().manual_seed(seed))
        tree = verify_tree(p, q if with_q else None, TokenTree.chain(0, xs.tolist()),
                           torch.Generator().manual_seed(seed), kind=kind)
        assert (tree.tokens, tree.accepted, tree.bonus, tree.resampled) == \
               (chain.tokens, chain.accepted, chain.bonus, chain.resampled)
        assert tree.path == list(range(1, chain.accepted + 1))
        assert [(r.u, r.p, r.q, r.ratio, r.decision) for r in tree.nodes] == \
               [(r.u, r.p, r.q, r.ratio, r.decision) for r in chain.positions]


def t(*rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


def test_after_rejected_siblings_the_accepted_child_starts_afresh():
    """The root's first child is surely rejected and its second surely accepted; below it, the grandchild is judged
    by p and q at the accepted child (not by the root's residual), and the bonus comes from p at the leaf."""
    tree = TokenTree(parents=(-1, 0, 0, 2), tokens=(3, 0, 1, 2))
    p = t([0.0, 0.5, 0.5, 0.0], [0.25] * 4, [0.1, 0.1, 0.5, 0.3], [0.0, 0.0, 0.0, 1.0])
    q = t([0.5, 0.25, 0.25, 0.0], [0.25] * 4, [0.25] * 4, [0.25] * 4)
    verdict = verify_tree(p, q, tree, torch.Generator().manual_seed(0))
    assert (verdict.path, verdict.tokens, verdict.bonus, verdict.resampled) == ([2, 3], [1, 2, 3], 3, None)
    first, second, third = verdict.nodes
    assert (first.node, first.p, first.q, first.decision) == (1, 0.0, 0.5, "reject")
    torch.testing.assert_close(first.residual, t(0.0, 0.5, 0.5, 0.0))  # norm(max(0, p - q)): the second child's p'
    assert (second.node, second.p, second.q, second.ratio, second.decision) == (2, 0.5, 0.25, 2.0, "accept")
    assert (third.node, third.parent, third.depth, third.p, third.q, third.ratio) == (3, 2, 2, 0.5, 0.25, 2.0)


def test_without_replacement_judges_the_next_child_by_q_without_the_rejected_one():
    tree = TokenTree(parents=(-1, 0, 0), tokens=(0, 1, 2))
    p = t([0.0, 0.0, 0.4, 0.6], [0.25] * 4, [0.25] * 4)
    q = t([0.0, 0.5, 0.25, 0.25], [0.25] * 4, [0.25] * 4)
    for kind, q_second in [("independent", 0.25), ("without_replacement", 0.5)]:
        verdict = verify_tree(p, q, tree, torch.Generator().manual_seed(0), kind=kind)
        assert verdict.nodes[0].decision == "reject" and verdict.nodes[1].q == q_second  # 0.25 / (1 - 0.5)
        assert verdict.nodes[1].p == pytest.approx(0.3, abs=1e-15)  # norm(max(0, p - q)) = [0, 0, .15, .35] / .5


def test_every_child_rejected_resamples_from_the_last_residual():
    tree = TokenTree(parents=(-1, 0, 0), tokens=(0, 0, 1))
    p, q = t([0.0, 0.0, 1.0], [1 / 3] * 3, [1 / 3] * 3), t([0.5, 0.5, 0.0], [1 / 3] * 3, [1 / 3] * 3)
    verdict = verify_tree(p, q, tree, None)
    assert (verdict.path, verdict.tokens, verdict.resampled, verdict.bonus) == ([], [2], 2, None)
    assert [r.decision for r in verdict.nodes] == ["reject", "reject"] and verdict.nodes[-1].resampled == 2


def test_a_child_the_draft_could_not_have_drawn_is_rejected():
    """q'(x) = 0: rejected with an infinite ratio, as in verify. Here q has one token, so the children after it
    (a top-3 pick without replacement) have q' = 0 everywhere, and their rejections leave p' as it was."""
    tree = TokenTree(parents=(-1, 0, 0, 0), tokens=(0, 0, 1, 2))
    p, q = t([0.0, 0.4, 0.6], *[[1 / 3] * 3] * 3), t([1.0, 0.0, 0.0], *[[1 / 3] * 3] * 3)
    for seed in range(10):
        verdict = verify_tree(p, q, tree, torch.Generator().manual_seed(seed), kind="without_replacement")
        assert [(r.q, r.ratio, r.decision) for r in verdict.nodes] == \
               [(1.0, 0.0, "reject"), (0.0, math.inf, "reject"), (0.0, math.inf, "reject")]
        for record in verdict.nodes:
            torch.testing.assert_close(record.residual, t(0.0, 0.4, 0.6), rtol=0, atol=1e-15)
        assert verdict.resampled in (1, 2) and verdict.tokens == [verdict.resampled]


def test_decisions_follow_u_and_ratio():
    rng, g = random.Random(3), torch.Generator().manual_seed(3)
    for seed in range(60):
        parents = random_parents(rng)
        n = len(parents)
        p = torch.softmax(2 * torch.randn(n, 5, generator=g, dtype=F64), -1)
        q = torch.softmax(2 * torch.randn(n, 5, generator=g, dtype=F64), -1)
        tree = TokenTree(parents, tuple(torch.randint(0, 5, (n,), generator=g).tolist()))
        verdict = verify_tree(p, q, tree, torch.Generator().manual_seed(seed))
        u = torch.rand(n - 1, generator=torch.Generator().manual_seed(seed), dtype=F64).tolist()
        node = 0
        for record in verdict.nodes:  # children of the path's nodes, in order, each with its own uniform
            assert record.parent == node and record.u == u[record.node - 1]
            assert (record.decision == "accept") == (record.q > 0 and record.u < min(1.0, record.ratio))
            node = record.node if record.decision == "accept" else node
        assert verdict.path == [r.node for r in verdict.nodes if r.decision == "accept"]
        assert verdict.tokens[:-1] == [tree.tokens[i] for i in verdict.path]
        if tree.children[node]:  # stopped where every child was rejected: a resample, noted on the last record
            assert verdict.bonus is None and verdict.nodes[-1].resampled == verdict.resampled == verdict.tokens[-1]
        else:  # reached a leaf: the bonus
            assert verdict.resampled is None and verdict.bonus == verdict.tokens[-1]


# -- greedy --------------------------------------------------------------------------------------------------------

def test_greedy_follows_the_targets_argmax():
    rng, g = random.Random(4), torch.Generator().manual_seed(4)
    for _ in range(60):
        parents = random_parents(rng)
        n = len(parents)
        p = torch.softmax(torch.randn(n, 3, generator=g), -1)
        tree = TokenTree(parents, tuple(torch.randint(0, 3, (n,), generator=g).tolist()))
        node, expected = 0, []
        while True:  # the reference: walk down while some child is the argmax
            best = int(p[node].argmax())
            expected.append(best)
            match = [c for c in tree.children[node] if tree.tokens[c] == best]
            if not match:
                break
            node = match[0]
        state = g.get_state()
        verdict = verify_tree(p, None, tree, g, greedy=True)
        assert verdict.tokens == expected and torch.equal(g.get_state(), state)  # no uniform drawn
        assert all(r.u is None for r in verdict.nodes)
        assert (verdict.bonus if verdict.bonus is not None else verdict.resampled) == expected[-1]


def test_greedy_tree_is_plain_greedy_decoding():
    """A tree of the draft's top tokens, drafted greedily: the output is the target's greedy continuation."""
    target, drafter = Model(make_table(70, 5)), Model(make_table(71, 5))
    rng, greedy = random.Random(5), SamplingParams(temperature=0.0)
    for _ in range(30):
        tree, p, _ = draft(target, drafter, random_parents(rng), "certain", rng)
        verdict = verify_tree(warp(p, greedy), None, tree, None, greedy=True)
        context = PROMPT
        for _ in verdict.tokens:
            context += (max(range(5), key=lambda y: target.probs(context)[y]),)
        assert tuple(verdict.tokens) == context[len(PROMPT):]


# -- inputs: never changed, checked, and placed on p's device -------------------------------------------------------

@pytest.mark.parametrize("greedy", [False, True])
@pytest.mark.parametrize("kind", ["independent", "without_replacement"])
def test_inputs_are_not_changed(kind, greedy):
    tree = TokenTree(parents=(-1, 0, 0, 0, 1), tokens=(3, 0, 1, 2, 3))
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        p = torch.softmax(torch.randn(5, 4, generator=g, dtype=F64), -1)  # float64: .double() returns p itself
        q = torch.softmax(torch.randn(5, 4, generator=g, dtype=F64), -1)
        before = (p.clone(), q.clone(), TokenTree(tree.parents, tree.tokens))
        verify_tree(p, q, tree, g, greedy=greedy, kind=kind)
        assert torch.equal(p, before[0]) and torch.equal(q, before[1]) and tree == before[2]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, F64], ids=str)
def test_uniforms_are_the_generators_float64_draws(dtype):
    """p = q accepts every first child: each recorded u is the float64 draw of its node, whatever the dtype."""
    tree = TokenTree(static_tree((2, 2, 2)), (0,) + (1, 2) * 7)
    p = make_table(80, 4, dtype=dtype)[0].reshape(16, 4)[:len(tree.tokens)]  # (n_nodes, vocab), any rows will do
    for seed in range(5):
        verdict = verify_tree(p, p, tree, torch.Generator().manual_seed(seed))
        u = torch.rand(len(tree.tokens) - 1, generator=torch.Generator().manual_seed(seed), dtype=F64).tolist()
        assert [r.u for r in verdict.nodes] == [u[r.node - 1] for r in verdict.nodes]
        assert all(r.residual is None or r.residual.dtype == F64 for r in verdict.nodes)


def test_every_tensor_is_placed_on_ps_device():
    from helpers.devices import Placements  # the same watch that guards the engine

    tree = TokenTree(static_tree((3, 2)), (0, 1, 2, 3, 0, 1, 2, 3, 0, 1))
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(10, 4, generator=g), -1)
    q = torch.softmax(torch.randn(10, 4, generator=g), -1)
    with Placements() as watch:
        for seed in range(20):
            for kind in ["independent", "without_replacement"]:
                verify_tree(p, q, tree, torch.Generator().manual_seed(seed), kind=kind)
            verify_tree(p, None, tree, torch.Generator().manual_seed(seed))
        verify_tree(p, q, tree, None, greedy=True)
    assert watch.unplaced == []


TREE = TokenTree(parents=(-1, 0, 0), tokens=(0, 1, 2))
P = t([0.5, 0.25, 0.25], [0.2, 0.3, 0.5], [1.0, 0.0, 0.0])
Q = t([0.1, 0.8, 0.1], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0])  # rows of leaves are not read


@pytest.mark.parametrize(
    "p, q, tree, kwargs, error, match",
    [
        (P[0], Q, TREE, {}, ValueError, r"p must be .* \(n_nodes=3, vocab\)"),
        (P[:2], Q, TREE, {}, ValueError, r"p must be .* \(n_nodes=3, vocab\), .* got torch.float64 .* \(2, 3\)"),
        (P.long(), Q, TREE, {}, ValueError, "p must be a floating-point"),
        (P, Q[:, :2], TREE, {}, ValueError, r"q must be None or .* \(3, 3\) like p"),
        (P, Q.numpy(), TREE, {}, ValueError, "q must be None or"),
        (P * 3, Q, TREE, {}, ValueError, "p rows must be probability distributions .* not logits"),
        (P, t([1.2, -0.2, 0.0], [0.0] * 3, [0.0] * 3), TREE, {}, ValueError, "q rows must be probability"),
        (P, t([float("nan"), 0.5, 0.5], [0.0] * 3, [0.0] * 3), TREE, {}, ValueError, "q rows must be probability"),
        (P, Q, TokenTree((-1, 0, 0), (0, 1, 3)), {}, ValueError, r"tree.tokens\[2\] must be .* \[0, vocab=3\), got 3"),
        (P, Q, TokenTree((-1, 0, 0), (0, 1, 1)), {"kind": "without_replacement"}, ValueError,
         r"node 0's children repeat a token, \[1, 1\]"),
        (P, Q, TREE, {"kind": "top_k"}, ValueError,
         "kind must be one of 'independent', 'without_replacement', got 'top_k'"),
        (P, Q, TREE, {"greedy": "yes"}, TypeError, "greedy must be True or False, got 'yes'"),
        (P, Q, [(-1, 0, 0), (0, 1, 2)], {}, TypeError, "tree must be a TokenTree, got list"),
    ],
)
def test_bad_inputs_are_refused(p, q, tree, kwargs, error, match):
    with pytest.raises(error, match=match):
        verify_tree(p, q, tree, None, **kwargs)


def test_repeated_children_are_fine_when_independent():
    verdict = verify_tree(P, Q, TokenTree((-1, 0, 0), (0, 1, 1)), torch.Generator().manual_seed(0))
    assert len(verdict.tokens) == verdict.accepted + 1


def test_q_on_another_device_is_refused():
    with pytest.raises(ValueError, match="q is on meta and p on cpu"):
        verify_tree(P, Q.to("meta"), TREE, None)


@pytest.mark.parametrize(
    "parents, tokens, error, match",
    [
        ((), (), ValueError, r"parents\[0\] must be -1 \(node 0 is the root\), got no nodes"),
        ((0, 0), (1, 2), ValueError, r"parents\[0\] must be -1 .* got \(0,\)"),
        ((-1, 0, 2), (1, 2, 3), ValueError, r"parents\[2\] must be a node numbered before it, in \[0, 2\), got 2"),
        ((-1, -1), (1, 2), ValueError, r"parents\[1\] must be .* got -1"),
        ((-1, 0), (1,), ValueError, "tokens must hold one token per node, 2, got 1"),
        ((-1, 0), (1, -2), ValueError, r"tokens\[1\] must be >= 0, got -2"),
        ((-1, 0.5), (1, 2), TypeError, r"parents\[1\] must be an integer, got 0.5"),
        ((-1, 0), (1, "2"), TypeError, r"tokens\[1\] must be an integer, got '2'"),
    ],
)
def test_bad_trees_are_refused(parents, tokens, error, match):
    with pytest.raises(error, match=match):
        TokenTree(parents, tokens)


def test_tree_structure():
    tree = TokenTree([-1, 0, 0, 1, 2, 2], [9, 1, 2, 3, 4, 5])  # lists become tuples
    assert (tree.parents, tree.tokens) == ((-1, 0, 0, 1, 2, 2), (9, 1, 2, 3, 4, 5))
    assert tree.children == ((1, 2), (3,), (4, 5), (), (), ())
    assert tree.depth == (0, 1, 1, 2, 2, 2)
    assert TokenTree.chain(7, [1, 2]) == TokenTree((-1, 0, 1), (7, 1, 2))
    assert TokenTree.chain(7, []).children == ((),)


@pytest.mark.parametrize("generator", [42, "seed", torch.tensor(0)])
def test_generator_must_be_a_torch_generator_or_none(generator):
    for check in (True, False):
        with pytest.raises(TypeError, match=f"generator must be a torch.Generator or None .*, got "
                                            f"{type(generator).__name__}"):
            verify_tree(P, Q, TREE, generator, check=check)
    state = torch.get_rng_state()
    verify_tree(P, Q, TREE, torch.Generator().manual_seed(0))  # a Generator: torch's global state is untouched
    assert torch.equal(torch.get_rng_state(), state)


def test_unchecked_call_gives_the_same_verdict():
    tree = TokenTree(static_tree((2, 2)), (0, 1, 2, 0, 1, 2, 0))
    g = torch.Generator().manual_seed(9)
    p, q = torch.softmax(torch.randn(7, 3, generator=g), -1), torch.softmax(torch.randn(7, 3, generator=g), -1)
    for seed in range(20):
        checked = verify_tree(p, q, tree, torch.Generator().manual_seed(seed))
        unchecked = verify_tree(p, q, tree, torch.Generator().manual_seed(seed), check=False)
        assert (checked.tokens, checked.path) == (unchecked.tokens, unchecked.path)


def test_exported_lazily_from_the_package():
    assert teachspec.verify_tree is verify_tree and teachspec.TokenTree is TokenTree
    assert {"verify_tree", "TokenTree"} <= set(teachspec.__all__)
