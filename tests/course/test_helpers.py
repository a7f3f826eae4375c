"""What several lectures share (teachspec/course/helpers.py): the printed tree, the probability integral
transform, and a timed tree pass that leaves the cache as it found it."""

import torch

from teachspec import kv, load_pair
from teachspec.course.helpers import show_tree, tree_pass_ms, where_on_p
from teachspec.speculative.tree import TokenTree


def test_a_tree_prints_as_an_indented_list_parents_before_children(capsys):
    tree = TokenTree((-1, 0, 0, 1), (5, 6, 7, 8))
    show_tree(tree, lambda node: f"token {tree.tokens[node]}")
    assert capsys.readouterr().out.splitlines() == ["[0] token 5", "    [1] token 6", "        [3] token 8",
                                                    "    [2] token 7"]


def test_a_tokens_point_lies_in_its_own_stretch_of_p():
    pair = load_pair("tiny")
    prompt = pair.encode("def read(path):")
    p = torch.softmax(kv.forward(pair.target, prompt, kv.new_cache(pair.target), 1, pair.vocab_size)[0].double(), -1)
    ranked = p.argsort(descending=True).tolist()
    for rank in (0, 1, 5):
        token = ranked[rank]
        [x] = where_on_p(pair, prompt, [token], seed=rank)
        start = float(p[ranked[:rank]].sum())
        assert start <= x < start + float(p[token]) + 1e-12  # laid end to end, likeliest first
    assert where_on_p(pair, prompt, [ranked[1]], 3) == where_on_p(pair, prompt, [ranked[1]], 3)  # its own seed


def test_a_timed_tree_pass_leaves_the_cache_holding_the_context():
    pair = load_pair("tiny")
    context = pair.encode("def main():\n    " * 8)
    cache = kv.new_cache(pair.target)
    kv.forward(pair.target, context[:-1], cache, 1, pair.vocab_size)
    for n in (1, 4, 16):
        assert tree_pass_ms(pair, context, cache, n) > 0
        assert cache.get_seq_length() == len(context) - 1
