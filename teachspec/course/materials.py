"""The course as files: the lecture notebooks, the assignments and the traces they replay, written where a student
works, or where an instructor prepares the grading.

They live at the top of the repository in `notebooks/`. An installed wheel carries a copy inside the package, in
`teachspec/course/notebooks/` (see pyproject.toml), so a course installed with pip is whole:

    pip install "teachspec[notebooks]"       # teachspec with JupyterLab and a kernel
    teachspec course my-course               # the notebooks, assignments/ and traces/ into my-course/
    cd my-course && jupyter lab index.ipynb

The assignments are written as students get them: the solutions replaced by `raise NotImplementedError()` and the
hidden tests removed (`teachspec.course.student`). `teachspec course DEST --with-solutions` writes them as they are
kept here, solutions and hidden tests in, with INSTRUCTORS.md beside them: for an instructor, never for students.

Nothing is ever written into the installed package: a student's runs and notes stay in their own folder.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

PACKAGED = Path(__file__).parent / "notebooks"        # inside an installed wheel
CHECKOUT = Path(__file__).parents[2] / "notebooks"    # the repository's own folder (editable install)
PATTERNS = ("*.ipynb", "nbval.cfg", "assignments/*.ipynb", "traces/*.jsonl", "INSTRUCTORS.md")  # as package-data
INSTRUCTORS_ONLY = ("INSTRUCTORS.md",)  # written only with the solutions


def course_dir() -> Path:
    """The folder holding the course: the wheel's copy if there is one, else the checkout's."""
    for folder in (PACKAGED, CHECKOUT):
        if (folder / "index.ipynb").is_file():
            return folder
    raise FileNotFoundError(f"the course's notebooks are missing: looked for index.ipynb in {PACKAGED} (an "
                            f"installed wheel) and {CHECKOUT} (a source checkout)")


def course_files(source: Path | None = None, solutions: bool = True) -> list[Path]:
    """The course's files, relative to `source` (default: `course_dir()`), sorted; without `solutions`, the ones
    students get."""
    source = course_dir() if source is None else source
    files = {p.relative_to(source) for pattern in PATTERNS for p in source.glob(pattern) if p.is_file()}
    return sorted(f for f in files if solutions or str(f) not in INSTRUCTORS_ONLY)


def is_assignment(path: Path) -> bool:
    return path.parent.name == "assignments" and path.suffix == ".ipynb"


def write_course(dest: str | Path, force: bool = False, solutions: bool = False) -> list[Path]:
    """Write the course into `dest` (created if need be); returns the files written.

    The assignments are the student versions unless `solutions`, which copies them as they are (solutions and
    hidden tests in) and adds INSTRUCTORS.md. A file of the course already in `dest` is overwritten only with
    `force`, so a student's edited notebooks are never lost by running this twice."""
    import nbformat

    from teachspec.course.student import student_version

    dest, source = Path(dest), course_dir()
    if dest.exists() and not dest.is_dir():
        raise ValueError(f"dest={str(dest)!r} is a file; give a folder to write the course into")
    files = course_files(source, solutions)
    there = [f for f in files if (dest / f).exists()]
    if there and not force:
        raise ValueError(f"dest={str(dest)!r} already holds {len(there)} of the course's files (e.g. {there[0]}); "
                         f"choose a new folder, or pass --force to overwrite them")
    written = []
    for f in files:
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        if is_assignment(f) and not solutions:
            nbformat.write(student_version(nbformat.read(source / f, as_version=4)), dest / f)
            written.append(dest / f)
        else:
            written.append(Path(shutil.copyfile(source / f, dest / f)))
    return written


def opening(dest: str | Path) -> str:
    """How to open the course in `dest`, said for this environment (JupyterLab installed or not)."""
    steps = [f"cd {shlex.quote(str(dest))}", "jupyter lab index.ipynb"]
    lines = ["open it with:", "    " + " && ".join(steps)]
    if shutil.which("jupyter-lab") is None:
        lines.insert(0, 'JupyterLab is not installed here: pip install "teachspec[notebooks]" first')
    return "\n".join(lines)
