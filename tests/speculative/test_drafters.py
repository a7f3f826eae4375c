"""Prompt lookup: what the n-gram drafter proposes for a given context, token by token."""

import pytest

from teachspec.sampling import SamplingParams
from teachspec.speculative.drafters import NgramDrafter


def propose(ids, k, **kw):
    proposal = NgramDrafter(**kw).propose(ids, k, SamplingParams(), None)
    assert proposal.q is None and proposal.passes == 0  # certain guesses, no model
    return proposal.tokens


def test_proposes_what_followed_the_most_recent_match_of_the_longest_suffix():
    #        0  1  2  3  4  5  6  7  8  9
    ids = [1, 2, 3, 9, 9, 2, 3, 7, 8, 5, 1, 2, 3]
    # the suffix (1, 2, 3) occurs at 0; (2, 3) alone also at 5, but the longest match wins
    assert propose(ids, 3) == [9, 9, 2]
    # with n_max = 2 the most recent (2, 3) wins: at 5, followed by 7, 8, 5
    assert propose(ids, 3, n_max=2) == [7, 8, 5]
    assert propose([4, 5, 6], 3) == []  # no earlier occurrence of any suffix


def test_a_match_near_the_present_is_continued_as_a_repeat():
    # a loop with period 3: only 1 token follows the latest match of (7, 8), yet the loop predicts k of them
    ids = [5, 6, 7, 8, 9, 7, 8, 9, 7, 8]
    assert propose(ids, 7) == [9, 7, 8, 9, 7, 8, 9]
    assert propose([3, 3], 4, n_max=1) == [3, 3, 3, 3]  # period 1


@pytest.mark.parametrize("k", [1, 2, 5])
def test_never_more_than_k(k):
    assert len(propose(list(range(10)) * 3, k)) == k
