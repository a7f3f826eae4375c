"""Chosen children judged as drawn: the bug lecture 9 adds to its list, planted and caught.

A node's children are *drawn* (from q, independently or without replacement) or *chosen* (the draft's b likeliest
tokens, prompt lookup's matches). A chosen child was that token with certainty, so it is judged as a certain guess,
a point mass (`verify_tree(q=None)`): accepted with probability p'(x), its rejection removing x from p'. Judging it
instead by the without-replacement rule, as if it had been sampled from q, biases the output: with lecture 9's
p = [1/2, 1/3, 1/6] and q = [1/4, 1/4, 1/2], the top two (2, then 0) give [2/3, 0, 1/3], and token 1 never comes out.

Four checks: the lecture's example exactly (the implementation's own `verify_children`, its acceptance chances
integrated over the uniforms, as tests/speculative/test_verify_tree.py does); the exact law of whole trees, which
catches the bug where the rule is right; a chi-square test of `verify_tree`'s samples; and the engine, which must
pass q=None for every child it chose. Greedy output cannot catch it (p is one-hot: every ratio is 0 or >= 1), which
is why the lecture's bug list shows it at temperature 1.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

import teachspec.engine as engine_module
from helpers import tree_law as exact
from helpers.exact import make_table
from teachspec import Engine, load_pair
from teachspec.course.harness import chi_square
from teachspec.speculative.tree import TokenTree, verify_children, verify_tree
from teachspec.theory import static_tree

F64 = torch.float64
P = [Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)]  # lecture 9's target
Q = [Fraction(1, 4), Fraction(1, 4), Fraction(1, 2)]  # its draft, which over-proposes token 2
CHOSEN = (2, 0)  # the draft's two likeliest tokens, a tie going to the lower id
LECTURE = Path(__file__).resolve().parents[2] / "notebooks" / "09_guessing_several_branches.ipynb"


def one_node_law(q: torch.Tensor | None, kind: str) -> list[float]:
    """The exact law of the token leaving the root of a tree with the children CHOSEN, judged with (q, kind): each
    child's acceptance chance a_j = min(1, p'/q') from the implementation's records (uniforms forced to reject), the
    last residual for the case every child is rejected."""
    p = torch.tensor([float(x) for x in P], dtype=F64)
    tree = TokenTree((-1, 0, 0), (0, *CHOSEN))
    child, records, final = verify_children(p, q, tree, 0, [exact.REJECT] * 2, kind)
    out, reach = [0.0] * 3, 1.0
    for record in records:
        a = min(1.0, record.ratio) if record.q > 0 else 0.0
        out[record.token] += reach * a
        reach *= 1 - a
    if child is None:
        out = [o + reach * f for o, f in zip(out, final.tolist())]
    return out


def as_fractions(law: list[float]) -> list[Fraction]:
    return [Fraction(x).limit_denominator(1000) for x in law]


def test_the_lectures_example_exactly():
    q = torch.tensor([float(x) for x in Q], dtype=F64)
    assert as_fractions(one_node_law(None, "without_replacement")) == P  # certain guesses: exactly p
    assert as_fractions(one_node_law(q, "without_replacement")) == [Fraction(2, 3), 0, Fraction(1, 3)]  # the bug
    assert np.allclose(one_node_law(None, "without_replacement"), [float(x) for x in P], atol=1e-12, rtol=0)


@pytest.fixture
def chosen_but_judged_as_drawn(monkeypatch):
    """test_verify_tree's exact law with the bug planted: children drafted without replacement are the draft's b
    likeliest tokens instead (`draws(..., "certain")`), while the rule is still told they were drawn from q."""
    draws = exact.draws
    monkeypatch.setattr(exact, "draws", lambda q, b, kind: draws(q, b, "certain" if kind == "without_replacement"
                                                                 else kind))


@pytest.mark.parametrize("branching", [(1, 1), (3, 2), (2, 2, 2)])
def test_the_exact_law_catches_chosen_children_judged_as_drawn(chosen_but_judged_as_drawn, branching):
    target, drafter = exact.Model(make_table(50, 4)), exact.Model(make_table(51, 4))
    parents = static_tree(branching)
    assert exact.max_error(target, drafter, parents, "certain") <= 1e-12  # judged as certain guesses: exact
    assert exact.max_error(target, drafter, parents, "without_replacement") > 1e-3  # judged as drawn: caught


def test_sampling_catches_chosen_children_judged_as_drawn():
    """Chi-square of the token leaving the root over 2,000 runs of verify_tree against p: the rule passes, the bug
    (p-value about 1e-200 at this many) fails."""
    p = torch.tensor([[float(x) for x in P]] * 3, dtype=F64)  # (nodes, vocab)
    q = torch.tensor([[float(x) for x in Q]] * 3, dtype=F64)
    tree, g = TokenTree((-1, 0, 0), (0, *CHOSEN)), torch.Generator().manual_seed(0)

    def first_tokens(q_rows, kind: str) -> np.ndarray:
        return np.array([verify_tree(p, q_rows, tree, g, kind=kind).tokens[0] for _ in range(2000)])

    assert chi_square(first_tokens(None, "without_replacement"), p[0].numpy()) > 1e-3
    wrong = first_tokens(q, "without_replacement")
    assert chi_square(wrong, p[0].numpy()) < 1e-6 and (wrong == 1).sum() == 0  # token 1 never comes out


def test_greedy_output_cannot_catch_it():
    """At temperature 0 (p one-hot) the bug emits the argmax, as the rule does: the greedy identity check misses it."""
    q, tree = torch.tensor([float(x) for x in Q], dtype=F64), TokenTree((-1, 0, 0), (0, *CHOSEN))
    for argmax in range(3):
        p = torch.nn.functional.one_hot(torch.tensor(argmax), 3).to(F64)  # (vocab,)
        for q_rows in (None, q):  # judged as certain guesses, and as drawn without replacement
            child, records, final = verify_children(p, q_rows, tree, 0, [exact.REJECT] * 2, "without_replacement")
            emitted = records[-1].token if child is not None else int(final.argmax())
            assert emitted == argmax


@pytest.mark.parametrize("speculate, tree, temperature", [("model", (2, 2), 0.0), ("model", "dynamic", 0.0),
                                                           ("eagle", (2, 2), 0.0), ("ngram", (2, 2), 1.0)])
def test_the_engine_judges_the_children_it_chose_as_certain(monkeypatch, speculate, tree, temperature):
    """Greedy drafts choose their likeliest tokens and prompt lookup chooses its matches: the engine hands the rule
    q=None for them, at every step."""
    pair = load_pair("tiny")
    if speculate == "eagle" and pair.eagle is None:
        pytest.skip("the bundled pair has no EAGLE head")
    seen, rule = [], engine_module.verify_tree

    def recording(p, q, t, generator, kind, check):
        seen.append(q)
        return rule(p, q, t, generator, kind=kind, check=check)

    monkeypatch.setattr(engine_module, "verify_tree", recording)
    text = "def read(path):\n    with open(path) as f:\n        return f.read()\n\ndef read(path):\n    with open"
    Engine(pair, cache_tokens=0).generate(text, 24, speculate=speculate, tree=tree, temperature=temperature, seed=0)
    assert seen and all(q is None for q in seen), f"{sum(q is not None for q in seen)} of {len(seen)} steps passed q"


def test_the_lecture_lists_the_bug_and_its_law_shows_it():
    """Lecture 9's exact law (its own cell, run here) gives [2/3, 0, 1/3] with the bug and p without it, and its bug
    list switches the bug on."""
    cells = [("".join(c["source"]), c["cell_type"]) for c in json.loads(LECTURE.read_text())["cells"]]
    law_cell = next(source for source, kind in cells if kind == "code" and "def law(" in source)
    namespace: dict = {}
    exec(compile(law_cell, str(LECTURE), "exec"), namespace)  # it prints the three kinds' laws too
    law = namespace["law"]
    assert law(P, Q, "chosen") == P
    assert law(P, Q, "chosen", bug="chosen children judged as drawn") == [Fraction(2, 3), 0, Fraction(1, 3)]
    assert any(kind == "code" and '"chosen children judged as drawn": "chosen"' in source for source, kind in cells)
