"""How often a correct answer fails a statistical part: the bound grading.py states, counted on the parts as they
run. A statistical part compares frequencies with their law token by token (`grading.agrees`, 5.5 standard
errors: a false alarm with chance 2 (1 - Phi(5.5)) = 3.8e-8 a token under the normal approximation); the chance
that a correct answer fails a part is at most that times the tokens it judges, visible and hidden cases together."""

from __future__ import annotations

import math

import pytest

from helpers import course_submissions as cs
from teachspec.course import grading
from teachspec.course.definitions import from_sources

PER_TOKEN = math.erfc(5.5 / math.sqrt(2))  # two-sided tail beyond 5.5 standard errors
STATISTICAL = ("a1.decisions", "a1.after_rejection", "a1.bonus", "a4.verify_node")


def test_the_tail_is_what_the_docstring_says():
    assert 3.7e-8 < PER_TOKEN < 3.9e-8
    assert "5.5 standard errors" in grading.__doc__ and "1.6e6" in grading.__doc__


@pytest.mark.parametrize("part", STATISTICAL)
def test_a_correct_answer_fails_a_statistical_part_less_than_once_in_a_million(part, monkeypatch):
    judged = []
    agrees = grading.agrees

    def counting(counts, probs, n):
        judged.append(len(probs))
        return agrees(counts, probs, n)

    monkeypatch.setattr(grading, "agrees", counting)
    code = cs.edited(part.split(".")[0])
    grading.judge(part, from_sources(list(code.values())), secret=b"rates")
    # the first comparison of each run is the law itself; the rest only name a cause once it has failed
    assert judged, f"{part} judged no frequencies: it is not a statistical part"
    tokens = sum(judged)
    assert tokens <= 16 and tokens * PER_TOKEN < 1e-6 * 0.7, (part, judged)
