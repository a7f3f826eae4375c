"""Make the student version of an assignment notebook, the way nbgrader's generate_assignment does.

A solution notebook is written once, in teachspec/course/sources/. In its code cells

    ### BEGIN SOLUTION / ### END SOLUTION          the lines between are replaced by
                                                   `# YOUR CODE HERE` and `raise NotImplementedError()`
    ### BEGIN HIDDEN TESTS / ### END HIDDEN TESTS  the lines between (and the markers) are removed

and in markdown cells a `### BEGIN SOLUTION` region becomes "YOUR ANSWER HERE". Outputs and execution counts are
cleared. The markers are nbgrader's own, so the same notebook also works with `nbgrader generate_assignment`.

    teachspec student teachspec/course/sources/a1_acceptance_rule.ipynb [-o OUT.ipynb] [--force]

writes OUT (default: student/<name>.ipynb in the current folder). It never writes over its input or into the
sources folder, and over another file only with --force. The student versions in notebooks/assignments/
are this function's output for every source, committed so that the course a student browses holds no solution;
`refresh()` remakes them, and tests/course/test_assignments.py checks that they are what the sources give today.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"


def _strip(source: str, begin: str, end: str, replacement: list[str] | None, where: str) -> str:
    out, inside, indent = [], False, ""
    for n, line in enumerate(source.splitlines(), 1):
        stripped = line.strip()
        if stripped == begin:
            if inside:
                raise ValueError(f"{where}, line {n}: {begin!r} inside another {begin!r} region")
            inside, indent = True, line[: len(line) - len(line.lstrip())]
            out += [indent + r for r in replacement or []]
        elif stripped == end:
            if not inside:
                raise ValueError(f"{where}, line {n}: {end!r} with no {begin!r} before it")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{where}: {begin!r} is never closed by {end!r}")
    return "\n".join(out)


def student_version(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of solution notebook `nb` with solutions replaced and hidden tests removed."""
    nb = nbformat.from_dict(nb)
    for i, cell in enumerate(nb.cells):
        where = f"cell {i}"
        if cell.cell_type == "code":
            cell.source = _strip(cell.source, BEGIN, END, ["# YOUR CODE HERE", "raise NotImplementedError()"], where)
            cell.source = _strip(cell.source, BEGIN_HIDDEN, END_HIDDEN, None, where)
            cell.outputs, cell.execution_count = [], None
        elif cell.cell_type == "markdown":
            cell.source = _strip(cell.source, BEGIN, END, ["YOUR ANSWER HERE"], where)
        for marker in (BEGIN, END, BEGIN_HIDDEN, END_HIDDEN):
            if marker in cell.source:
                raise ValueError(f"{where}: {marker!r} is not on a line of its own")
    nb.metadata.pop("widgets", None)
    return nb


def exercise_cells(nb: nbformat.NotebookNode) -> list[int]:
    """Indices of the cells that hold a solution region (what the student writes)."""
    return [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and re.search(rf"^\s*{BEGIN}\s*$", c.source,
                                                                                        re.MULTILINE)]


def check_cells(nb: nbformat.NotebookNode) -> list[int]:
    """Indices of the graded check cells: code cells with nbgrader metadata grade: true (a graded markdown cell is
    a written answer, marked by hand)."""
    return [i for i, c in enumerate(nb.cells)
            if c.cell_type == "code" and c.get("metadata", {}).get("nbgrader", {}).get("grade")]


def student_text(solution: Path) -> str:
    """The student version of the notebook at `solution`, as the text of its file."""
    text = nbformat.writes(student_version(nbformat.read(solution, as_version=4)))
    return text if text.endswith("\n") else text + "\n"


SOURCES = Path(__file__).resolve().parent / "sources"


def outside_sources(path: Path) -> Path:
    """`path`, unless it is inside the folder of the solution notebooks, which nothing here writes into."""
    real = Path(path).resolve()
    if real == SOURCES or SOURCES in real.parents:
        raise ValueError(f"{path} is inside {SOURCES}, the solution notebooks: write somewhere else")
    return Path(path)


def write(solution: Path, out: Path | None = None, force: bool = False) -> Path:
    """Write the student version of the notebook at `solution` to `out` (default: student/<name>.ipynb in the
    current folder). Refused, before anything is written: `out` being the solution itself or inside the sources
    folder, and an existing `out` without `force`."""
    solution = Path(solution)
    out = Path(out) if out is not None else Path("student") / solution.name
    if out.resolve() == solution.resolve():
        raise ValueError(f"{out} is the solution notebook itself: writing the student version there would erase "
                         f"the solution; give another -o")
    outside_sources(out)
    if out.exists() and not force:
        raise ValueError(f"{out} exists: choose another -o, or pass --force to overwrite it")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(student_text(solution), encoding="utf-8")
    return out


def refresh(folder: Path | None = None) -> list[Path]:
    """Remake the committed student versions: every source's, into `folder` (default: the checkout's
    notebooks/assignments/). Returns the files written."""
    from teachspec.course.materials import CHECKOUT, sources

    folder = CHECKOUT / "assignments" if folder is None else Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for solution in sources():
        (folder / solution.name).write_text(student_text(solution), encoding="utf-8")
        written.append(folder / solution.name)
    return written


def main(argv: list[str] | None = None) -> None:
    """`python -m teachspec.course.student ...` is `teachspec student ...`: the same parser (`teachspec.arguments`)."""
    from teachspec.arguments import run_course

    run_course("student", command, argv)


def command(args) -> None:
    """`teachspec student`, its arguments parsed (`teachspec.arguments.student_arguments`)."""
    print(f"wrote {write(args.solution, args.out, args.force)}")


if __name__ == "__main__":
    main()
