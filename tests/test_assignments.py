"""The assignments: the student versions are made right, fail exactly at their check cells until the exercises
are written, every graded part is earned by the solution, each classic bug loses its own part and nothing else
with feedback that names the likely cause, and submissions that game the checks (delegating to teachspec, replacing
the check functions, the reference or the random source) earn nothing for what they fake."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import nbformat
import pytest
import torch

import course_submissions as cs
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


# -- grading: every part earned by the solution, each classic bug loses its own part --------------------------------

def _given(cell) -> bool:
    """A code cell that is neither graded nor needs a model: run when a submission is graded here."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.cell_type == "code" and not meta.get("grade") and not ("pick_pair" in cell.source or "Engine(" in
                                                                        cell.source or "pair" in cell.source.split())


def _graded(assignment: str, code: dict[str, str]) -> dict[str, str]:
    """Run a submission as the autograder does, but in this process and without the model cells: its exercise
    cells are `code` (by grade_id). Returns the failed parts and each one's message."""
    nb = nbformat.read(cs.ASSIGNMENTS[assignment], as_version=4)
    ns: dict = {"__name__": "__main__"}
    failed = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if _given(cell):
            source = code[meta["grade_id"]] if meta.get("solution") else cell.source
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(source, f"<{assignment}>", "exec"), ns)  # noqa: S102 -- the notebook's own code
        elif cell.cell_type == "code" and meta.get("grade"):
            part = re.search(rf'check\("{assignment}\.(\w+)"', cell.source).group(1)
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(compile(cell.source, f"<{assignment} {meta['grade_id']}>", "exec"), ns)  # noqa: S102
            except AssertionError as e:
                failed[part] = str(e)
    return failed


@contextlib.contextmanager
def _restored(*modules):
    """Whatever a gaming submission replaces in these modules is put back afterwards."""
    saved = [(m, dict(vars(m))) for m in modules]
    try:
        yield
    finally:
        for m, d in saved:
            for name in set(vars(m)) - set(d):
                delattr(m, name)
            for name, value in d.items():
                setattr(m, name, value)


@pytest.mark.parametrize("assignment", sorted(cs.ASSIGNMENTS))
def test_the_solution_earns_every_part(assignment):
    assert _graded(assignment, cs.edited(assignment)) == {}


@pytest.mark.parametrize("assignment", sorted(cs.ASSIGNMENTS))
def test_a_blank_submission_earns_nothing_and_is_told_to_write_its_code(assignment):
    failed = _graded(assignment, cs.edited(assignment, "blank"))
    parts = {re.search(rf'check\("{assignment}\.(\w+)"', c.source).group(1) for c in
             nbformat.read(cs.ASSIGNMENTS[assignment], as_version=4).cells if c.get("metadata", {}).get(
                 "nbgrader", {}).get("grade") and c.cell_type == "code"}
    assert set(failed) == parts
    assert all("NotImplementedError" in m for m in failed.values()), failed


BUG_CASES = [(a, bug) for a, bugs in cs.BUGS.items() for bug in bugs]


@pytest.mark.parametrize("assignment, bug", BUG_CASES, ids=[f"{a}: {b}" for a, b in BUG_CASES])
def test_each_classic_bug_loses_its_own_part_and_is_named(assignment, bug):
    """The bug fails the graded part(s) it breaks and no other; the feedback names the likely cause, in lines that
    fit nbgrader's 90 columns (with "CheckFailed: " in front of the first)."""
    _, _, lost, cause = cs.BUGS[assignment][bug]
    failed = _graded(assignment, cs.edited(assignment, bug))
    assert set(failed) == lost, {part: m[:300] for part, m in failed.items()}
    assert re.search(cause, " ".join(" ".join(failed.values()).split())), failed
    for message in failed.values():
        lines = f"CheckFailed: {message}".splitlines()
        assert max(len(line) for line in lines) <= 90, lines


@pytest.mark.parametrize("name", sorted(cs.GAMING))
def test_a_submission_that_games_the_checks_earns_nothing_for_what_it_fakes(name):
    """Delegating to teachspec's own implementation, replacing the check functions, replacing the reference the
    old hidden tests compared with, or rigging the random source and numpy: the part is lost all the same."""
    import random

    import numpy
    import teachspec.radix
    import teachspec.radix.tree
    import teachspec.theory

    assignment, base, grade_id, code, must_lose = cs.GAMING[name]
    with _restored(checks, teachspec.theory, teachspec.radix, teachspec.radix.tree, numpy, random, torch):
        failed = _graded(assignment, cs.edited(assignment, base, extra=(grade_id, code)))
    assert must_lose <= set(failed), failed
    delegated = [m for m in failed.values() if "teachspec's own answer" in " ".join(m.split())]
    if "delegates" in name or "wraps" in name or "hands" in name:
        assert delegated, failed


def test_the_grader_refuses_a_library_function_reached_only_at_run_time():
    """A name built at run time escapes the walk over what the answer names; the library refuses the call."""
    from teachspec.course import grading

    def choose_k(alpha, c, k_max=8):
        module = __import__("teachspec." + "theory", fromlist=["x"])
        return int(getattr(module, "optimal" + "_k")(alpha, c, k_max))

    assert grading.delegates_to(choose_k, grading.PARTS["a3.choose_k"]) is None
    with pytest.raises(CheckFailed, match="teachspec's own answer"):
        grading.grade("a3.choose_k", choose_k)
    from teachspec import theory
    assert theory.optimal_k(0.8, 0.05, 8) == grading.best_k(0.8, 0.05, 8)  # put back afterwards


def test_the_hidden_tests_read_the_grader_afresh():
    """A graded cell's hidden part loads grading.py from its file, not the module the notebook can reach."""
    for path in cs.ASSIGNMENTS.values():
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.get("metadata", {}).get("nbgrader", {}).get("grade") and cell.cell_type == "code":
                hidden = cs.hidden_code(cell.source)
                assert 'run_path(find_spec("teachspec.course.grading").origin)["grade"]' in hidden, hidden
                assert "teachspec.course.checks" not in hidden


def test_the_solutions_pass_the_whole_exercise_checks():
    a1, a2, a3, a4 = (_solution_namespace(p) for p in SOLUTIONS)
    checks.check_acceptance_rule(a1["speculative_step"])
    checks.check_radix(a2["Radix"])
    checks.check_choose_k(a3["choose_k"])
    checks.check_remove(a4["remove"])
    checks.check_node_rule(a4["node_rule"])
    checks.check_multi_draft_step(a4["verify_node"])


# -- wrong implementations written other ways, and what the checks say -------------------------------------------------

def test_resampling_from_p_instead_of_the_residual_fails():
    from teachspec.sampling import sample

    def wrong(p, q, draft, generator):
        for i, x in enumerate(draft.tolist()):
            u = torch.rand((), generator=generator, dtype=p.dtype)
            if not u < min(1.0, float(p[i, x] / q[i, x]) if q[i, x] > 0 else 0.0):
                return draft[:i].tolist() + [sample(p[i], generator).item()]  # the bug: p, not the residual
        return draft.tolist() + [sample(p[len(draft)], generator).item()]

    with pytest.raises(CheckFailed, match=r"(?s)After a rejection at position 0 .*That is p_0 itself"):
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

    with pytest.raises(CheckFailed, match="evict removed a node with locks > 0"):
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
    def choose_k(alpha, c, k_max):  # the speedup without its cost: longer is always better
        return max(range(k_max + 1), key=lambda k: (sum(alpha**i for i in range(k + 1)), -k))

    with pytest.raises(CheckFailed, match=r"expected k=\d+ .* got"):
        checks.check_choose_k(choose_k)


def test_a_check_before_the_exercise_says_what_to_do():
    def todo(*args):
        raise NotImplementedError()

    for check, fn in ((checks.check_acceptance_rule, todo), (checks.check_choose_k, todo)):
        with pytest.raises(CheckFailed, match="(?s)NotImplementedError.*Replace `raise NotImplementedError\\(\\)`"):
            check(fn)

    class Todo:
        def insert(self, tokens):
            raise NotImplementedError()

    with pytest.raises(CheckFailed, match="insert still raises NotImplementedError"):
        checks.check_radix(Todo)


# -- assignment 4: the multi-draft rule ------------------------------------------------------------------------------

A4 = ROOT / "notebooks" / "assignments" / "a4_multi_draft.ipynb"


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


@pytest.mark.parametrize("bug", checks.NODE_BUGS)
def test_a4_a_rule_right_on_the_worked_examples_is_still_caught_and_named(bug):
    """A rule right on the lecture's worked examples (as if copied from them) and wrong elsewhere loses its part,
    and the verdict says which classic bug its chances or final are."""
    ns = _solution_namespace(A4)
    right, wrong = ns["node_rule"], _node_rule_with(bug, ns["residual"], ns["remove"])

    def node_rule(p, q, children, kind):
        worked = q.tolist() in ([0.2, 0.3, 0.5], [0.25, 0.25, 0.5]) and len(children) == 2
        return (right if worked else wrong)(p, q, children, kind)

    hint = {"no residual between siblings": "p' must become the residual",
            "rejected token left in q": "distribution the next child really came from",
            "last token from p, not the residual": "That is p itself"}[bug]
    with pytest.raises(CheckFailed) as failed:
        checks.check_node_rule(node_rule)
    assert hint in " ".join(str(failed.value).split())


def test_a4_the_checks_reference_rule_is_the_librarys():
    """The checks' reference (and so the stand-in for a student's node_rule) agrees with teachspec's own
    verify_children: the same chance for every child tried and the same residual when all are rejected."""
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

    with pytest.raises(CheckFailed, match=r"token leaving the node \(children independent"):
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
    with pytest.raises(CheckFailed, match=r"remove\(q=\[0.5, 0.3, 0.2\], x=0\): expected \[0, 0.6, 0.4\]"):
        checks.check_remove(unnormalised)


def test_a4_checks_before_the_exercise_say_what_to_do():
    def todo(*args):
        raise NotImplementedError()

    for check in (checks.check_remove, checks.check_node_rule, checks.check_multi_draft_step):
        with pytest.raises(CheckFailed, match="(?s)NotImplementedError.*Replace `raise NotImplementedError\\(\\)`"):
            check(todo)


# -- the copies an instructor grades from --------------------------------------------------------------------------

def test_the_grading_copy_puts_the_checks_back_and_keeps_the_students_code(tmp_path):
    from teachspec.course.release import grading_copy

    student = student_version(nbformat.read(A4, as_version=4))
    submission = cs.fill(student, cs.edited("a4", "rejected token left in q"), cs.exercises("a4"))
    (tmp_path / "alice").mkdir()
    nbformat.write(submission, tmp_path / "alice" / A4.name)
    out = grading_copy(tmp_path / "alice" / A4.name)
    graded = nbformat.read(out, as_version=4)
    text = "\n".join(c.source for c in graded.cells)
    assert text.count("### BEGIN HIDDEN TESTS") == len(check_cells(nbformat.read(A4, as_version=4)))
    assert "        pass" in text and "### BEGIN SOLUTION" not in text  # her bug, not the solution


def test_the_otter_master_notebook_is_the_same_assignment_in_otters_format():
    from teachspec.course.release import otter_master

    nb = nbformat.read(A4, as_version=4)
    master = otter_master(nb, A4.stem)
    raw = [c.source.splitlines()[0] for c in master.cells if c.cell_type == "raw"]
    assert raw[0] == "# ASSIGNMENT CONFIG"
    assert raw.count("# BEGIN QUESTION") == len(exercise_cells(nb)) + 1  # the exercises and the written answer
    tests = [c.source for c in master.cells if c.cell_type == "code" and "# BEGIN TEST CONFIG" in c.source]
    assert len(tests) == 2 * len(check_cells(nb))  # a visible and a hidden test case per graded check
    assert all("hidden: true" in t for t in tests[1::2]) and all("points: 0" in t for t in tests[::2])
    assert "def test_check_multi_draft_step_hidden(verify_node):" in "\n".join(tests)
