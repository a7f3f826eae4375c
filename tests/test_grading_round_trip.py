"""The graders' round trips, as an instructor runs them: the six assignments through nbgrader and through
Otter-Grader, each with three submissions (the solution, a blank copy, one classic bug), with nbgrader a submission
that games the checks too for the assignments `cs.ROUND_TRIP_GAMING` names, and the scores that come back, part by
part. No copy handed to students holds a solution or a hidden test.

nbgrader (the `test` extra) runs through its Python API, the converters its commands run; export is its command.
Otter-Grader pins packages this environment cannot take (wrapt < 2; docutils >= 0.20, where awscli wants
<= 0.19), so it lives in a virtual environment of its own, which TEACHSPEC_OTTER_PYTHON names (.ci/run builds it);
without one the Otter test skips, unless TEACHSPEC_REQUIRE_OTTER=1 (as in CI). The notebooks run on the config-built
stand-in pair (TEACHSPEC_NOTEBOOK_PAIR=config): assignment 3 loads a model, and grading does not need a trained one.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import course_submissions as cs
from teachspec.course import release

KINDS = ("solution", "blank", "bug")
NAMES = {a: path.stem for a, path in cs.ASSIGNMENTS.items()}
OTTER = os.environ.get("TEACHSPEC_OTTER_PYTHON") or str(Path.home() / ".cache/teachspec/otter-7.0.0/bin/python")
if not Path(OTTER).is_file() and os.environ.get("TEACHSPEC_REQUIRE_OTTER") == "1":
    raise RuntimeError(f"TEACHSPEC_REQUIRE_OTTER=1 but Otter-Grader's python is not at {OTTER} "
                       f"(TEACHSPEC_OTTER_PYTHON)")


def graded_parts(assignment: str) -> dict[str, tuple[str, float]]:
    """grade_id of each graded check cell -> (the part it grades, its points)."""
    nb = nbformat.read(cs.ASSIGNMENTS[assignment], as_version=4)
    out = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade"):
            part = re.search(rf'check\("{assignment}\.(\w+)"', cell.source).group(1)
            out[meta["grade_id"]] = (part, meta["points"])
    return out


def expected(assignment: str, kind: str) -> dict[str, float]:
    """The points each graded check cell earns for a kind of submission ("gaming": the assignment's gaming
    submission in cs.ROUND_TRIP_GAMING, which earns nothing for what it fakes nor for what its base lacks)."""
    lost: set[str] = set()
    if kind == "bug":
        lost = cs.BUGS[assignment][cs.ROUND_TRIP_BUG[assignment]][2]
    elif kind == "gaming":
        _, base, _, _, lost = cs.GAMING[cs.ROUND_TRIP_GAMING[assignment]]
        kind = "blank" if base == "blank" else kind
        lost = lost | (cs.BUGS[assignment][base][2] if base not in (None, "blank") else set())
    return {grade_id: 0.0 if kind == "blank" or part in lost else points
            for grade_id, (part, points) in graded_parts(assignment).items()}


def kinds(assignment: str) -> tuple[str, ...]:
    """The submissions nbgrader grades for an assignment."""
    return KINDS + (("gaming",) if assignment in cs.ROUND_TRIP_GAMING else ())


def submission_code(assignment: str, kind: str) -> dict[str, str] | None:
    """The exercise cells' code for a kind of submission (None: left as handed out)."""
    return None if kind == "blank" else cs.edited(assignment, cs.ROUND_TRIP_BUG[assignment] if kind == "bug" else None)


def secrets(assignment: str) -> list[str]:
    """Text that must never reach a student: the markers, the hidden tests' lines, the solutions' lines."""
    return ["BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS"] + cs.secret_lines(
        nbformat.read(cs.ASSIGNMENTS[assignment], as_version=4))


def assert_no_secrets(assignment: str, *texts: str) -> None:
    text = "\n".join(texts)
    leaked = [s for s in secrets(assignment) if s in text]
    assert not leaked, f"{assignment}: a student's copy holds {leaked[:3]}"


def notebook_text(path: Path) -> str:
    return "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)


STAND_IN = {"TEACHSPEC_NOTEBOOK_PAIR": "config", "OMP_NUM_THREADS": "1"}  # one thread a process: two graders at once


@pytest.fixture
def stand_in_pair(monkeypatch):
    for name, value in STAND_IN.items():
        monkeypatch.setenv(name, value)


# -- teachspec's own copies --------------------------------------------------------------------------------------

def test_the_course_students_get_holds_no_solution_and_the_instructors_copy_does(tmp_path):
    from teachspec.course.materials import write_course

    write_course(tmp_path / "student")
    write_course(tmp_path / "instructor", solutions=True)
    for a, name in NAMES.items():
        assert_no_secrets(a, notebook_text(tmp_path / "student" / "assignments" / f"{name}.ipynb"))
        assert "### BEGIN HIDDEN TESTS" in notebook_text(tmp_path / "instructor" / "assignments" / f"{name}.ipynb")
    assert not (tmp_path / "student" / "INSTRUCTORS.md").exists()
    assert (tmp_path / "instructor" / "INSTRUCTORS.md").is_file()


# -- nbgrader ----------------------------------------------------------------------------------------------------

def test_nbgrader_round_trip(tmp_path, stand_in_pair, otter_run):
    """generate_assignment, three submissions per assignment (and, for some, one that games the checks), autograde,
    generate_feedback and export: the scores per part, and no solution or hidden test in a student's copy or in
    the feedback. (`otter_run` is asked for only to start Otter's round trip first, on the other core.)"""
    pytest.importorskip("nbgrader")
    from nbgrader.api import Gradebook
    from nbgrader.apps import NbGraderAPI
    from traitlets.config.loader import PyFileConfigLoader

    course = tmp_path / "course"
    release.nbgrader_course(course)
    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    config.CourseDirectory.root = str(course)
    api = NbGraderAPI(config=config)

    students = {kind: kind for kind in KINDS} | {"gaming": "gaming"}
    for a, name in NAMES.items():
        assert api.generate_assignment(name)["success"]
        released = course / "release" / name / f"{name}.ipynb"
        assert_no_secrets(a, notebook_text(released))
        handed_out = nbformat.read(released, as_version=4)
        for kind in kinds(a):
            code = submission_code(a, kind)
            if kind == "gaming":  # a2's implements nothing and replaces the checks: it was autograded 8/8 before
                _, base, grade_id, extra, _ = cs.GAMING[cs.ROUND_TRIP_GAMING[a]]
                code = cs.edited(a, base, extra=(grade_id, extra))
            nb = handed_out if code is None else cs.fill(handed_out, code, cs.exercises(a))
            target = course / "submitted" / students[kind] / name / f"{name}.ipynb"
            target.parent.mkdir(parents=True)
            nbformat.write(nb, target)
        for kind in kinds(a):
            result = api.autograde(name, students[kind])
            assert result["success"], result.get("log", "")[-3000:]

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for a, name in NAMES.items():
            for kind in kinds(a):
                submitted = gradebook.find_submission_notebook(name, name, students[kind])
                got = {g.name: g.score for g in submitted.grades if g.name in graded_parts(a)}
                want = expected(a, kind)
                assert got == want, f"{a} {kind}: {got} != {want}"

    assert api.generate_feedback(NAMES["a1"], "bug")["success"]
    feedback = (course / "feedback" / "bug" / NAMES["a1"] / f"{NAMES['a1']}.html").read_text()
    assert "CheckFailed" in feedback and "the residual" in feedback
    assert "run_path" not in feedback and "HIDDEN TESTS" not in feedback, "the feedback shows the hidden tests"

    exported = subprocess.run([sys.executable, "-m", "nbgrader", "export"], cwd=course, capture_output=True,
                              text=True, timeout=300)
    assert exported.returncode == 0, exported.stderr[-3000:]
    with open(course / "grades.csv") as f:
        rows = {(r["assignment"], r["student_id"]): float(r["raw_score"]) for r in csv.DictReader(f)}
    for a, name in NAMES.items():
        for kind in KINDS:
            assert rows[(name, kind)] == sum(expected(a, kind).values()), (a, kind, rows[(name, kind)])


# -- Otter-Grader ------------------------------------------------------------------------------------------------

OTTER_DRIVER = r'''
"""Otter Assign on each master notebook, then Otter Run (no Docker) on each submission: one process, one import."""
import contextlib, io, json, pathlib, sys
import nbformat
import otter.assign, otter.run

spec = json.load(sys.stdin)
out = {}
for a, job in spec.items():
    with contextlib.redirect_stdout(io.StringIO()):
        otter.assign.main(job["master"], job["dist"], no_run_tests=True, no_pdfs=True)
    dist = pathlib.Path(job["dist"])
    student = nbformat.read(dist / "student" / job["notebook"], as_version=4)
    out[a] = {"student": "\n".join(c.source for c in student.cells),
              "public tests": "\n".join(p.read_text() for p in sorted((dist / "student" / "tests").glob("*.py")))}
    autograder = next((dist / "autograder").glob("*.zip"))
    for kind, code in job["submissions"].items():
        nb = nbformat.from_dict(student)
        answers = iter(code or [])
        for cell in nb.cells:
            if code and cell.cell_type == "code" and "otter_answer_cell" in cell.metadata.get("tags", []):
                cell.source = next(answers)
        path = dist / f"{kind}.ipynb"
        nbformat.write(nb, path)
        with contextlib.redirect_stdout(io.StringIO()):
            results = otter.run.main(str(path), autograder=str(autograder), output_dir=None, no_logo=True)
        out[a][kind] = {name: [[tc.passed, tc.test_case.points, tc.message[-600:]] for tc in q.test_case_results]
                        for name, q in results.results.items()}
        out[a][kind + " total"] = [results.total, results.possible]
print(json.dumps(out))
'''


class OtterRun:
    """Otter's round trip in its own environment, started at once and read when asked for."""

    def __init__(self, folder: Path):
        masters = release.otter_course(folder / "masters")
        spec = {}
        for (a, name), master in zip(NAMES.items(), masters):
            subs = {}
            for kind in KINDS:
                code = submission_code(a, kind)
                subs[kind] = None if code is None else [code[g] for g in cs.exercises(a)]
            spec[a] = {"master": str(master), "dist": str(folder / "dist" / a), "notebook": f"{name}.ipynb",
                       "submissions": subs}
        (folder / "spec.json").write_text(json.dumps(spec))
        self.out, self.err = folder / "out.txt", folder / "err.txt"  # files, not pipes: nothing waits on a full pipe
        with open(folder / "spec.json") as stdin, open(self.out, "w") as stdout, open(self.err, "w") as stderr:
            self.process = subprocess.Popen([OTTER, "-c", OTTER_DRIVER], stdin=stdin, stdout=stdout, stderr=stderr,
                                            text=True, env={**os.environ, **STAND_IN})

    def results(self) -> dict:
        assert self.process.wait(timeout=900) == 0, self.err.read_text()[-4000:]
        return json.loads(self.out.read_text().strip().splitlines()[-1])


@pytest.fixture(scope="module")
def otter_run(tmp_path_factory):
    run = OtterRun(tmp_path_factory.mktemp("otter")) if Path(OTTER).is_file() else None
    yield run
    if run is not None and run.process.poll() is None:
        run.process.kill()


@pytest.mark.skipif(not Path(OTTER).is_file(), reason="Otter-Grader's environment is not there: TEACHSPEC_OTTER_PYTHON")
def test_otter_round_trip(otter_run):
    """Otter Assign on the master notebooks `teachspec grading otter` writes, then Otter Run, locally without
    Docker, on three submissions per assignment: the scores per part, and no solution or hidden test in the
    student's notebook or its public tests."""
    results = otter_run.results()
    for a in NAMES:
        assert_no_secrets(a, results[a]["student"], results[a]["public tests"])
        for kind in KINDS:
            want, got = expected(a, kind), {}
            for question, checks in checks_by_exercise(a).items():  # a question's test cases: visible, hidden, ...
                cases = results[a][kind][question]
                assert len(cases) == 2 * len(checks), (a, question, cases)
                hidden = cases[1::2]
                got |= {grade_id: points if passed else 0.0 for grade_id, (passed, points, _) in zip(checks, hidden)}
            assert got == want, f"{a} {kind}: {got} != {want}\n{results[a][kind]}"
            assert results[a][kind + " total"][0] == sum(want.values()), (a, kind, results[a][kind + " total"])


def checks_by_exercise(assignment: str) -> dict[str, list[str]]:
    """Each exercise cell's grade_id -> the graded check cells after it, in order: an Otter question's tests."""
    out, current = {}, None
    for cell in nbformat.read(cs.ASSIGNMENTS[assignment], as_version=4).cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("solution"):
            current = out.setdefault(meta["grade_id"], [])
        elif cell.cell_type == "code" and meta.get("grade"):
            current.append(meta["grade_id"])
    return out
