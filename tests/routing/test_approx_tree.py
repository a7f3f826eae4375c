"""The router's approximate tree: character matches, who holds what, per-worker sizes against a recount, and
eviction to a character budget, least recently used first."""

import random

from teachspec.routing.approx_tree import ApproxTree


def recount(tree: ApproxTree) -> dict[int, int]:
    """Characters per worker, counted from scratch over every node it holds."""
    counts, stack = {}, [tree.root]
    while stack:
        node = stack.pop()
        stack.extend(node.children.values())
        if node is not tree.root:
            for worker in node.holders:
                counts[worker] = counts.get(worker, 0) + len(node.text)
    return counts


def test_match_counts_characters_and_names_the_holder():
    tree = ApproxTree()
    tree.insert("hello world", 0)
    tree.insert("help me", 1)
    m = tree.match("hello there")
    assert (m.chars, m.text_chars, m.worker) == (6, 11, 0)
    assert abs(m.rate - 6 / 11) < 1e-12
    assert tree.match("help me now").worker == 1 and tree.match("help me now").chars == 7
    assert tree.match("zzz").chars == 0
    assert tree.match("hel").worker == 0  # the split head "hel" keeps its creator, though both hold it


def test_the_creator_answers_until_it_leaves_the_node():
    tree = ApproxTree()
    tree.insert("shared prefix", 0)
    tree.insert("shared prefix", 1)
    assert tree.match("shared prefix!").worker == 0
    tree.remove(0)
    assert tree.match("shared prefix!").worker == 1
    assert recount(tree) == {1: 13} == {w: tree.size(w) for w in tree.chars}


def test_sizes_agree_with_a_recount_after_random_inserts_and_evictions():
    rng = random.Random(0)
    tree = ApproxTree()
    for _ in range(300):
        text = "".join(rng.choice("ab") for _ in range(rng.randrange(1, 12)))
        tree.insert(text, rng.randrange(3))
        if rng.random() < 0.1:
            tree.evict(rng.randrange(5, 30))
        assert recount(tree) == {w: n for w, n in tree.chars.items() if n}


def test_evict_brings_each_worker_under_budget_oldest_leaves_first():
    tree = ApproxTree()
    tree.insert("aaaa-old", 0)
    tree.insert("bbbb-new", 0)
    tree.insert("cccc", 1)
    tree.evict(8)
    assert tree.size(0) == 8 and tree.size(1) == 4
    assert tree.match("aaaa-old").chars == 0 and tree.match("bbbb-new").chars == 8
    tree.insert("bbbb-two", 0)  # shares "bbbb-" with the newer text, stamps it now
    tree.evict(5)
    assert tree.size(0) <= 5 and tree.match("bbbb-").chars == 5
    assert recount(tree) == {w: n for w, n in tree.chars.items() if n}


def test_a_removed_worker_is_gone_everywhere():
    tree = ApproxTree()
    tree.insert("abc", 0)
    tree.insert("abd", 1)
    tree.remove(1)
    assert tree.size(1) == 0 and tree.match("abd").chars == 2 and tree.match("abd").worker == 0


def test_a_tree_of_token_ids_matches_tokens_as_the_character_tree_matches_characters():
    """vllm-router 0.1.17 matches prompts sent as ids: the same tree over lists of ints, sizes counted in tokens."""
    tree = ApproxTree()
    tree.insert([1, 2, 3, 4, 5], 0)
    tree.insert([1, 2, 9], 1)
    m = tree.match([1, 2, 3, 7])
    assert (m.length, m.total, m.worker) == (3, 4, 0) and m.rate == 0.75
    assert tree.match([1, 2, 9, 9]).worker == 1 and tree.match((1, 2, 9)).length == 3  # a tuple is the same ids
    assert tree.match([8]).length == 0
    assert {w: tree.size(w) for w in tree.sizes} == {0: 5, 1: 3} == recount(tree)
    tree.evict(2)
    assert tree.size(0) <= 2 and tree.size(1) <= 2 and recount(tree) == {w: n for w, n in tree.sizes.items() if n}


def test_token_and_character_trees_agree_on_the_same_sequences():
    """A string and the list of its characters' codes give the same matches: the tree is one algorithm."""
    rng = random.Random(1)
    chars, ids = ApproxTree(), ApproxTree()
    for _ in range(200):
        text = "".join(rng.choice("abc") for _ in range(rng.randrange(1, 10)))
        worker = rng.randrange(3)
        m, n = chars.match(text), ids.match([ord(c) for c in text])
        assert (m.chars, m.text_chars, m.worker) == (n.length, n.total, n.worker)
        chars.insert(text, worker)
        ids.insert([ord(c) for c in text], worker)
    assert chars.sizes == ids.sizes
