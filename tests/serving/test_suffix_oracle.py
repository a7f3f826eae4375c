"""teachspec's suffix drafter against Snowflake's arctic-inference, the implementation vLLM's method "suffix" runs.

The same histories go into both: earlier requests (a prompt, then its response), then a request whose response is
written a token at a time, and at every step both are asked for a guess after the context so far. Arctic's side is
`SuffixDecodingCache` as vLLM's `SuffixDecodingProposer` drives it (start_request with the prompt,
add_active_response with each new token, speculate on the context, stop_request at the end); teachspec's is
`SuffixDrafter.guess` (the chain) and `SuffixTree.guess` (a tree).

What is the same (checked): both keep a tree of the request's own prompt and output and a tree of every response,
suffixes cut at the same depth, each node counting the suffixes through it; both match every suffix of the
context, grow the likeliest continuation from each (a token's probability is its count over its parent's, a path's
the product), stop at `min_prob` or at min(k, factor x match length), and keep the draft with the largest score
(the sum of its path probabilities), the longer match on a tie within one tree.

Where they differ (each shown by a test below; arctic's csrc/suffix_decoding/suffix_tree.cc and
arctic_inference/suffix_decoding/cache.py, 0.3.0):

1. Children with equal counts: teachspec takes the smaller token id; arctic takes the first in its sibling list
   (kept sorted by count; among equals the order follows the history of increments). A greedy chain that passes
   such a tie can then continue differently, so the two drafts, and their scores, can differ from there on.
2. Equal scores from the two trees: arctic keeps the request's own tree's draft (`draft1.score >= draft2.score`);
   teachspec keeps the longer match, then its own tree.
3. A short context: arctic never matches the whole context (`match_len < context.size()`). vLLM passes the last
   `suffix_decoding_max_tree_depth` tokens, so past that many tokens both match at most depth - 1; before it (a
   sequence shorter than the depth) teachspec may match the whole sequence and arctic not.
4. The cap: arctic's is floor(factor x match + offset); teachspec's ceil(factor x match) (no offset). For an
   integer factor (teachspec's FACTOR, and vLLM's default 1.0) they agree.
5. Probabilities: arctic's are float32, teachspec's float64: equal to about 1e-7, which can only matter at a
   probability exactly on `min_prob` or two scores equal to that precision.
6. Tree drafts: arctic's tree may take any number of children of a node; teachspec's keeps at most shape[d]
   children at depth d. With a shape as wide as the limit the trees are the same, up to the order of equal
   probabilities (a heap each).
7. Eviction (not exercised here): arctic drops whole responses first in, first out, at `max_cached_requests`
   (vLLM: 10000); teachspec's SuffixCache drops the least recently used output at a budget of tokens.

Arctic runs where it can be imported: this Python, else vLLM's (`TEACHSPEC_VLLM_PYTHON`, with
`TEACHSPEC_VLLM_PYTHONPATH`), in a subprocess that answers in JSON. Without it these tests are skipped.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from teachspec.serving.launch import ServerError, server_environment, vllm_python
from teachspec.speculative.suffix import SuffixCache, SuffixDrafter
from teachspec.speculative.suffix_tree import SuffixTree

DEPTH = 24

DRIVER = r"""
import json, sys
from arctic_inference.suffix_decoding import SuffixDecodingCache

def speculate(tree, context, s, tree_spec):
    d = tree.speculate(context[-s["depth"]:], s["k"], s["factor"], 0.0, s["min_prob"], tree_spec)
    return {"tokens": list(d.token_ids), "parents": list(d.parents), "probs": list(d.probs), "score": d.score,
            "match": d.match_len}

out = []
for s in json.load(sys.stdin):
    cache = SuffixDecodingCache(max_tree_depth=s["depth"], max_cached_requests=-1)
    for i, (prompt, response) in enumerate(s["histories"]):
        cache.start_request(i, prompt)
        cache.add_active_response(i, response)
        cache.stop_request(i)
    prompt, response = s["request"]
    cache.start_request("request", prompt)
    steps = []
    for t in range(len(prompt), len(prompt) + len(response) + 1):
        context = (prompt + response)[:t]
        if t > len(prompt):
            cache.add_active_response("request", [context[-1]])
        d = cache.speculate("request", context, max_spec_tokens=s["k"], max_spec_factor=s["factor"],
                            min_token_prob=s["min_prob"])
        step = {"tokens": list(d.token_ids), "probs": list(d.probs), "score": d.score, "match": d.match_len}
        if s.get("trees"):
            step["own_tree"] = speculate(cache._local_trees["request"], context, s, True)
            step["shared_tree"] = speculate(cache._global_tree, context, s, True)
        steps.append(step)
    cache.stop_request("request")
    out.append(steps)
json.dump(out, sys.stdout)
"""


def _arctic_python() -> tuple[str, dict] | None:
    """A Python that imports arctic-inference's suffix tree, and its environment: this one, else vLLM's."""
    candidates = [(sys.executable, None)]
    try:
        candidates.append((vllm_python(), server_environment()))
    except ServerError:
        pass
    for python, env in candidates:
        done = subprocess.run([python, "-c", "import arctic_inference.suffix_decoding"], env=env,
                              capture_output=True, timeout=120)
        if done.returncode == 0:
            return python, env
    return None


ARCTIC = _arctic_python()
pytestmark = pytest.mark.skipif(ARCTIC is None, reason=(
    "arctic-inference (the suffix tree vLLM's method 'suffix' runs) is importable neither here nor in vLLM's Python; "
    "teachspec.serving.launch.ARCTIC_INSTALL says how to build it"))


def arctic(scenarios: list[dict]) -> list[list[dict]]:
    """Every scenario replayed through arctic's SuffixDecodingCache: per step of the request, its draft."""
    python, env = ARCTIC
    done = subprocess.run([python, "-c", DRIVER], input=json.dumps(scenarios).encode(), env=env,
                          capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    return json.loads(done.stdout)


def scenario(histories, request, k=8, factor=1.0, min_prob=0.1, trees=False) -> dict:
    return {"histories": histories, "request": request, "k": k, "factor": factor, "min_prob": min_prob,
            "depth": DEPTH, "trees": trees}


def teachspec_steps(s: dict):
    """The same scenario through teachspec's SuffixDrafter: per step, (the guess, the drafter) after the context."""
    cache = SuffixCache(depth=s["depth"])
    for prompt, response in s["histories"]:
        earlier = SuffixDrafter(cache, factor=s["factor"], min_prob=s["min_prob"])
        earlier.guess(prompt, (1,))  # the prompt: its own tree only
        earlier.guess(prompt + response, (1,))  # the response: into the engine's cache too
    prompt, response = s["request"]
    drafter = SuffixDrafter(cache, factor=s["factor"], min_prob=s["min_prob"])
    for t in range(len(prompt), len(prompt) + len(response) + 1):
        context = (prompt + response)[:t]
        yield context, drafter.guess(context, (1,) * s["k"]), drafter


def repeats(rng: random.Random, base: list[int], vocab: int, n: int) -> list[int]:
    """n tokens made of pieces of `base`, now and then a stray token: text that repeats itself, as agents' does."""
    out = []
    while len(out) < n:
        start = rng.randrange(len(base))
        out += base[start:start + rng.randrange(3, 12)]
        if rng.random() < 0.3:
            out.append(rng.randrange(vocab))
    return out[:n]


# -- the same guesses ------------------------------------------------------------------------------------------

# Responses that share beginnings at different frequencies, so no node has two children of equal count.
NO_TIES = scenario(
    histories=[([1, 2], [10, 11, 12, 13, 14, 15, 16, 17])] * 3 + [([1, 3], [10, 11, 12, 20, 21, 22, 23])]
    + [([1, 4], [30, 31, 10, 11, 12, 13, 14, 40])] * 2,
    request=([5, 6, 7, 8, 30, 31, 10, 11], [12, 13, 14, 15, 16, 17, 30, 31, 10, 11, 12, 20, 21, 22, 23, 50, 30,
                                             31]),
    trees=True)


@pytest.mark.parametrize("factor", [1.0, 4.0])
def test_the_same_chain_at_every_step_where_no_counts_tie(factor):
    s = {**NO_TIES, "factor": factor}
    (steps,) = arctic([s])
    guessed = 0
    for (context, ours, _), theirs in zip(teachspec_steps(s), steps, strict=True):
        assert list(ours.tokens[1:]) == theirs["tokens"], context
        assert list(ours.prob[1:]) == pytest.approx(theirs["probs"], abs=1e-6)
        if theirs["tokens"]:
            assert ours.match == theirs["match"]
            guessed += 1
    assert guessed >= len(steps) // 2  # the scenario does exercise guessing


def test_the_same_trees_where_no_counts_tie():
    """use_tree_spec against SuffixTree.guess with a shape as wide as the limit, tree by tree: the same nodes under
    the same parents with the same path probabilities, in an order that may differ among equal probabilities."""
    s = NO_TIES
    (steps,) = arctic([s])

    def nodes(tokens, parents, probs):
        paths = []
        for i, t in enumerate(tokens):
            paths.append((paths[parents[i]][0] if parents[i] >= 0 else ()) + (t,))
            paths[-1] = (paths[-1], round(probs[i], 5))
        return sorted(paths)

    compared = 0
    for (context, _, drafter), theirs in zip(teachspec_steps(s), steps, strict=True):
        for tree, key in ((drafter.own, "own_tree"), (drafter.cache.tree, "shared_tree")):
            ours = tree.guess(context[-DEPTH:], (s["k"],) * s["k"], limit=s["k"], min_prob=s["min_prob"],
                              factor=s["factor"])
            t = theirs[key]
            mine = nodes(ours.tokens[1:], [p - 1 for p in ours.parents[1:]], ours.prob[1:])
            assert mine == nodes(t["tokens"], t["parents"], t["probs"]), (context, key)
            compared += bool(t["tokens"])
    assert compared >= len(steps) // 2


# -- random histories: the differences are ties ------------------------------------------------------------------

def admissible(tree: SuffixTree, context: list[int], draft: dict, s: dict) -> bool:
    """Is `draft` (arctic's) a greedy chain of teachspec's `tree` with ties broken some way: from the node its match
    ends at, each token a child of the largest count, its path probability teachspec's, stopped where teachspec
    would stop (the cap, min_prob, or no child)?"""
    node = tree.root
    for t in context[len(context) - draft["match"]:]:
        node = node.children.get(t)
        if node is None:
            return False
    p = 1.0
    for token, prob in zip(draft["tokens"], draft["probs"]):
        child = node.children.get(token)
        if child is None or child.count != max(c.count for c in node.children.values()):
            return False
        p *= child.count / node.count
        if abs(p - prob) > 1e-5 or p < s["min_prob"] - 1e-7:
            return False
        node = child
    cap = min(s["k"], int(draft["match"] * s["factor"] + 1e-6))
    stops = (len(draft["tokens"]) == cap or not node.children
             or p * max(c.count for c in node.children.values()) / node.count < s["min_prob"])
    return stops


def test_on_random_histories_every_difference_is_a_tie_broken_the_other_way():
    rng = random.Random(0)
    scenarios = []
    for _ in range(30):
        vocab = rng.choice([3, 5, 20, 100])
        base = [rng.randrange(vocab) for _ in range(30)]
        histories = [(repeats(rng, base, vocab, rng.randrange(24, 40)),
                      repeats(rng, base, vocab, rng.randrange(10, 40))) for _ in range(rng.randrange(0, 4))]
        # prompts of at least DEPTH tokens: past the short-context difference (3 in the module docstring)
        scenarios.append(scenario(histories, (repeats(rng, base, vocab, rng.randrange(DEPTH, 40)),
                                              repeats(rng, base, vocab, 40))))
    same = differ = 0
    for s, steps in zip(scenarios, arctic(scenarios), strict=True):
        for (context, ours, drafter), theirs in zip(teachspec_steps(s), steps, strict=True):
            if list(ours.tokens[1:]) == theirs["tokens"]:
                same += 1
                continue
            differ += 1
            assert theirs["tokens"] and ours.tokens[1:], (context, theirs, ours)  # never one guesses and one not
            assert any(admissible(tree, context, theirs, s) for tree in (drafter.own, drafter.cache.tree)), (
                context, theirs, ours)
    assert same >= 0.85 * (same + differ), (same, differ)


# -- where they choose differently, one by one -------------------------------------------------------------------

def first_guess(s: dict) -> tuple[list[int], list[int]]:
    """(arctic's, teachspec's) guess after the request's prompt."""
    (steps,) = arctic([s])
    _, ours, _ = next(teachspec_steps(s))
    return steps[0]["tokens"], list(ours.tokens[1:])


def test_1_children_of_equal_count_smaller_id_here_first_in_its_list_there():
    # after 5: 7 (seen first) and 6, once each
    s = scenario([([1], [5, 7]), ([1], [5, 6])], ([9, 9, 9, 5], []), k=4, factor=4.0)
    assert first_guess(s) == ([7], [6])


def test_2_equal_scores_from_the_two_trees_the_requests_own_there_the_longer_match_here():
    # own tree: "2 1" -> 2 1 (0.5 + 0.5); earlier responses: "1 2 1" -> 3 (1.0): both score 1.0
    s = scenario([([0, 2], [1, 1, 0, 1]), ([3, 1, 3], [1, 1, 2, 1, 3])], ([2, 1, 2, 1], []), k=4)
    assert first_guess(s) == ([2, 1], [3])


def test_3_arctic_never_matches_the_whole_context():
    # "1 2" -> 3 once; "2" -> 4 twice: the whole context [1, 2] matched here, only its last token there
    s = scenario([([0], [1, 2, 3]), ([0], [9, 2, 4]), ([0], [9, 2, 4])], ([1, 2], []), k=4)
    assert first_guess(s) == ([4], [3])
    longer = scenario(s["histories"], ([0, 1, 2], []), k=4)
    assert first_guess(longer) == ([3], [3])


def test_4_the_cap_is_floored_there_and_rounded_up_here():
    # a match of 3 tokens at factor 1.5: 4.5 guesses, 4 there and 5 here
    s = scenario([([0], [1, 2, 3, 4, 5, 6, 7, 8, 9])], ([0, 1, 2, 3], []), k=8, factor=1.5)
    assert first_guess(s) == ([4, 5, 6, 7], [4, 5, 6, 7, 8])
