"""The course from a wheel, as a student installs it: build the wheel, install it into a fresh virtual environment,
write the course outside the repository with `teachspec course`, and run a lecture from there under nbval.

The environment is made with --system-site-packages, so torch and the rest come from the test's own environment
(no download), while teachspec itself is the wheel's copy, installed into the new environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LECTURE = "06_scheduling_for_cache_hits.ipynb"  # one of the quicker lectures; it pins outputs for nbval to compare


def run(*cmd, cwd, timeout=600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env={**env, "HF_HUB_OFFLINE": "1"}, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd}:\n{done.stdout[-4000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.wheel
def test_a_course_installed_from_the_wheel_runs_outside_the_repository(tmp_path):
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp_path / "dist",
        ROOT, cwd=tmp_path)
    wheel = next((tmp_path / "dist").glob("teachspec-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    for part in ("index.ipynb", LECTURE, "nbval.cfg", "assignments/a1_acceptance_rule.ipynb",
                 "traces/speculation.jsonl", "INSTRUCTORS.md"):
        assert f"teachspec/course/notebooks/{part}" in names, part
    sources = sorted(p.name for p in (ROOT / "teachspec" / "course" / "sources").glob("a*.ipynb"))
    for name in sources:  # the instructor's, apart from the course a student gets
        assert f"teachspec/course/sources/{name}" in names, name

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--system-site-packages", venv, cwd=tmp_path)
    python, teachspec = venv / "bin" / "python", venv / "bin" / "teachspec"
    run(python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", wheel, cwd=tmp_path)
    where = run(python, "-c", "import teachspec; print(teachspec.__file__)", cwd=tmp_path).stdout.strip()
    assert Path(where).is_relative_to(venv), f"teachspec was imported from {where}, not from the wheel"

    package = Path(where).parent
    installed = files(package)
    work = tmp_path / "student"
    work.mkdir()
    said = run(teachspec, "course", "my-course", cwd=work).stdout
    dest = work / "my-course"
    assert "jupyter lab index.ipynb" in said and (dest / LECTURE).is_file()
    for name in sources:  # the students' copies
        assert "BEGIN SOLUTION" not in (dest / "assignments" / name).read_text(), name
    assert len(list((dest / "traces").glob("*.jsonl"))) >= 4
    run(teachspec, "course", "my-key", "--with-solutions", cwd=work)  # the instructor's, from the wheel's sources
    for name in sources:
        assert "### BEGIN SOLUTION" in (work / "my-key" / "assignments" / name).read_text(), name
    assert (work / "my-key" / "INSTRUCTORS.md").is_file() and not (dest / "INSTRUCTORS.md").exists()
    run(teachspec, "grading", "nbgrader", "my-grading", cwd=work)
    assert sorted(p.name for p in (work / "my-grading" / "source").glob("*/*.ipynb")) == sources
    run(teachspec, "student", package / "course" / "sources" / sources[0], cwd=work)  # beside us, not in the package
    assert (work / "student" / sources[0]).is_file()

    ran = run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax", "--nbval-current-env",
              "--nbval-kernel-startup-timeout", "300", "--nbval-sanitize-with", "nbval.cfg", LECTURE, cwd=dest)
    assert " passed" in ran.stdout and "failed" not in ran.stdout, ran.stdout[-2000:]
    assert files(package) == installed, "the course wrote into the installed package"


def files(folder: Path) -> set[Path]:
    """The files under `folder`, Python's byte-code caches left out."""
    return {p.relative_to(folder) for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
