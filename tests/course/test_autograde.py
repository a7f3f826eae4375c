"""The course's file and the layouts that carry it: the secret and the grader's hashes, readable by their owner
only and kept when the course is laid out again; a grader that changed, a file that is missing or not a course
file, refused with a message that names it; the layouts never written into the sources, nor the course's file into
what nbgrader releases. Then the pytest route end to end, as an instructor runs it (`pytest DEST` on two
submissions of assignment 3), and the `teachspec student` / `teachspec grading` commands that write files."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from helpers import course_submissions as cs
from teachspec.cli import main
from teachspec.course import autograde, release
from teachspec.course.autograde import COURSE_FILE, GRADER_FILES, GraderChanged
from teachspec.course.student import student_version

# the commands run in fresh interpreters, on the teachspec under test
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(autograde.PACKAGE.parent)}


def files_under(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*"))


def test_the_course_file_holds_a_secret_and_the_graders_hashes_for_its_owner_only(tmp_path):
    path = autograde.lay_out(tmp_path / "course")
    assert path == tmp_path / "course" / COURSE_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    saved = json.loads(path.read_text())
    assert re.fullmatch(r"[0-9a-f]{64}", saved["secret"])
    assert saved["files"] == {f: hashlib.sha256((autograde.PACKAGE / f).read_bytes()).hexdigest()
                              for f in GRADER_FILES}
    autograde.lay_out(tmp_path / "course")  # laid out again: the same secret, so that it grades as before
    assert json.loads(path.read_text())["secret"] == saved["secret"]
    assert json.loads(autograde.lay_out(tmp_path / "other").read_text())["secret"] != saved["secret"]


def test_a_course_is_read_only_from_a_file_teachspec_wrote_for_this_grader(tmp_path):
    path = autograde.lay_out(tmp_path)
    secret = json.loads(path.read_text())["secret"]
    found = autograde.course(path)
    assert found.secret == bytes.fromhex(secret) and found.folder == tmp_path.resolve()
    (tmp_path / "submitted" / "alice").mkdir(parents=True)
    assert autograde.find(tmp_path / "submitted" / "alice") == path

    saved = json.loads(path.read_text())
    saved["files"]["course/sandbox.py"] = "0" * 64  # as if the sandbox had been rewritten since
    path.write_text(json.dumps(saved))
    with pytest.raises(GraderChanged, match=r"course/sandbox\.py"):
        autograde.course(path)

    with pytest.raises(FileNotFoundError, match="teachspec grading"):
        autograde.course(tmp_path / "nowhere" / COURSE_FILE)
    path.write_text("{not json")
    with pytest.raises(ValueError, match=re.escape(str(path))):
        autograde.course(path)


def test_the_layouts_write_the_course_file_beside_what_they_release_and_never_into_the_sources(tmp_path):
    written = release.nbgrader_course(tmp_path / "nbgrader")
    course_file = tmp_path / "nbgrader" / COURSE_FILE
    assert (tmp_path / "nbgrader" / "nbgrader_config.py").is_file() and course_file in written
    for source in cs.ASSIGNMENTS.values():
        assert (tmp_path / "nbgrader" / "source" / source.stem / source.name).read_bytes() == source.read_bytes()
    # generate_assignment releases what is under source/: the secret is not among it
    assert not any(p.name == COURSE_FILE for p in (tmp_path / "nbgrader" / "source").rglob("*"))

    assert release.pytest_course(tmp_path / "pytest") == [tmp_path / "pytest" / "conftest.py",
                                                           tmp_path / "pytest" / COURSE_FILE]
    assert "teachspec.course.pytest_grading" in (tmp_path / "pytest" / "conftest.py").read_text()

    before = files_under(cs.SOURCES)
    for lay_out in (release.nbgrader_course, release.pytest_course):
        with pytest.raises(ValueError, match="solution notebooks"):
            lay_out(cs.SOURCES / "grading")
    assert files_under(cs.SOURCES) == before


def submission(source: Path, bug: str | None) -> nbformat.NotebookNode:
    """The student copy of `source` with its exercises written: solved, or with one of the classic bugs."""
    assignment = source.stem.split("_")[0]
    nb = student_version(nbformat.read(source, as_version=4))
    return cs.fill(nb, cs.edited(assignment, bug), cs.exercises(assignment))


def test_pytest_grades_each_part_of_each_submission_and_sums_the_points(tmp_path):
    source, bug = cs.ASSIGNMENTS["a3"], "k = 0 left out"
    dest = tmp_path / "grading"
    release.pytest_course(dest)
    for student, written in (("solved", None), ("buggy", bug)):
        (dest / "submitted" / student).mkdir(parents=True)
        nbformat.write(submission(source, written), dest / "submitted" / student / source.name)

    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(dest)], cwd=dest,
                         capture_output=True, text=True, timeout=600, env=ENV)
    out = ran.stdout
    nb = nbformat.read(source, as_version=4)
    parts = autograde.graded_parts(nb)  # grade_id -> part, of each graded check cell
    points = {c.metadata.nbgrader.grade_id: c.metadata.nbgrader.points for c in nb.cells
              if c.metadata.get("nbgrader", {}).get("grade_id") in parts}
    _, _, lost, cause = cs.BUGS["a3"][bug]
    lost_ids = [g for g, part in parts.items() if part.split(".")[1] in lost]
    assert lost_ids == ["check_choose_k"]
    assert ran.returncode == 1, out[-3000:] + ran.stderr[-2000:]  # some items failed
    assert f"1 failed, {2 * len(parts) - 1} passed" in out, out[-3000:]
    assert f"FAILED submitted/buggy/{source.name}::check_choose_k" in out and re.search(cause, out), out[-3000:]
    total = sum(points.values())
    assert f"submitted/solved/{source.name}: {total:g} of {total:g}" in out, out[-1500:]
    assert f"submitted/buggy/{source.name}: {total - points['check_choose_k']:g} of {total:g}" in out, out[-1500:]


def student(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "teachspec.cli", "student", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env=ENV)


def test_the_student_command_never_writes_over_the_solution_the_sources_or_a_file_without_force(tmp_path):
    solution = tmp_path / cs.ASSIGNMENTS["a3"].name
    solution.write_bytes(cs.ASSIGNMENTS["a3"].read_bytes())
    original = solution.read_bytes()

    refused = student(solution, "-o", solution, cwd=tmp_path)
    assert refused.returncode == 2 and "solution notebook itself" in refused.stderr, refused.stderr
    assert solution.read_bytes() == original

    before = files_under(cs.SOURCES)
    refused = student(solution, "-o", cs.SOURCES / "a3_student.ipynb", cwd=tmp_path)
    assert refused.returncode == 2 and "solution notebooks" in refused.stderr, refused.stderr
    assert files_under(cs.SOURCES) == before

    other = tmp_path / "mine.ipynb"
    other.write_text("my notes")
    refused = student(solution, "-o", other, cwd=tmp_path)
    assert refused.returncode == 2 and "--force" in refused.stderr and other.read_text() == "my notes"
    done = student(solution, "-o", other, "--force", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = other.read_text()
    assert "NotImplementedError" in text and "BEGIN SOLUTION" not in text
    assert solution.read_bytes() == original


def test_grading_pytest_writes_the_course_file_and_says_what_to_run(tmp_path, capsys):
    dest = tmp_path / "my-grading"
    main(["grading", "pytest", str(dest)])
    said = capsys.readouterr().out
    assert f"pytest {dest}" in said and COURSE_FILE in said
    assert (dest / "conftest.py").is_file() and autograde.course(dest / COURSE_FILE).folder == dest.resolve()
