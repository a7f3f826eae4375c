"""The suffix tree against brute force: its counts are the occurrences of every substring up to `depth` tokens,
however the sequences arrived (whole, or a token at a time) and whichever were removed; its match is the longest
suffix of the context that occurred with something after it; its guesses are the likeliest continuations, best
first, within the limits given."""

import random
from collections import Counter

import pytest

from teachspec.speculative.suffix_tree import SuffixTree


def occurrences(sequences, depth) -> Counter:
    """Brute force: every substring of at most `depth` tokens of every sequence, counted."""
    out = Counter()
    for s in sequences:
        for i in range(len(s)):
            for j in range(i + 1, min(len(s), i + depth) + 1):
                out[tuple(s[i:j])] += 1
    return out


def counts(tree: SuffixTree) -> Counter:
    """The tree's own counts, path by path."""
    out, stack = Counter(), [((), tree.root)]
    while stack:
        path, node = stack.pop()
        for t, child in node.children.items():
            assert child.count > 0, path + (t,)  # a node counted by nothing is gone
            out[path + (t,)] = child.count
            stack.append((path + (t,), child))
    return out


def random_sequences(rng, n, vocab=4, length=(1, 30)):
    return [[rng.randrange(vocab) for _ in range(rng.randrange(*length))] for _ in range(n)]


@pytest.mark.parametrize("depth", [2, 3, 8])
def test_counts_are_the_occurrences_of_every_substring_up_to_depth(depth):
    rng = random.Random(depth)
    for _ in range(20):
        seqs = random_sequences(rng, rng.randrange(1, 6))
        tree = SuffixTree(depth)
        for i, s in enumerate(seqs):
            tree.add(i, s)
        assert counts(tree) == occurrences(seqs, depth)
        assert len(tree) == sum(map(len, seqs))


def test_a_sequence_grown_token_by_token_counts_as_one_added_whole():
    rng = random.Random(1)
    for _ in range(20):
        s = random_sequences(rng, 1)[0]
        whole, grown = SuffixTree(5), SuffixTree(5)
        whole.add("r", s)
        grown.add("r", s[:1])
        i = 1
        while i < len(s):
            step = rng.randrange(1, 4)
            grown.extend("r", s[i:i + step])
            i += step
        assert counts(grown) == counts(whole) and grown.sequences["r"] == s


def test_removing_a_sequence_leaves_the_tree_of_the_others():
    rng = random.Random(2)
    for _ in range(20):
        seqs = random_sequences(rng, 5)
        tree = SuffixTree(6)
        for i, s in enumerate(seqs):
            tree.add(i, s)
        gone = rng.sample(range(5), 3)
        for i in gone:
            assert tree.remove(i) == seqs[i]
        kept = [s for i, s in enumerate(seqs) if i not in gone]
        assert counts(tree) == occurrences(kept, 6)
    for i in list(tree.sequences):
        tree.remove(i)
    assert tree.root.children == {} and len(tree) == 0


def test_the_match_is_the_longest_suffix_that_occurred_with_something_after_it():
    rng = random.Random(3)
    for _ in range(200):
        seqs = random_sequences(rng, 3)
        depth = rng.randrange(2, 7)
        tree = SuffixTree(depth)
        for i, s in enumerate(seqs):
            tree.add(i, s)
        context = [rng.randrange(4) for _ in range(rng.randrange(1, 10))]
        followed = {p[:-1] for p in occurrences(seqs, depth) if len(p) >= 2}  # substrings with a token after
        want = max((n for n in range(1, min(depth - 1, len(context)) + 1) if tuple(context[-n:]) in followed),
                   default=0)
        assert tree.match(context).length == want


def test_a_chain_follows_the_likeliest_continuation():
    tree = SuffixTree(8)
    tree.add("a", [1, 2, 3, 4, 5])
    tree.add("b", [1, 2, 3, 4, 5])
    tree.add("c", [1, 2, 3, 9, 9])
    g = tree.guess([7, 1, 2], (1,) * 3)
    assert g.match == 2 and g.tokens == (2, 3, 4, 5) and g.parents == (-1, 0, 1, 2)
    assert g.prob == pytest.approx((1.0, 1.0, 2 / 3, 2 / 3))  # "1 2" -> 3 always; "1 2 3" -> 4 twice in three
    assert tree.guess([7, 1, 2], (1,)).tokens == (2, 3)
    assert tree.guess([7, 1, 2], (1,) * 3, limit=0).tokens == (2,)
    assert tree.guess([8, 8], (1,) * 3).tokens == (8,) and tree.guess([8, 8], (1,) * 3).match == 0


def test_a_tree_grows_best_first_within_branches_and_the_probability_floor():
    tree = SuffixTree(8)
    for i, tail in enumerate([[4, 5], [4, 5], [4, 6], [9, 9]]):
        tree.add(i, [1, 2, 3] + tail)
    g = tree.guess([1, 2, 3], (2, 2, 2), min_prob=0.0)
    # after "1 2 3": 4 (3 of 4), then 9 (1 of 4); after "... 4": 5 (2 of 3), 6 (1 of 3); after "... 9": 9
    assert g.tokens == (3, 4, 5, 9, 6, 9)
    assert g.parents == (-1, 0, 1, 0, 1, 3)
    assert g.prob == pytest.approx((1.0, 0.75, 0.5, 0.25, 0.25, 0.25))
    assert tree.guess([1, 2, 3], (2, 2, 2), min_prob=0.3).tokens == (3, 4, 5)
    assert tree.guess([1, 2, 3], (2, 2, 2), limit=2, min_prob=0.0).tokens == (3, 4, 5)
    shaped = tree.guess([1, 2, 3], (1, 2), min_prob=0.0)  # one child at depth 0, two below it, nothing deeper
    assert shaped.tokens == (3, 4, 5, 6) and shaped.parents == (-1, 0, 1, 1)


def test_ties_go_to_the_smaller_token_so_a_guess_is_the_same_every_time():
    tree = SuffixTree(4)
    tree.add("x", [1, 7])
    tree.add("y", [1, 3])
    assert tree.guess([1], (1,)).tokens == (1, 3)


@pytest.mark.parametrize("call, error, message", [
    (lambda t: t.add("a", [1]), ValueError, "sequence 'a' is in the tree already"),
    (lambda t: t.extend("zz", [1]), KeyError, "no sequence 'zz'"),
    (lambda t: t.remove("zz"), KeyError, "no sequence 'zz'"),
    (lambda t: t.add("b", [1, -2]), ValueError, "tokens"),
    (lambda t: t.add("b", [1, 2.0]), (TypeError, ValueError), "tokens"),
    (lambda t: t.guess([1], (1,), limit=-1), ValueError, "limit"),
    (lambda t: t.guess([1], (2, 0)), ValueError, "shape"),
    (lambda t: t.guess([1], [2]), ValueError, "shape"),
    (lambda t: t.guess([1], (2,), min_prob=1.5), ValueError, "min_prob"),
])
def test_bad_input_is_refused_and_changes_nothing(call, error, message):
    tree = SuffixTree(4)
    tree.add("a", [1, 2, 3])
    before = (counts(tree), dict(tree.sequences))
    with pytest.raises(error, match=message):
        call(tree)
    assert (counts(tree), dict(tree.sequences)) == before


def test_depth_must_leave_room_for_a_guess():
    with pytest.raises(ValueError, match="depth"):
        SuffixTree(1)


def test_a_shorter_match_that_leaves_room_for_a_longer_guess_wins():
    """A path holds at most `depth` tokens: "1 2 3" leaves room for one guess, "3" for three."""
    tree = SuffixTree(4)
    tree.add("a", [1, 2, 3, 4, 5, 6])
    assert tree.match([1, 2, 3]).length == 3
    g = tree.guess([1, 2, 3], (1,) * 5)
    assert g.tokens == (3, 4, 5, 6) and g.match == 1
    assert tree.guess([1, 2, 3], (1,)).match == 3  # one guess: the longest match gives it as surely


def test_a_factor_bounds_each_matchs_guess_by_its_length():
    tree = SuffixTree(8)
    tree.add("a", [9, 1, 2, 3, 4, 5, 6, 7])
    assert tree.guess([5, 9, 1], (1,) * 6, factor=1.0).tokens == (1, 2, 3)  # "9 1": two tokens, two guesses
    assert tree.guess([5, 9, 1], (1,) * 6, factor=1.5).tokens == (1, 2, 3, 4)
    assert tree.guess([5, 9, 1], (1,) * 6).tokens == (1, 2, 3, 4, 5, 6, 7)
    with pytest.raises(ValueError, match="factor"):
        tree.guess([1], (1,), factor=0)
