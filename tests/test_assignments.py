"""The assignments: the student versions are made right, fail exactly at their check cells until the exercises
are written, and the checks catch plausible wrong implementations with a message that says what went wrong."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
import torch

from teachspec.course import checks
from teachspec.course.checks import CheckFailed
from teachspec.course.student import BEGIN, BEGIN_HIDDEN, check_cells, exercise_cells, main, student_version

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "notebooks" / "assignments").glob("a*.ipynb"))


def _solution_namespace(path: Path) -> dict:
    """Run a solution notebook's code cells up to its first check, with no model (cells that need one skipped)."""
    ns: dict = {}
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code" or "pick_pair" in cell.source or "pair" in cell.source.split():
            continue
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            continue
        if "Engine(" in cell.source:
            continue
        exec(compile(cell.source, str(path), "exec"), ns)  # noqa: S102 -- the notebook's own code
    return ns


# -- the student version -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_student_version_replaces_solutions_and_drops_hidden_tests(path):
    nb = nbformat.read(path, as_version=4)
    assert exercise_cells(nb) and check_cells(nb), "an assignment needs exercise cells and graded check cells"
    assert any(BEGIN_HIDDEN in nb.cells[i].source for i in check_cells(nb)), "no hidden tests"
    student = student_version(nb)
    text = "\n".join(c.source for c in student.cells)
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS"):
        assert marker not in text
    for i in exercise_cells(nb):
        assert "raise NotImplementedError()" in student.cells[i].source
        assert student.cells[i].source.count("# YOUR CODE HERE") == nb.cells[i].source.count(BEGIN)
    for i in check_cells(nb):  # the visible checks stay, with their grading metadata
        assert student.cells[i].metadata["nbgrader"]["grade"] is True
        assert student.cells[i].source.strip()
    nbformat.validate(student)


def test_the_command_writes_the_student_notebook(tmp_path, capsys):
    out = tmp_path / "a1.ipynb"
    main([str(SOLUTIONS[0]), "-o", str(out)])
    assert "wrote" in capsys.readouterr().out
    assert "NotImplementedError" in out.read_text()


def test_unbalanced_markers_are_refused():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 1")])
    with pytest.raises(ValueError, match="never closed"):
        student_version(nb)


@pytest.mark.skipif(not (os.environ.get("TEACHSPEC_NOTEBOOK_PAIR") or (ROOT / "teachspec/models/tiny/draft").is_dir()),
                    reason="the bundled pair is not on disk; set TEACHSPEC_NOTEBOOK_PAIR=config")
@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_student_notebook_fails_exactly_at_its_checks(path, tmp_path):
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    student = student_version(nb)
    NotebookClient(student, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    failed = [i for i, c in enumerate(student.cells) if c.cell_type == "code"
              and any(o.get("output_type") == "error" for o in c.outputs)]
    assert failed == check_cells(nb)
    for i in failed:
        error = next(o for o in student.cells[i].outputs if o.output_type == "error")
        assert error.ename == "CheckFailed" and "NotImplementedError" in error.evalue, error.evalue


# -- the solutions pass, wrong implementations do not ----------------------------------------------------------------

def test_solutions_pass_their_checks():
    a1, a2, a3 = (_solution_namespace(p) for p in SOLUTIONS[:3])
    checks.check_acceptance_rule(a1["speculative_step"])
    checks.check_radix(a2["Radix"])
    checks.check_choose_k(a3["choose_k"])


def test_resampling_from_p_instead_of_the_residual_fails():
    from teachspec.sampling import sample

    def wrong(p, q, draft, generator):
        for i, x in enumerate(draft.tolist()):
            u = torch.rand((), generator=generator, dtype=p.dtype)
            if not u < min(1.0, float(p[i, x] / q[i, x]) if q[i, x] > 0 else 0.0):
                return draft[:i].tolist() + [sample(p[i], generator).item()]  # the bug: p, not the residual
        return draft.tolist() + [sample(p[len(draft)], generator).item()]

    with pytest.raises(CheckFailed, match=r"first emitted token .* expected .* got"):
        checks.check_acceptance_rule(wrong)


def test_a_bonus_from_the_wrong_row_fails():
    ns = _solution_namespace(SOLUTIONS[0])

    def wrong(p, q, draft, generator):
        return ns["speculative_step"](torch.cat([p[:-1], p[-2:-1]]), q, draft, generator)  # bonus from p_(k-1)

    with pytest.raises(CheckFailed, match="bonus"):
        checks.check_acceptance_rule(wrong)


def test_evicting_a_locked_node_fails():
    Radix = _solution_namespace(SOLUTIONS[1])["Radix"]

    class IgnoresLocks(Radix):
        def nodes(self):  # evict sees every node as unlocked
            out = super().nodes()
            for node in out:
                node.saved, node.locks = node.locks, 0
            return out

    with pytest.raises(CheckFailed, match="locked node must never be evicted"):
        checks.check_radix(IgnoresLocks)


def test_evicting_most_recently_used_fails():
    Radix = _solution_namespace(SOLUTIONS[1])["Radix"]

    class MostRecent(Radix):
        def evict(self, n):
            leaves = [x for x in self.nodes() if x is not self.root and not x.children and x.locks == 0]
            leaves.sort(key=lambda x: -x.last_access)
            freed = 0
            for x in leaves:
                if freed >= n:
                    break
                del x.parent.children[x.key[0]]
                self.size -= len(x.key)
                freed += len(x.key)
            return freed

    with pytest.raises(CheckFailed, match="least recently used"):
        checks.check_radix(MostRecent)


def test_ignoring_the_draft_cost_fails():
    from teachspec import theory

    with pytest.raises(CheckFailed, match=r"expected k=\d+ .* got"):
        checks.check_choose_k(lambda alpha, c, k_max: int(theory.optimal_k(alpha, 0.0, k_max)))


def test_a_check_before_the_exercise_says_what_to_do():
    def todo(*args):
        raise NotImplementedError()

    for check, fn in ((checks.check_acceptance_rule, todo), (checks.check_choose_k, todo)):
        with pytest.raises(CheckFailed, match="NotImplementedError.*Replace `raise NotImplementedError\\(\\)`"):
            check(fn)

    class Todo:
        def insert(self, tokens):
            raise NotImplementedError()

    with pytest.raises(CheckFailed, match="insert still raises NotImplementedError"):
        checks.check_radix(Todo)


# -- assignment 4: the multi-draft rule ------------------------------------------------------------------------------

A4 = ROOT / "notebooks" / "assignments" / "a4_multi_draft.ipynb"


def _graded_code(path: Path) -> list[tuple[str, int, str]]:
    """(grade_id, points, source) of every graded code cell, hidden tests included: what the autograder runs."""
    nb = nbformat.read(path, as_version=4)
    return [(c.metadata["nbgrader"]["grade_id"], c.metadata["nbgrader"]["points"], c.source)
            for i, c in enumerate(nb.cells) if i in check_cells(nb)]


def _hidden(source: str) -> str:
    return source.split(BEGIN_HIDDEN, 1)[1].split("### END HIDDEN TESTS", 1)[0]


def _node_rule_with(bug: str | None, residual, remove):
    """A student's node_rule as it is commonly written, with one of the classic multi-draft bugs in it."""
    def node_rule(p, q, children, kind):
        target, proposal, chances = p, q, []
        for x in children:
            chances.append(min(1.0, float(target[x] / proposal[x])) if proposal[x] > 0 else 0.0)
            if bug != "no residual between siblings":
                target = residual(target, proposal)
            if kind == "without_replacement" and bug != "rejected token left in q":
                proposal = remove(proposal, x)
        return chances, p if bug == "last token from p, not the residual" else target

    return node_rule


def test_a4_solution_gets_full_marks():
    """Every graded code cell of the solution, hidden tests included, passes: all its points."""
    ns = _solution_namespace(A4)
    graded = _graded_code(A4)
    assert [g for g, _, _ in graded] == ["check_remove", "check_node_rule", "check_multi_draft_step"]
    earned = 0
    for _, points, source in graded:
        exec(compile(source, str(A4), "exec"), ns)  # noqa: S102 -- raises on a failed check
        earned += points
    assert earned == 10


@pytest.mark.parametrize("bug, message", [
    ("no residual between siblings", "Update p' after every rejection"),
    ("rejected token left in q", r"token 2 removed, q' = \[0.4, 0.6, 0\]"),
    ("last token from p, not the residual", "the token comes from the last residual"),
])
def test_a4_each_classic_bug_loses_the_points_of_the_rule(bug, message):
    """The graded cell fails, and so do its hidden tests on their own, with a message that says what is wrong."""
    ns = _solution_namespace(A4)
    ns["node_rule"] = _node_rule_with(bug, ns["residual"], ns["remove"])
    (_, _, source), = [g for g in _graded_code(A4) if g[0] == "check_node_rule"]
    with pytest.raises(CheckFailed, match=message):
        exec(compile(source, str(A4), "exec"), ns)  # noqa: S102
    with pytest.raises(CheckFailed):
        exec(compile(_hidden(source), str(A4), "exec"), ns)  # noqa: S102


@pytest.mark.parametrize("bug", checks.NODE_BUGS)
def test_a4_the_exact_law_names_a_bug_that_the_worked_examples_miss(bug):
    """A rule right on the check's worked examples (as if copied from them) and wrong elsewhere is caught by the
    exact enumeration, which says which classic bug its law is."""
    ns = _solution_namespace(A4)
    right, wrong = ns["node_rule"], _node_rule_with(bug, ns["residual"], ns["remove"])

    def node_rule(p, q, children, kind):
        worked = q.tolist() == [0.2, 0.3, 0.5] and len(children) == 2
        return (right if worked else wrong)(p, q, children, kind)

    hint = {"no residual between siblings": "not replaced by the residual",
            "rejected token left in q": "judged by q as if drawn independently",
            "last token from p, not the residual": "comes from the original p"}[bug]
    with pytest.raises(CheckFailed, match=rf"follow p exactly, but token \d+ .* {hint}"):
        checks.check_node_rule(node_rule)


def test_a4_the_checks_reference_rule_is_the_librarys():
    """The checks' reference (and so the diagnoses) agrees with teachspec's own verify_children: the same chance
    for every child tried and the same residual when all are rejected."""
    from teachspec.speculative.tree import TokenTree, verify_children

    g = torch.Generator().manual_seed(0)
    never = [1 - 2.0**-53] * 3  # uniforms that reject every child whose chance is below 1
    for _ in range(200):
        vocab = int(torch.randint(3, 6, (), generator=g))
        p = torch.rand(vocab, generator=g, dtype=torch.float64) ** 3
        q = torch.rand(vocab, generator=g, dtype=torch.float64) ** 3
        p[torch.rand(vocab, generator=g) < 0.3] = 0.0
        p, q = (p + (p.sum() == 0)) / (p + (p.sum() == 0)).sum(), q / q.sum()
        for kind in checks.KINDS:
            children = torch.multinomial(q, 3, replacement=kind == "independent", generator=g).tolist()
            tree = TokenTree((-1, 0, 0, 0), (0, *children))
            child, records, final = verify_children(p, q, tree, 0, never, kind)
            chances, mine = checks.reference_node_rule()(p, q, children, kind)
            assert chances[:len(records)] == pytest.approx([min(1.0, r.ratio) for r in records], abs=1e-12)
            if child is None:
                assert torch.allclose(mine, final, atol=1e-12)


def test_a4_sampling_the_last_token_from_p_fails():
    from teachspec.sampling import sample

    ns = _solution_namespace(A4)

    def wrong(p, q, children, kind, generator):
        chances, _ = ns["node_rule"](p, q, children, kind)
        for j, chance in enumerate(chances):
            if torch.rand((), generator=generator, dtype=torch.float64) < chance:
                return j, children[j]
        return None, sample(p, generator).item()  # the bug: p, not the last residual

    with pytest.raises(CheckFailed, match="the token leaving the node, children independent"):
        checks.check_multi_draft_step(wrong)


def test_a4_remove_in_place_or_without_renormalising_fails():
    def in_place(q, x):
        q[x] = 0.0
        return q / q.sum()

    def unnormalised(q, x):
        kept = q.clone()
        kept[x] = 0.0
        return kept

    with pytest.raises(CheckFailed, match="changed q in place"):
        checks.check_remove(in_place)
    with pytest.raises(CheckFailed, match=r"remove\(q=\[0.5, 0.3, 0.2\], x=0\): expected \[0.0, 0.6, 0.4\]"):
        checks.check_remove(unnormalised)


def test_a4_checks_before_the_exercise_say_what_to_do():
    def todo(*args):
        raise NotImplementedError()

    for check in (checks.check_remove, checks.check_node_rule, checks.check_multi_draft_step):
        with pytest.raises(CheckFailed, match="NotImplementedError.*Replace `raise NotImplementedError\\(\\)`"):
            check(todo)
