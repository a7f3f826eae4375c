"""The hidden cases, and what a student who learns the course's secret can do with it: nothing. The hidden seed
mixes the secret with the submission's code (`grading.seed_of`), so a table of answers written for the cases one
code gives is a new code, with other cases."""

from __future__ import annotations

import pytest

from helpers import course_submissions as cs
from teachspec.course import grading
from teachspec.course.definitions import from_sources

SECRET = b"a secret that leaked"


def test_hidden_cases_depend_on_the_secret_and_the_code_and_visible_ones_on_neither():
    seeds = {grading.seed_of("a3.choose_k", s, c) for s in (b"one", b"two") for c in ("x = 1", "x = 2")}
    assert len(seeds) == 4
    assert grading.seed_of("a3.choose_k") not in seeds
    assert grading.seed_of("a3.choose_k", b"one", "x = 1") == grading.seed_of("a3.choose_k", b"one", "x = 1")


def test_a_table_of_answers_for_the_leaked_secrets_cases_fails_the_hidden_cases():
    """The student computes the hidden cases the secret gives for their code (the solution's here, or the table's
    own code before the table is written), hard-codes the answers, and hands that in."""
    solution = cs.edited("a3")["choose_k"]
    base = solution + "\n\n" + cs.hard_coded_choose_k({})
    table = {**cs.answers("a3.choose_k"), **cs.answers("a3.choose_k", SECRET, from_sources([base]).code)}
    handed_in = from_sources([solution + "\n\n" + cs.hard_coded_choose_k(table)])
    assert grading.judge("a3.choose_k", handed_in).startswith("ok")  # the visible cases: all in the table
    with pytest.raises(grading.CheckFailed, match="not a hidden one"):
        grading.judge("a3.choose_k", handed_in, SECRET)
    # the solution passes the same secret's hidden cases: what fails is the table
    assert grading.judge("a3.choose_k", from_sources([solution]), SECRET).startswith("ok")
