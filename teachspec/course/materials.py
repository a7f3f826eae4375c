"""The course as files: the lecture notebooks, the assignments and the traces they replay, written where a student
works, or where an instructor prepares the grading.

Two folders hold them:

    notebooks/                   the course as a student browses it: lectures, traces, and in assignments/ the
                                 assignments as students get them (no solution)
    teachspec/course/sources/    the assignments as the instructor writes them, solutions in

`notebooks/assignments/` is made from the sources by `teachspec.course.student` and committed; a test checks that
it is exactly what the sources give today (`student.refresh()` remakes it). An installed wheel carries both: the
course inside the package as `teachspec/course/notebooks/` (see pyproject.toml), and the sources where they are,
so a course installed with pip is whole, for students and for instructors:

    pip install "teachspec[notebooks]"       # teachspec with JupyterLab and a kernel
    teachspec course my-course               # the notebooks, assignments/ and traces/ into my-course/
    cd my-course && jupyter lab index.ipynb

`teachspec course DEST --with-solutions` writes the sources in assignments/ instead, with INSTRUCTORS.md beside
them: for an instructor, never for students. The graders (`teachspec.course.release`) read the sources too.

Nothing is ever written into the installed package: a student's runs and notes stay in their own folder.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

PACKAGED = Path(__file__).parent / "notebooks"        # inside an installed wheel
CHECKOUT = Path(__file__).parents[2] / "notebooks"    # the repository's own folder (editable install)
SOURCES = Path(__file__).parent / "sources"           # the instructor's assignments, in a wheel and a checkout alike
PATTERNS = ("*.ipynb", "nbval.cfg", "appendix/*.ipynb", "assignments/*.ipynb", "traces/*.jsonl",
            "INSTRUCTORS.md")  # as package-data
INSTRUCTORS_ONLY = ("INSTRUCTORS.md",)  # written only with the solutions


def course_dir() -> Path:
    """The folder holding the course: the wheel's copy if there is one, else the checkout's."""
    for folder in (PACKAGED, CHECKOUT):
        if (folder / "index.ipynb").is_file():
            return folder
    raise FileNotFoundError(f"the course's notebooks are missing: looked for index.ipynb in {PACKAGED} (an "
                            f"installed wheel) and {CHECKOUT} (a source checkout)")


def sources() -> list[Path]:
    """The instructor's assignments, a1_... to a8_..., in order: solutions in."""
    found = sorted(SOURCES.glob("a*.ipynb"))
    if not found:
        raise FileNotFoundError(f"the assignments' sources are missing: no a*.ipynb in {SOURCES}")
    return found


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

    The assignments are the student versions unless `solutions`, which writes the instructor's sources in their
    place (solutions in) and adds INSTRUCTORS.md. A file of the course already in `dest` is
    overwritten only with `force`, so a student's edited notebooks are never lost by running this twice."""
    dest, source = Path(dest), course_dir()
    if dest.exists() and not dest.is_dir():
        raise ValueError(f"dest={str(dest)!r} is a file; give a folder to write the course into")
    keys = {s.name: s for s in sources()}
    files = course_files(source, solutions)
    missing = sorted(set(keys) - {f.name for f in files if is_assignment(f)})
    if missing:
        raise FileNotFoundError(f"{source / 'assignments'} lacks the student versions of {missing}: remake them "
                                f"with teachspec.course.student.refresh()")
    _inside(dest, files)
    there = [f for f in files if (dest / f).exists()]
    if there and not force:
        raise ValueError(f"dest={str(dest)!r} already holds {len(there)} of the course's files (e.g. {there[0]}); "
                         f"choose a new folder, or pass --force to overwrite them")
    written = []
    for f in files:
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        origin = keys[f.name] if solutions and is_assignment(f) and f.name in keys else source / f
        written.append(Path(shutil.copyfile(origin, dest / f)))
    return written


def _inside(dest: Path, files: list[Path]) -> None:
    """Refuse, before anything is written, a file that would land outside `dest`: a symlink in `dest` (the file
    itself, or a folder on its way) that points out of it would make copying write through it, onto whatever it
    names. A symlink that stays inside `dest` is harmless and allowed."""
    root = dest.resolve()
    for f in files:
        for path in [dest / f, *(dest / p for p in f.parents if p != Path("."))]:
            target = path.resolve()
            if target != root and root not in target.parents:
                raise ValueError(f"{path} points to {target}, outside dest={str(dest)!r}: writing the course there "
                                 f"would write outside its folder; remove the link or choose a new folder")


def opening(dest: str | Path) -> str:
    """How to open the course in `dest`, said for this environment (JupyterLab installed or not)."""
    steps = [f"cd {shlex.quote(str(dest))}", "jupyter lab index.ipynb"]
    lines = ["open it with:", "    " + " && ".join(steps)]
    if shutil.which("jupyter-lab") is None:
        lines.insert(0, 'JupyterLab is not installed here: pip install "teachspec[notebooks]" first')
    return "\n".join(lines)
