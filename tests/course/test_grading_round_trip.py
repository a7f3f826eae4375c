"""The graders' round trips, as an instructor runs them: the eight assignments' solutions through nbgrader and
through Otter-Grader, a blank copy and one classic bug of two assignments through nbgrader (both graders take their
verdicts from one path, teachspec.course.autograde; tests/course/test_assignments.py judges every assignment's
blank copy and bugs on that path without a grader around it), and, through both, the submissions that game the grader itself (`cs.GRADER_GAMING`: the grader's own references imported, runpy / the checks / builtins
patched, the course's files read from disk, the visible cases' answers hard-coded, a function that never returns,
SystemExit, os._exit), each a test of its own against each grader. The scores come back part by part; no copy
handed to students holds a solution or the course's secret.

nbgrader (the `test` extra) runs through its Python API, the converters its commands run; export is its command.
Otter-Grader pins packages this environment cannot take (wrapt < 2; docutils >= 0.20, where awscli wants
<= 0.19), so it lives in a virtual environment of its own, which TEACHSPEC_OTTER_PYTHON names (.ci/run builds it);
without one the Otter tests skip, unless TEACHSPEC_REQUIRE_OTTER=1 (as in CI). The notebooks run on the
config-built stand-in pair (TEACHSPEC_NOTEBOOK_PAIR=config): assignment 3 loads a model, and grading does not need
a trained one. Both graders run once per module (fixtures), started together on the two cores.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from helpers import course_submissions as cs
from teachspec.course import release
from teachspec.course.autograde import COURSE_FILE

KINDS = ("solution", "blank", "bug")
EVERY_KIND = ("a1", "a3")  # the assignments nbgrader also grades blank and buggy (a1's bug and a3's gaming: feedback)
NAMES = {a: path.stem for a, path in cs.ASSIGNMENTS.items()}
GAMING = sorted(cs.GRADER_GAMING)
OTTER = os.environ.get("TEACHSPEC_OTTER_PYTHON") or str(Path.home() / ".cache/teachspec/otter-7.0.0/bin/python")
if not Path(OTTER).is_file() and os.environ.get("TEACHSPEC_REQUIRE_OTTER") == "1":
    raise RuntimeError(f"TEACHSPEC_REQUIRE_OTTER=1 but Otter-Grader's python is not at {OTTER} "
                       f"(TEACHSPEC_OTTER_PYTHON)")
WITHIN_S = 300  # the autograde of a notebook whose function never returns ends within this


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
    """The points each graded check cell earns for a kind of submission: "solution", "blank", "bug" (the
    assignment's round-trip bug) or the name of a GRADER_GAMING submission, which earns nothing for what it fakes
    nor for what its base lacks."""
    lost: set[str] = set()
    if kind == "bug":
        lost = cs.BUGS[assignment][cs.ROUND_TRIP_BUG[assignment]][2]
    elif kind in cs.GRADER_GAMING:
        _, base, _, _, lost = cs.GRADER_GAMING[kind]
        kind = "blank" if base == "blank" else kind
        lost = lost | (cs.BUGS[assignment][base][2] if base not in (None, "blank") else set())
    return {grade_id: 0.0 if kind == "blank" or part in lost else points
            for grade_id, (part, points) in graded_parts(assignment).items()}


def plain_kinds(assignment: str, grader: str) -> tuple[str, ...]:
    """The submissions besides the gaming ones that `grader` grades for an assignment: each autograde costs tens of
    seconds (a kernel, a sandbox a part), so every kind once, and the solution of each assignment through both."""
    return KINDS if grader == "nbgrader" and assignment in EVERY_KIND else ("solution",)


def kinds(assignment: str, grader: str = "nbgrader") -> list[str]:
    """The submissions `grader` grades for an assignment: its plain kinds, then those gaming the grader."""
    return [*plain_kinds(assignment, grader), *(g for g in GAMING if cs.GRADER_GAMING[g][0] == assignment)]


def submission_code(assignment: str, kind: str) -> dict[str, str] | None:
    """The exercise cells' code for a kind of submission (None: left as handed out)."""
    if kind in cs.GRADER_GAMING:
        return cs.grader_gaming_code(kind)
    return None if kind == "blank" else cs.edited(assignment, cs.ROUND_TRIP_BUG[assignment] if kind == "bug" else None)


def student_id(assignment: str, kind: str) -> str:
    return kind if kind in KINDS else f"gaming{kinds(assignment).index(kind)}"


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
        assert "### BEGIN SOLUTION" in notebook_text(tmp_path / "instructor" / "assignments" / f"{name}.ipynb")
    assert not (tmp_path / "student" / "INSTRUCTORS.md").exists()
    assert (tmp_path / "instructor" / "INSTRUCTORS.md").is_file()


# -- nbgrader ----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def nbgrader_run(tmp_path_factory, otter_run):
    """generate_assignment, every submission of every assignment, autograde (timed), feedback for two, export, and
    a last autograde after a grader file's hash was changed. (`otter_run` is asked for only to start Otter's round
    trip first, on the other core.)"""
    pytest.importorskip("nbgrader")
    from nbgrader.api import Gradebook
    from nbgrader.apps import NbGraderAPI
    from traitlets.config.loader import PyFileConfigLoader

    course = tmp_path_factory.mktemp("nbgrader") / "course"
    release.nbgrader_course(course)
    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    config.CourseDirectory.root = str(course)
    api = NbGraderAPI(config=config)
    out = {"course": course, "released": {}, "seconds": {}, "scores": {}}
    for a, name in NAMES.items():
        assert api.generate_assignment(name)["success"]
        released = course / "release" / name / f"{name}.ipynb"
        out["released"][a] = notebook_text(released)
        handed_out = nbformat.read(released, as_version=4)
        for kind in kinds(a):
            code = submission_code(a, kind)
            nb = handed_out if code is None else cs.fill(handed_out, code, cs.exercises(a))
            target = course / "submitted" / student_id(a, kind) / name / f"{name}.ipynb"
            target.parent.mkdir(parents=True)
            nbformat.write(nb, target)
        for kind in kinds(a):
            start = time.monotonic()
            result = api.autograde(name, student_id(a, kind))
            out["seconds"][(a, kind)] = time.monotonic() - start
            assert result["success"], result.get("log", "")[-3000:]
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for a, name in NAMES.items():
            for kind in kinds(a):
                submitted = gradebook.find_submission_notebook(name, name, student_id(a, kind))
                out["scores"][(a, kind)] = {g.name: g.score for g in submitted.grades if g.name in graded_parts(a)}
    for a, kind in (("a1", "bug"), ("a3", "a3 hard-codes the visible cases' answers")):
        assert api.generate_feedback(NAMES[a], student_id(a, kind))["success"]
        out["feedback", a] = (course / "feedback" / student_id(a, kind) / NAMES[a] / f"{NAMES[a]}.html").read_text()
    exported = subprocess.run([sys.executable, "-m", "nbgrader", "export"], cwd=course, capture_output=True,
                              text=True, timeout=300)
    assert exported.returncode == 0, exported.stderr[-3000:]
    with open(course / "grades.csv") as f:
        out["csv"] = {(r["assignment"], r["student_id"]): float(r["raw_score"]) for r in csv.DictReader(f)}
    saved = json.loads((course / COURSE_FILE).read_text())
    saved["files"]["course/grading.py"] = "0" * 64  # as if grading.py had been rewritten since the lay-out
    (course / COURSE_FILE).write_text(json.dumps(saved))
    out["tampered"] = api.autograde(NAMES["a3"], "solution", force=True)
    return out


def test_nbgrader_round_trip(nbgrader_run):
    """The solution earns every part, a blank copy none, a classic bug loses its own part; the released copies
    hold no solution and no secret; feedback says what failed (hidden cases never shown); export adds it up."""
    secret = json.loads((nbgrader_run["course"] / COURSE_FILE).read_text())["secret"]
    for a in NAMES:
        assert_no_secrets(a, nbgrader_run["released"][a])
        assert secret not in nbgrader_run["released"][a]
        for kind in plain_kinds(a, "nbgrader"):
            assert nbgrader_run["scores"][(a, kind)] == expected(a, kind), (a, kind)
    assert not list((nbgrader_run["course"] / "release").rglob(COURSE_FILE)), "the secret was released"
    feedback = nbgrader_run["feedback", "a1"]
    assert "CheckFailed" in feedback and "the residual" in feedback
    hidden = nbgrader_run["feedback", "a3"]
    assert "passes the visible cases" in hidden and "not a hidden one" in hidden
    assert not re.search(r"choose_k\(alpha=", hidden), "the feedback shows a hidden case"
    for a, name in NAMES.items():
        for kind in plain_kinds(a, "nbgrader"):
            assert nbgrader_run["csv"][(name, kind)] == sum(expected(a, kind).values()), (a, kind)


@pytest.mark.parametrize("name", GAMING)
def test_nbgrader_gives_nothing_for_gaming_the_grader(nbgrader_run, name):
    a = cs.GRADER_GAMING[name][0]
    assert nbgrader_run["scores"][(a, name)] == expected(a, name)
    assert nbgrader_run["seconds"][(a, name)] < WITHIN_S, nbgrader_run["seconds"][(a, name)]


def test_nbgrader_refuses_to_grade_with_a_grader_that_changed(nbgrader_run):
    result = nbgrader_run["tampered"]
    assert not result["success"]
    assert "differs from the one that laid out" in result.get("log", "") and "grading.py" in result["log"]


# -- Otter-Grader ------------------------------------------------------------------------------------------------

OTTER_DRIVER = r'''
"""Otter Assign on each master notebook, then Otter Run (no Docker) on each submission: one process, one import."""
import contextlib, io, json, pathlib, sys, time
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
              "public tests": "\n".join(p.read_text() for p in sorted((dist / "student" / "tests").glob("*.py"))),
              "student files": "\n".join(p.read_text(errors="replace") for p in (dist / "student").rglob("*")
                                          if p.is_file())}
    autograder = next((dist / "autograder").glob("*.zip"))
    for kind, code in job["submissions"].items():
        nb = nbformat.from_dict(student)
        answers = iter(code or [])
        for cell in nb.cells:
            if code and cell.cell_type == "code" and "otter_answer_cell" in cell.metadata.get("tags", []):
                cell.source = next(answers)
        path = dist / f"{kind}.ipynb"
        nbformat.write(nb, path)
        start = time.monotonic()
        with contextlib.redirect_stdout(io.StringIO()):
            results = otter.run.main(str(path), autograder=str(autograder), output_dir=None, no_logo=True)
        out[a][kind + "_seconds"] = time.monotonic() - start
        out[a][kind] = {name: [[tc.passed, tc.test_case.points, (tc.message or "")[-600:]]
                               for tc in q.test_case_results] for name, q in results.results.items()}
        out[a][kind + " total"] = [results.total, results.possible]
print(json.dumps(out))
'''


class OtterRun:
    """Otter's round trip in its own environment, started at once and read when asked for."""

    def __init__(self, folder: Path):
        self.folder = folder
        masters = release.otter_course(folder / "masters")[:-1]  # the last file written is the course's
        spec = {}
        for (a, name), master in zip(NAMES.items(), masters):
            subs = {}
            for kind in kinds(a, "otter"):
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
        assert self.process.wait(timeout=1800) == 0, self.err.read_text()[-4000:]
        return json.loads(self.out.read_text().strip().splitlines()[-1])


@pytest.fixture(scope="module")
def otter_run(tmp_path_factory):
    run = OtterRun(tmp_path_factory.mktemp("otter")) if Path(OTTER).is_file() else None
    yield run
    if run is not None and run.process.poll() is None:
        run.process.kill()


NO_OTTER = pytest.mark.skipif(not Path(OTTER).is_file(),
                              reason="Otter-Grader's environment is not there: TEACHSPEC_OTTER_PYTHON")


def otter_points(results: dict, a: str, kind: str) -> dict[str, float]:
    """The points Otter gave each graded check cell: a question's test cases are its checks, in order."""
    got = {}
    for question, checks in checks_by_exercise(a).items():
        cases = results[a][kind][question]
        assert len(cases) == len(checks), (a, question, cases)
        got |= {grade_id: points if passed else 0.0 for grade_id, (passed, points, _) in zip(checks, cases)}
    return got


@NO_OTTER
def test_otter_round_trip(otter_run):
    """Otter Assign on the master notebooks `teachspec grading otter` writes, then Otter Run, locally without
    Docker, on each assignment's solution: the scores per part, and no solution, hidden case or secret in what a
    student gets."""
    results = otter_run.results()
    secret = json.loads((otter_run.folder / "masters" / COURSE_FILE).read_text())["secret"]
    for a in NAMES:
        assert_no_secrets(a, results[a]["student"], results[a]["public tests"])
        assert secret not in results[a]["student files"], f"{a}: the secret reached the student's files"
        for kind in plain_kinds(a, "otter"):
            want = expected(a, kind)
            assert otter_points(results, a, kind) == want, f"{a} {kind}: {results[a][kind]}"
            assert results[a][kind + " total"][0] == sum(want.values()), (a, kind, results[a][kind + " total"])


@NO_OTTER
@pytest.mark.parametrize("name", GAMING)
def test_otter_gives_nothing_for_gaming_the_grader(otter_run, name):
    results = otter_run.results()
    a = cs.GRADER_GAMING[name][0]
    assert otter_points(results, a, name) == expected(a, name), results[a][name]
    assert results[a][name + "_seconds"] < WITHIN_S


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
