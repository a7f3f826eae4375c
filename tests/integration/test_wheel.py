"""The course from a wheel, as a student installs it: build the wheel, install it into a fresh virtual environment,
write the course outside the repository with `teachspec course`, and run a lecture from there under nbval.

The environment is made with --system-site-packages, so torch and the rest come from the test's own environment
(no download), while teachspec itself is the wheel's copy, installed into the new environment. That flag alone
shares the BASE interpreter's packages, which are not the test's own when the tests run inside a venv (README's
two set-up commands pasted into one shell), so `make_venv` also points the new environment at ours.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parent
LECTURE = "06_scheduling_for_cache_hits.ipynb"  # one of the quicker lectures; it pins outputs for nbval to compare


def run(*cmd, cwd, timeout=600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env={**env, "HF_HUB_OFFLINE": "1"}, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd}:\n{done.stdout[-4000:]}\n{done.stderr[-3000:]}"
    return done


def make_venv(dest: Path) -> Path:
    """A fresh venv at `dest` that sees this interpreter's packages, after its own; returns its python.

    `--system-site-packages` shares the packages of the interpreter the venv is based on, and a venv made from a
    venv's python is based on the original interpreter, not on the venv: torch, nbformat and pytest installed in an
    active venv would be missing. So a .pth file in the new venv adds our own site-packages too (as .ci/run's
    `see_ours` does); `site.addsitedir` rather than a bare path, so that the .pth files there are read as well.
    """
    run(sys.executable, "-m", "venv", "--system-site-packages", dest, cwd=dest.parent)
    python = dest / "bin" / "python"
    ours = "".join(f"import site; site.addsitedir({path!r})\n" for path in site.getsitepackages())
    (purelib(python) / "teachspec-tests-shared.pth").write_text(ours)
    return python


def purelib(python: Path) -> Path:
    """The folder where `python` installs pure-Python packages: its own site-packages."""
    said = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=python.parent)
    return Path(said.stdout.strip())


def install_wheel(wheel: Path, dest: Path) -> Path:
    """A venv at `dest` (see `make_venv`) with `wheel` installed in it; returns its folder.

    Asserts that its python imports teachspec from the wheel's copy, not from the checkout an editable install of
    ours would point at.
    """
    python = make_venv(dest)
    run(python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", wheel, cwd=dest.parent)
    where = run(python, "-c", "import teachspec; print(teachspec.__file__)", cwd=dest.parent).stdout.strip()
    assert Path(where).is_relative_to(dest), f"teachspec was imported from {where}, not from the wheel"
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built once for the tests here (the build is most of a minute)."""
    dist = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", dist, ROOT, cwd=dist)
    return next(dist.glob("teachspec-*.whl"))


@pytest.mark.wheel
def test_a_course_installed_from_the_wheel_runs_outside_the_repository(tmp_path, wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    for part in ("index.ipynb", LECTURE, "nbval.cfg", "assignments/a1_acceptance_rule.ipynb",
                 "traces/speculation.jsonl", "INSTRUCTORS.md"):
        assert f"teachspec/course/notebooks/{part}" in names, part
    sources = sorted(p.name for p in (ROOT / "teachspec" / "course" / "sources").glob("a*.ipynb"))
    for name in sources:  # the instructor's, apart from the course a student gets
        assert f"teachspec/course/sources/{name}" in names, name

    venv = install_wheel(wheel, tmp_path / "venv")
    python, teachspec = venv / "bin" / "python", venv / "bin" / "teachspec"
    where = run(python, "-c", "import teachspec; print(teachspec.__file__)", cwd=tmp_path).stdout.strip()
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


@pytest.mark.wheel
def test_the_wheel_test_passes_when_the_tests_run_inside_a_venv(tmp_path, wheel):
    """README's two set-up commands in one shell: the tests' python is then the first command's venv.

    `outer` stands for that venv: made the way `make_venv` makes any, so its python has the test packages, plus
    one module of its own, as README's .venv has torch and nbformat of its own that the system python may lack.
    From outer's python, as the wheel test would run there, a second venv gets the wheel; it must import that
    module (the base interpreter, which --system-site-packages alone would share, has not got it), and
    `teachspec course` must run from it, which is where a missing nbformat used to end the wheel test.
    """
    outer = make_venv(tmp_path / "outer")
    (purelib(outer) / "only_in_the_outer_venv.py").write_text("")
    inner = tmp_path / "inner"
    script = ("import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); import test_wheel as t; "
              "venv = t.install_wheel(Path(sys.argv[2]), Path(sys.argv[3])); "
              "t.run(venv / 'bin' / 'python', '-c', 'import only_in_the_outer_venv', cwd=venv.parent); "
              "t.run(venv / 'bin' / 'teachspec', 'course', 'my-course', cwd=venv.parent)")
    run(outer, "-c", script, TESTS, wheel, inner, cwd=tmp_path)
    assert (tmp_path / "my-course" / LECTURE).is_file()


def files(folder: Path) -> set[Path]:
    """The files under `folder`, Python's byte-code caches left out."""
    return {p.relative_to(folder) for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
