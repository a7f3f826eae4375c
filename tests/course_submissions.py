"""Submissions to grade, made from the solution notebooks: the solution itself, a blank one, each classic bug, and
the ways a student might game the checks. Shared by tests/test_assignments.py and tests/test_grading_round_trip.py.

A bug is a text edit of one exercise cell of the solution (its nbgrader grade_id), so that the same bug can be
put into any copy of the notebook: the instructor's, nbgrader's release or Otter-Grader's student version.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

from teachspec.course.student import BEGIN, BEGIN_HIDDEN, END, END_HIDDEN, student_version

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = {path.stem.split("_")[0]: path for path in sorted((ROOT / "notebooks" / "assignments").glob("a*.ipynb"))}

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
        "no residual between siblings": (
            "node_rule", [("        target = residual(target, proposal)", "        pass")], {"siblings"},
            r"p' must become the residual"),
        "rejected token left in q": (
            "node_rule", [("proposal = remove(proposal, x)", "pass")], {"without_replacement"},
            r"q' must become norm\(q' without that token\)"),
        "last token from p, not the residual": (
            "node_rule", [("return chances, target", "return chances, p")], {"final"}, r"That is p itself"),
        "verify_node draws the last token from p": (
            "verify_node", [("sample(final, generator)", "sample(p, generator)")], {"verify_node"},
            r"drawing the last token from p"),
    },
}

# One classic bug per assignment for the graders' round trips.
ROUND_TRIP_BUG = {"a1": "resample from p, not the residual", "a2": "locks ignored", "a3": "k = 0 left out",
                  "a4": "no residual between siblings"}

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
    "a4 node_rule is the checks' reference": ("a4", None, "node_rule", (
        "from teachspec.course import checks\n"
        "node_rule = checks.reference_node_rule(None)"), {"siblings", "without_replacement", "final"}),
    "a4 verify_node hands the node to verify_tree": ("a4", None, "verify_node", (
        "from teachspec import TokenTree, verify_tree\n"
        "def verify_node(p, q, children, kind, generator):\n"
        "    tree = TokenTree(parents=(-1,) + (0,) * len(children), tokens=(0, *children))\n"
        "    n = len(tree.tokens)\n"
        "    v = verify_tree(torch.stack([p] * n), torch.stack([q] * n), tree, generator, kind=kind)\n"
        "    return (v.path[0] - 1 if v.path else None), v.tokens[0]"), {"verify_node"}),
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
