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
