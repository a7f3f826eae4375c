"""Submissions to grade, made from the instructor's sources (teachspec/course/sources/): the solution itself, a blank
one, each classic bug, and the ways a student might game the checks and the grader. Shared by
tests/course/test_assignments.py, test_grading_round_trip.py, test_autograde.py, test_grading_rates.py and
test_grading_secret.py.

A bug is a text edit of one exercise cell of the solution (its nbgrader grade_id), so that the same bug can be
put into any copy of the notebook: the instructor's, nbgrader's release or Otter-Grader's student version.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

from teachspec.course.student import BEGIN, BEGIN_HIDDEN, END, END_HIDDEN, student_version

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "teachspec" / "course" / "sources"      # the instructor's: solutions in
STUDENT_COPIES = ROOT / "notebooks" / "assignments"     # what a student browses, made from SOURCES
ASSIGNMENTS = {path.stem.split("_")[0]: path for path in sorted(SOURCES.glob("a*.ipynb"))}

# assignment -> bug -> (the exercise's grade_id, [(old text, new text)], the parts it loses, a regex for the likely
# cause its feedback must name)
BUGS: dict[str, dict[str, tuple[str, list[tuple[str, str]], set[str], str]]] = {
    "a1": {
        "residual subtracted the wrong way": (
            "residual", [("(p - q)", "(q - p)")], {"residual"}, r"subtract q from p"),
        "residual not normalised": (
            "residual", [("return r / mass if mass > 0 else p.clone()", "return r")], {"residual"}, r"unnormalised"),
        "resample from p, not the residual": (
            "speculative_step", [("sample(residual(p[i], q[i]), generator)", "sample(p[i], generator)")],
            {"after_rejection"}, r"That is p_0 itself"),
        "bonus from p_(k-1)": (
            "speculative_step", [("sample(p[k], generator)", "sample(p[k - 1], generator)")], {"bonus"},
            r"That is p_\(k-1\)"),
        "one uniform shared by all positions": (
            "speculative_step", [("    for i, x in enumerate(draft.tolist()):\n"
                                  "        u = torch.rand((), generator=generator, dtype=p.dtype)",
                                  "    u = torch.rand((), generator=generator, dtype=p.dtype)\n"
                                  "    for i, x in enumerate(draft.tolist()):")],
            {"decisions"}, r"one uniform u shared"),
        "ratio read from the next row": (
            "speculative_step", [("ratio = p[i, x] / q[i, x]", "ratio = p[i + 1, x] / q[i, x]")], {"decisions"},
            r"row i of p"),
        "accept when p >= q": (
            "speculative_step", [("if not u < min(1.0, float(ratio)):", "if not ratio >= 1:")], {"decisions"},
            r"accepting exactly when p\(x\) >= q\(x\)"),
        "no guard for q(x) = 0": (
            "speculative_step", [("ratio = p[i, x] / q[i, x] if q[i, x] > 0 else 0.0", "ratio = p[i, x] / q[i, x]")],
            {"decisions"}, r"guard it"),
        # two mistakes in one: it never decides, so it never draws from the residual either
        "always accept": (
            "speculative_step", [("if not u < min(1.0, float(ratio)):", "if False:")],
            {"decisions", "after_rejection"}, r"accepted a guess p gives probability 0"),
    },
    "a2": {
        "locks ignored": (
            "radix", [(" and x.locks == 0]", "]"), (" and parent.locks == 0:", ":")], {"locks"}, r"locks > 0"),
        "most recently used evicted first": (
            "radix", [("heap = [(x.last_access, x.id, x)", "heap = [(-x.last_access, -x.id, x)"),
                      ("(parent.last_access, parent.id, parent)", "(-parent.last_access, -parent.id, parent)")],
            {"lru"}, r"most recently used leaf first"),
        "match_prefix does not touch": (
            "radix", [("return self._walk(tuple(tokens), self._tick())", "return self._walk(tuple(tokens), None)"),
                      ("child.last_access = now", "child.last_access = child.last_access if now is None else now")],
            {"lru"}, r"last_access = now"),
        "childless parents kept": (
            "radix", [("            if parent is not self.root and not parent.children and parent.locks == 0:\n"
                       "                heapq.heappush(heap, (parent.last_access, parent.id, parent))\n", "")],
            {"cascade"}, r"parent left without children"),
        "size counts the whole sequence": (
            "radix", [("self.size += len(tokens) - i", "self.size += len(tokens)")], {"match_insert"},
            r"only the suffix that is not cached"),
    },
    "a3": {
        "closed form divides by zero at alpha = 1": (
            "choose_k", [("tokens = sum(alpha ** i for i in range(k + 1))",
                          "tokens = (1 - alpha ** (k + 1)) / (1 - alpha)")],
            {"expected_speedup"}, r"divides by zero at alpha = 1"),
        "draft cost ignored": (
            "choose_k", [("return tokens / (k * c + 1)", "return tokens")], {"expected_speedup"},
            r"divide by k c \+ 1"),
        "k = 0 left out": (
            "choose_k", [("max(range(k_max + 1)", "max(range(1, k_max + 1)")], {"choose_k"},
            r"k = 0, plain decoding, is allowed"),
        "a tie goes to the longer draft": (
            "choose_k", [("-k))", "k))")], {"choose_k"}, r"choose the shorter one"),
    },
    "a4": {
        "remove changes q in place": (
            "remove", [("kept = q.clone()", "kept = q")], {"remove"}, r"changed q in place"),
        "remove does not renormalise": (
            "remove", [("return kept / mass if mass > 0 else kept", "return kept")], {"remove"}, r"not renormalised"),
        "p' never updated": (  # the chance read off p itself, not off node_rule's p'
            "rank_acceptance", [("chance = node_rule(p, q, tried + [y], kind)[0][-1]",
                                 "chance = min(1.0, float(p[y] / drawn_from[y]))")],
            {"ranks_independent"}, r"p' must become the residual"),
        "children judged as if drawn independently": (
            "rank_acceptance", [("node_rule(p, q, tried + [y], kind)", 'node_rule(p, q, tried + [y], "independent")'),
                                ('for x in tried if kind == "without_replacement" else []:', "for x in []:")],
            {"ranks_without_replacement"}, r"That is h for children drawn independently"),
        "histories not weighed by their rejection": (
            "rank_acceptance", [("weight * float(drawn_from[y]) * (1 - chance)))", "weight * float(drawn_from[y])))")],
            {"ranks_without_replacement"}, r"weighs each earlier draw by its chance of being drawn only"),
        "h_r not divided by the chance of reaching rank r": (
            "rank_acceptance", [("h.append(accepted / reach if reach > 0 else 0.0)", "h.append(accepted)")],
            {"ranks_independent", "ranks_without_replacement"}, r"the one accepted"),
        "verify_node draws the last token from p": (
            "verify_node", [("sample(final, generator)", "sample(p, generator)")], {"verify_node"},
            r"drawing the last token from p"),
    },
    "a5": {
        "a request's last token counted as served": (
            "reused", [("cached[i] = min(best, len(prompts[i]) - 1)", "cached[i] = best")], {"reuse"},
            r"Cap each match at len\(prompt\) - 1"),
        "only the request just before": (
            "reused", [("for s in before)", "for s in before[-1:])")], {"reuse"}, r"run just before it only"),
        "lpm ranks by the whole prompt": (
            "lpm_order", [("shared(p[:-1], s)", "shared(p, s)")], {"lpm"}, r"rank by the match of prompt\[:-1\]"),
        "lpm ties to the latest arrival": (
            "lpm_order", [("key=lambda i: (-match[i], i)", "key=lambda i: (-match[i], -i)")], {"lpm"},
            r"breaks ties by the latest arrival"),
        "branches in token order": (
            "dfs_order", [("sorted(branches.values(), key=lambda g: (-len(g), g[0]))",
                           "(branches[x] for x in sorted(branches))")], {"dfs_heaviest"}, r"token order"),
        "lightest branch first": (
            "dfs_order", [("key=lambda g: (-len(g), g[0])", "key=lambda g: (len(g), g[0])")], {"dfs_heaviest"},
            r"lightest branch first"),
        "a node's own requests after its children": (
            "dfs_order", [("        return out\n",
                           "        own = [i for i in group if len(prompts[i]) == depth]\n"
                           "        return out[len(own):] + own\n")], {"dfs_subtrees"},
            r"own requests after its children"),
        "best counts every last token as served": (
            "best_hit_rate", [("return sum(reused(prompts, order))",
                               "return sum(max((shared(prompts[i], prompts[j]) for j in order[:n]), default=0) "
                               "for n, i in enumerate(order))")], {"best"}, r"counts a last token as served"),
        "best is arrival order's": (
            "best_hit_rate", [("order = sorted(range(len(prompts)), key=lambda i: list(prompts[i]))",
                               "order = list(range(len(prompts)))")], {"best"}, r"hit rate of arrival order"),
        "best is a number of tokens": (
            "best_hit_rate", [(" / sum(len(p) for p in prompts)", "")], {"best"},
            r"a hit rate divides by all prompt tokens"),
    },
    "a6": {
        "confidence is the last probability": (
            "confidence", [("out *= draft", "out = draft")], {"confidence"}, r"last guess's own probability"),
        "confidence sums the probabilities": (
            "confidence", [("out = 1.0", "out = 0.0"), ("out *= draft", "out += draft")], {"confidence"},
            r"sum of the probabilities"),
        "rerank ties to the later node": (
            "rerank", [("key=lambda i: (-confidences[i], i)", "key=lambda i: (-confidences[i], -i)")], {"rerank"},
            r"Ties go to the node drawn first"),
        "rerank numbers by confidence": (
            "rerank", [("kept = [0] + sorted(ranked)", "kept = [0] + ranked")], {"rerank"},
            r"numbers the kept nodes by confidence"),
        "every guess of a level expanded": (
            "grow", [("expand = sorted(sorted(level, key=lambda i: -conf[i])[:width])", "expand = list(level)")],
            {"grow"}, r"expands every guess of a level"),
        "a level ranked by the last probability": (
            "grow", [("key=lambda i: -conf[i]", "key=lambda i: -draft[paths[parents[i]]][tokens[i]]")], {"grow"},
            r"each guess's own probability"),
        "the most confident of every level expanded": (
            "grow", [("        level = range(first, len(tokens))  # the guesses just drawn\n",
                      "        done = set(expand) | done if d else set(expand)\n"
                      "        level = [i for i in range(1, len(tokens)) if i not in done]\n")], {"grow"},
            r"most confident guesses drawn so far"),
        "the causal mask": (
            "tree_attention", [("        j = i\n        while j >= 0:  # node i, then each ancestor up to the root\n"
                                "            mask[i][j] = True\n            j = parents[j]\n",
                                "        for j in range(i + 1):\n            mask[i][j] = True\n")], {"mask"},
            r"causal mask of the flattened tree"),
        "a node blind to itself": (
            "tree_attention", [("        j = i\n        while", "        j = parents[i]\n        while")], {"mask"},
            r"blind to itself"),
        "positions are the nodes' numbers": (
            "tree_attention", [("positions[i] = positions[parents[i]] + 1", "positions[i] = i")], {"positions"},
            r"index in the flattened tree"),
    },
    "a7": {
        "followers read one token early": (
            "followers", [("out[s[i + n]] = out.get(s[i + n], 0) + 1",
                           "out[s[i + n - 1]] = out.get(s[i + n - 1], 0) + 1")], {"followers"}, r"the pattern's own"),
        "only the last occurrence counted": (
            "followers", [("                out[s[i + n]] = out.get(s[i + n], 0) + 1\n",
                           "                out = {s[i + n]: 1}\n")], {"followers"}, r"most recent match"),
        "an occurrence at the end read past it": (
            "followers", [("range(len(s) - n)", "range(len(s) - n + 1)")], {"followers"}, r"nothing after it"),
        "the match may fill the whole depth": (
            "longest_match", [("min(depth - 1, len(context))", "min(depth, len(context))")], {"match"},
            r"the match is at most depth - 1 tokens"),
        "a match with nothing after it": (
            "longest_match", [("if followers(sequences, context[len(context) - m:]):",
                               "if count(sequences, context[len(context) - m:]):")], {"match"},
            r"only at the very end of one"),
        "the shortest match": (
            "longest_match", [("range(min(depth - 1, len(context)), 0, -1)",
                               "range(1, min(depth - 1, len(context)) + 1)")], {"match"}, r"shortest suffix"),
        "ties to the larger token id": (
            "guess", [("key=lambda x: (-after[x], x)", "key=lambda x: (-after[x], -x)")], {"choice"},
            r"Ties go to the smaller token id"),
        "followers ranked by the node's count": (
            "guess", [("key=lambda x: (-after[x], x)", "key=lambda x: (-count(sequences, path), x)")],
            {"choice", "stop"}, r"rank a follower t by its own count"),  # its choice's D stops it where it should not
        "the guess runs past the depth": (
            "guess", [("while len(out) < k and len(path) < depth:", "while len(out) < k:")], {"choice"},
            r"guess at most depth - m"),
        "the guess stops one short of the depth": (
            "guess", [("len(path) < depth:", "len(path) < depth - 1:")], {"choice"}, r"not one fewer"),
        "D over the followers' total": (
            "guess", [("prob *= after[t] / count(sequences, path)", "prob *= after[t] / sum(after.values())")],
            {"stop"}, r"divides by the followers' total"),
        "each step's D against min_prob": (
            "guess", [("prob *= after[t]", "prob = after[t]")], {"stop"}, r"each step's own D"),
        "min_prob ignored": (
            "guess", [("        if prob < min_prob:\n            break\n", "")], {"stop"}, r"ignores min_prob"),
    },
    "a8": {
        "a sent text counted only whole": (
            "match", [("        n = 0\n        while n < min(len(s), len(text)) and s[n] == text[n]:\n"
                       "            n += 1\n", "        n = len(s) if text.startswith(s) else 0\n")], {"match"},
            r"only when the whole of it begins the request"),
        "a match one short at the end": (
            "match", [("while n < min(len(s), len(text)) and", "while n < min(len(s), len(text)) - 1 and")],
            {"match"}, r"one short when the match runs to the end"),
        "ties to the last sent": (
            "match", [("if n > best:", "if n >= best:")], {"match"}, r"ties go to the earliest"),
        "imbalanced when either holds": (
            "imbalanced", [(" and high > low", " or high > low")], {"imbalanced"}, r"imbalanced when either"),
        "imbalanced on the boundary": (
            "imbalanced", [("high - low > abs_threshold and high > low",
                            "high - low >= abs_threshold and high >= low")], {"imbalanced"},
            r"Both conditions are strict"),
        "the threshold compared with >=": (
            "route", [("> cache_threshold:", ">= cache_threshold:")], {"route"}, r"MORE than cache_threshold"),
        "round robin below the threshold": (
            "route", [("    return least_loaded(loads)  # a prefix nobody has",
                       "    return len(sent) % len(loads)  # a prefix nobody has")],
            {"route", "simulated"}, r"That is round robin below the threshold"),
        "the loads ignored": (
            "route", [("    if imbalanced(loads, abs_threshold, rel_threshold):\n"
                       "        return least_loaded(loads)  # balance first, whatever the request matches\n", "")],
            {"route", "simulated"}, r"never looks at the loads"),
    },
}

# One classic bug per assignment for the graders' round trips.
ROUND_TRIP_BUG = {"a1": "resample from p, not the residual", "a2": "locks ignored", "a3": "k = 0 left out",
                  "a4": "p' never updated", "a5": "branches in token order", "a6": "the causal mask",
                  "a7": "ties to the larger token id", "a8": "round robin below the threshold"}

# Ways to game the checks: name -> (assignment, what it starts from: the solution (None), "blank" or a bug, the
# exercise cell its code is appended to, the code, the parts it must not earn).
GAMING = {
    "a1 delegates to teachspec.verify": ("a1", None, "speculative_step", (
        "import teachspec\n"
        "def speculative_step(p, q, draft, generator):\n"
        "    return teachspec.verify(p, q, draft, generator).tokens"), {"decisions", "after_rejection", "bonus"}),
    "a1 replaces the random source and numpy's checks": ("a1", "resample from p, not the residual",
                                                          "speculative_step", (
        "import random, numpy, torch\n"
        "numpy.abs = lambda x: 0 * x\n"
        "numpy.sqrt = lambda x: 1e9 + 0 * x\n"
        "random.random = lambda: 0.5\n"
        "torch.manual_seed = lambda seed: None"), {"after_rejection"}),
    "a2 replaces the check functions": ("a2", "blank", "radix", (
        "import teachspec.course.checks as _c\n"
        "_c.check_radix = lambda *a, **k: print('All checks passed.')\n"
        "_c.check = lambda *a, **k: print('ok')"), {"match_insert", "lru", "locks", "cascade"}),
    "a2 replaces the reference RadixCache with its own tree": ("a2", "locks ignored", "radix", (
        "import teachspec.radix, teachspec.radix.tree\n"
        "teachspec.radix.RadixCache = teachspec.radix.tree.RadixCache = Radix"), {"locks"}),
    "a2 wraps RadixCache": ("a2", None, "radix", (
        "from teachspec.radix import RadixCache\n"
        "class Radix(Radix):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.ref = RadixCache()\n"
        "    def match_prefix(self, tokens):\n"
        "        m = self.ref.match_prefix(tuple(tokens))\n"
        "        return m.length, m.node"), {"match_insert", "lru", "locks", "cascade"}),
    "a3 delegates to teachspec.theory.optimal_k": ("a3", None, "choose_k", (
        "from teachspec import theory\n"
        "choose_k = lambda alpha, c, k_max=8: int(theory.optimal_k(alpha, c, k_max))"), {"choose_k"}),
    "a3 keeps optimal_k and replaces the reference with itself": ("a3", "k = 0 left out", "choose_k", (
        "import teachspec.theory\n"
        "_best = teachspec.theory.optimal_k\n"
        "teachspec.theory.optimal_k = lambda alpha, c, k_max=16: choose_k(alpha, c, k_max)\n"
        "expected_speedup = lambda alpha, k, c: float(teachspec.theory.speedup(alpha, k, c))"),
        {"choose_k", "expected_speedup"}),
    "a4 verify_node hands the node to verify_tree": ("a4", None, "verify_node", (
        "from teachspec import TokenTree, verify_tree\n"
        "def verify_node(p, q, children, kind, generator):\n"
        "    tree = TokenTree(parents=(-1,) + (0,) * len(children), tokens=(0, *children))\n"
        "    n = len(tree.tokens)\n"
        "    v = verify_tree(torch.stack([p] * n), torch.stack([q] * n), tree, generator, kind=kind)\n"
        "    return (v.path[0] - 1 if v.path else None), v.tokens[0]"), {"verify_node"}),
    "a5 dfs_order delegates to teachspec.radix.schedule.order": ("a5", None, "dfs_order", (
        "from teachspec.radix.schedule import order\n"
        "dfs_order = lambda prompts: order(prompts, 'dfs')"), {"dfs_subtrees", "dfs_heaviest"}),
    "a5 reused hands the queue to the library's replay": ("a5", None, "reused", (
        "from teachspec.radix.schedule import replay\n"
        "def reused(prompts, order):\n"
        "    return replay(prompts, order, 10**9).cached"), {"reuse"}),
    "a5 lpm_order wraps RadixCache.peek_prefix": ("a5", None, "lpm_order", (
        "from teachspec.radix import RadixCache\n"
        "def lpm_order(prompts, cache):\n"
        "    tree = RadixCache()\n"
        "    for s in cache:\n"
        "        tree.insert(s, range(len(s)))\n"
        "    match = [tree.peek_prefix(p[:-1]) for p in prompts]\n"
        "    return sorted(range(len(prompts)), key=lambda i: (-match[i], i))"), {"lpm"}),
    "a5 best_hit_rate delegates to teachspec.workloads": ("a5", None, "best_hit_rate", (
        "from teachspec import workloads\n"
        "best_hit_rate = workloads.best_hit_rate"), {"best"}),
    "a5 replaces the check functions": ("a5", "blank", "dfs_order", (
        "import teachspec.course.checks as _c\n"
        "_c.check = lambda *a, **k: print('ok')"), {"reuse", "lpm", "dfs_subtrees", "dfs_heaviest", "best"}),
    "a6 grow hands the draft to teachspec's grow_dynamic": ("a6", None, "grow", (
        "import torch\n"
        "from teachspec.sampling import SamplingParams\n"
        "from teachspec.speculative.drafters import grow_dynamic\n"
        "def grow(draft, root, width, depth, nodes):\n"
        "    def logits(path):\n"
        "        return torch.tensor(draft[path], dtype=torch.float64).log()\n"
        "    def feed(parents, tokens, fed):\n"
        "        def path(i):\n"
        "            out = []\n"
        "            while i > 0:\n"
        "                out.append(tokens[i])\n"
        "                i = parents[i]\n"
        "            return tuple(reversed(out))\n"
        "        return torch.stack([logits(path(i)) for i in fed])\n"
        "    grown = grow_dynamic(logits(())[None], root, depth, SamplingParams(temperature=0.0), None, feed,\n"
        "                         width=width, nodes=nodes)\n"
        "    return list(grown.tree.parents), list(grown.tree.tokens)"), {"grow"}),
    "a6 tree_attention hands the positions to TokenTree": ("a6", "positions are the nodes' numbers",
                                                           "tree_attention", (
        "from teachspec import TokenTree\n"
        "_mask_only = tree_attention\n"
        "def tree_attention(parents):\n"
        "    mask, _ = _mask_only(parents)\n"
        "    return mask, list(TokenTree(tuple(parents), (0,) * len(parents)).depth)"), {"mask", "positions"}),
    "a6 replaces the check functions": ("a6", "blank", "grow", (
        "import teachspec.course.checks as _c\n"
        "_c.check = lambda *a, **k: print('ok')"), {"confidence", "rerank", "grow", "mask", "positions"}),
    "a7 guess hands the sequences to teachspec's SuffixTree": ("a7", None, "guess", (
        "from teachspec.speculative.suffix_tree import SuffixTree\n"
        "def guess(sequences, context, depth, k, min_prob):\n"
        "    tree = SuffixTree(depth)\n"
        "    for i, s in enumerate(sequences):\n"
        "        tree.add(i, s)\n"
        "    m = tree.match(context)\n"
        "    if m.length == 0:\n"
        "        return []\n"
        "    return list(tree._grow_guess(m, context[-1], (1,) * min(k, depth - m.length), k, min_prob).tokens[1:])"),
        {"choice", "stop"}),
    "a7 followers wraps SuffixTree's counts": ("a7", None, "followers", (
        "from teachspec.speculative.suffix_tree import SuffixTree\n"
        "def followers(sequences, pattern):\n"
        "    tree = SuffixTree(len(pattern) + 1)\n"
        "    for i, s in enumerate(sequences):\n"
        "        tree.add(i, s)\n"
        "    node = tree.root\n"
        "    for t in pattern:\n"
        "        node = node.children.get(t)\n"
        "        if node is None:\n"
        "            return {}\n"
        "    return {t: child.count for t, child in node.children.items()}"), {"followers"}),
    "a7 replaces the check functions": ("a7", "blank", "guess", (
        "import teachspec.course.checks as _c\n"
        "_c.check = lambda *a, **k: print('ok')"), {"followers", "match", "choice", "stop"}),
    "a8 route hands the request to teachspec's cache_aware": ("a8", None, "route", (
        "from teachspec.routing.policies import make_policy\n"
        "def route(text, sent, loads, cache_threshold, abs_threshold, rel_threshold):\n"
        "    policy = make_policy('cache_aware', len(loads), cache_threshold=cache_threshold,\n"
        "                         balance_abs_threshold=abs_threshold, balance_rel_threshold=rel_threshold)\n"
        "    for s, w in sent:\n"
        "        policy.tree.insert(s, w)\n"
        "    return policy.choose(text, '', loads, [True] * len(loads))"), {"route", "simulated"}),
    "a8 match wraps the router's ApproxTree": ("a8", None, "match", (
        "from teachspec.routing.approx_tree import ApproxTree\n"
        "def match(sent, text):\n"
        "    tree = ApproxTree()\n"
        "    for s, w in sent:\n"
        "        tree.insert(s, w)\n"
        "    found = tree.match(text)\n"
        "    return found.chars, found.worker if found.chars else None"), {"match"}),
}


def solution_code(source: str) -> str:
    """An exercise cell as the student who solved it would leave it: the solution, without the markers."""
    return "\n".join(line for line in source.splitlines() if line.strip() not in (BEGIN, END))


def exercise(nb: nbformat.NotebookNode, grade_id: str) -> nbformat.NotebookNode:
    return next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)


def edited(assignment: str, bug: str | None = None, extra: tuple[str, str] | None = None) -> dict[str, str]:
    """The exercise cells' code (by grade_id) of the solved assignment, with one bug put in (or "blank": as
    handed out), and extra code appended to one cell."""
    nb = nbformat.read(ASSIGNMENTS[assignment], as_version=4)
    if bug == "blank":
        nb, bug = student_version(nb), None
    cells = {c.metadata["nbgrader"]["grade_id"]: solution_code(c.source) for c in nb.cells
             if c.cell_type == "code" and c.get("metadata", {}).get("nbgrader", {}).get("solution")}
    if bug is not None:
        grade_id, edits, _, _ = BUGS[assignment][bug]
        for old, new in edits:
            assert cells[grade_id].count(old) >= 1, (assignment, bug, old)
            cells[grade_id] = cells[grade_id].replace(old, new)
    if extra is not None:
        grade_id, code = extra
        cells[grade_id] += "\n\n" + code
    return cells


def secret_lines(nb: nbformat.NotebookNode) -> list[str]:
    """The lines of an instructor's notebook that must never reach a student: each line inside a solution or a
    hidden-test region (16 characters or more, comments aside, so that a line as common as `return out` does not
    count)."""
    found, inside = [], False
    for cell in nb.cells:
        for line in cell.source.splitlines():
            if line.strip() in (BEGIN, BEGIN_HIDDEN):
                inside = True
            elif line.strip() in (END, END_HIDDEN):
                inside = False
            elif inside and len(line.strip()) >= 16 and not line.strip().startswith("#"):
                found.append(line.strip())
    return found


def hidden_code(source: str) -> str:
    return source.split(BEGIN_HIDDEN, 1)[1].split(END_HIDDEN, 1)[0]


def fill(nb: nbformat.NotebookNode, code: dict[str, str], exercises: list[str]) -> nbformat.NotebookNode:
    """A student copy (nbgrader's release, Otter's student notebook or `teachspec course`'s) with its exercise
    cells replaced by `code` (by grade_id). nbgrader's copies keep each cell's grade_id; Otter's mark them with the
    tag otter_answer_cell, in the order of `exercises`."""
    nb = nbformat.from_dict(nb)
    otter = iter(exercises)
    for cell in nb.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if cell.cell_type != "code":
            continue
        if "otter_answer_cell" in cell.get("metadata", {}).get("tags", []):
            grade_id = next(otter)
        elif not cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            continue
        cell.source = code[grade_id]
    return nb


def exercises(assignment: str) -> list[str]:
    """The grade_ids of the assignment's exercise (code) cells, in order."""
    nb = nbformat.read(ASSIGNMENTS[assignment], as_version=4)
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.cell_type == "code" and c.get("metadata", {}).get("nbgrader", {}).get("solution")]


def answers(part: str, secret: bytes | None = None, code: str = "") -> dict[tuple, object]:
    """The cases of a part and their right answers, as a student can compute them from the installed package (and
    a secret, had it leaked): the judge run in this process on a function that records each call and answers it
    correctly. Without a secret, the visible cases."""
    from teachspec.course import grading

    right = {"a3.choose_k": grading.best_k}[part]
    table: dict[tuple, object] = {}

    def answer(*args):
        table[args] = right(*args)
        return table[args]

    grading.PARTS[part].judge(answer, grading.Draws(grading.seed_of(part, secret, code)), secret is not None)
    return table


def hard_coded_choose_k(table: dict | None = None) -> str:
    """choose_k as a table of answers (default: the visible cases'): right wherever the table looks, nowhere
    else."""
    table = answers("a3.choose_k") if table is None else table
    return f"TABLE = {table!r}\n\ndef choose_k(alpha, c, k_max=8):\n    return TABLE.get((alpha, c, k_max), 1)"


# Ways to game the grader itself, each graded by nbgrader and by Otter-Grader in the graders' round trips
# (tests/course/test_grading_round_trip.py): name -> (assignment, base, exercise cell, code, the parts it must not
# earn). The code may be a function of no arguments that returns it (computed when the round trip runs).
GRADER_GAMING = {
    "a1 residual is the grader's own reference": ("a1", "blank", "residual", (
        "from teachspec.course.grading import torch_residual as residual"), {"residual"}),
    "a3 expected_speedup is the grader's own reference": ("a3", None, "choose_k", (
        "from teachspec.course.grading import speedup as expected_speedup"), {"expected_speedup"}),
    "a4 remove is the grader's own stand-in": ("a4", None, "remove", (
        "from teachspec.course.grading import torch_remove as remove"), {"remove"}),
    "a1 patches runpy, the checks and builtins": ("a1", "blank", "residual", (
        "import builtins, runpy\n"
        "import teachspec.course.checks as _checks, teachspec.course.grading as _grading\n"
        "runpy.run_path = lambda *a, **k: {'grade': lambda *a, **k: None, 'judge': lambda *a, **k: 'ok'}\n"
        "_checks.check = _grading.judge = lambda *a, **k: print('ok')\n"
        "builtins.AssertionError = type('Quiet', (Exception,), {})\n"
        "_grading.CheckFailed = builtins.AssertionError"), {"residual", "decisions", "after_rejection", "bonus"}),
    "a1 reads the course's files from disk": ("a1", "blank", "residual", (
        "import json, pathlib\n"
        "for _folder in [pathlib.Path.cwd(), *pathlib.Path.cwd().parents]:  # the kernel: the course's folder\n"
        "    for _found in [*_folder.glob('teachspec_grading.json'), *_folder.glob('source/*/*.ipynb')]:\n"
        "        pathlib.Path('/tmp/teachspec-stolen.txt').write_text(_found.read_text())\n"
        "def residual(p, q):\n"
        "    text = open('/tmp/teachspec-stolen.txt').read()  # what the kernel found, if anything\n"
        "    return json.loads(text)['answer']"), {"residual"}),
    "a3 hard-codes the visible cases' answers": ("a3", None, "choose_k", hard_coded_choose_k, {"choose_k"}),
    "a1 residual never returns": ("a1", None, "residual", (
        "def residual(p, q):\n"
        "    while True:\n"
        "        pass"), {"residual"}),
    "a1 speculative_step raises SystemExit": ("a1", None, "speculative_step", (
        "import sys\n"
        "def speculative_step(p, q, draft, generator):\n"
        "    sys.exit(0)"), {"decisions", "after_rejection", "bonus"}),
    "a3 choose_k ends the interpreter with os._exit": ("a3", None, "choose_k", (
        "import os\n"
        "def choose_k(alpha, c, k_max=8):\n"
        "    os._exit(0)"), {"choose_k"}),
}


def grader_gaming_code(name: str) -> dict[str, str]:
    """The exercise cells' code of a GRADER_GAMING submission."""
    assignment, base, grade_id, code, _ = GRADER_GAMING[name]
    return edited(assignment, base, extra=(grade_id, code() if callable(code) else code))
