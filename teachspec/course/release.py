"""Handing the assignments out and grading them: one source, the solution notebooks in teachspec/course/sources/
(`materials.sources()`), written in nbgrader's format, and laid out for the grader an instructor uses.

    teachspec grading nbgrader my-grading    # nbgrader_config.py and source/<assignment>/<assignment>.ipynb
    teachspec grading otter my-grading       # Otter-Grader master notebooks: <assignment>/<assignment>.ipynb
    teachspec grading pytest alice/a1_acceptance_rule.ipynb -o alice-a1.ipynb   # for pytest --nbval-lax

nbgrader reads the source notebooks as they are: `### BEGIN SOLUTION` regions, graded cells (metadata
nbgrader.grade, points) whose `### BEGIN HIDDEN TESTS` regions it removes from the release. The configuration
written beside them gives the notebooks time to run their models and makes feedback show each failed check's
message without the hidden tests (`teachspec.course.feedback`).

Otter-Grader has a format of its own (`otter assign`): a raw `# ASSIGNMENT CONFIG` cell, then per question raw
`# BEGIN QUESTION` / `# BEGIN SOLUTION` / `# BEGIN TESTS` cells around the prompt, the solution and its test
cells. `otter_master` translates: each exercise cell becomes a question, each graded check after it two test
cases, the visible check (public, no points) and the hidden one (its points), and each written answer a manually
graded question.

For plain pytest, `for_grading` does what nbgrader's autograder does to a submission: the student's notebook with
its graded cells put back as the instructor wrote them, hidden tests in, so that `pytest --nbval-lax` runs them.
INSTRUCTORS.md says how to release, collect and grade with each.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_raw_cell

from teachspec.course.materials import sources
from teachspec.course.student import BEGIN, BEGIN_HIDDEN, END, END_HIDDEN

NBGRADER_CONFIG = '''\
# nbgrader's configuration for the teachspec assignments, written by `teachspec grading nbgrader`.
# INSTRUCTORS.md (`teachspec course DEST --with-solutions` writes it) has the whole round trip.
c = get_config()  # noqa: F821 -- nbgrader defines it

c.CourseDirectory.course_id = "teachspec"

# Assignment 3 loads a model and times it: give a cell minutes, not nbgrader's 30 seconds.
c.Execute.timeout = 600

# Feedback shows each failed check's message, not the hidden tests: the hidden-test regions are cleared, and an
# error keeps its last line (the verdict) without the traceback, which quotes the cell's code.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbgrader.preprocessors.ClearHiddenTests",
    "teachspec.course.feedback.VerdictOnly",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
'''


def assignments() -> list[Path]:
    """The solution notebooks, a1_... to a6_..., in order: what every grader here is laid out from."""
    return sources()


def _refuse_overwrite(files: list[Path], force: bool) -> None:
    there = [f for f in files if f.exists()]
    if there and not force:
        raise ValueError(f"{there[0]} exists (and {len(there) - 1} more of the files to write); choose a new folder, "
                         f"or pass --force to overwrite them")


def nbgrader_course(dest: str | Path, force: bool = False) -> list[Path]:
    """An nbgrader course folder: nbgrader_config.py and source/<assignment>/<assignment>.ipynb."""
    dest = Path(dest)
    solutions = assignments()
    files = [dest / "nbgrader_config.py"] + [dest / "source" / s.stem / s.name for s in solutions]
    _refuse_overwrite(files, force)
    for solution, target in zip(solutions, files[1:]):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(solution.read_bytes())
    files[0].write_text(NBGRADER_CONFIG)
    return files


def otter_course(dest: str | Path, force: bool = False) -> list[Path]:
    """Otter-Grader master notebooks, <assignment>/<assignment>.ipynb, ready for `otter assign`."""
    dest = Path(dest)
    solutions = assignments()
    files = [dest / s.stem / s.name for s in solutions]
    _refuse_overwrite(files, force)
    for solution, target in zip(solutions, files):
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(otter_master(nbformat.read(solution, as_version=4), solution.stem), target)
    return files


def for_grading(submission: nbformat.NotebookNode, solution: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The student's notebook with every graded check cell (matched by grade_id) as the solution notebook has it,
    hidden tests in: the student's code and written answers, the instructor's checks."""
    checks = {_nbgrader(c)["grade_id"]: c for c in solution.cells
              if _nbgrader(c).get("grade") and c.cell_type == "code"}
    out = nbformat.from_dict(submission)
    missing = set(checks)
    for cell in out.cells:
        grade_id = _nbgrader(cell).get("grade_id")
        if grade_id in checks:
            cell.source, cell.metadata["nbgrader"] = checks[grade_id].source, checks[grade_id].metadata["nbgrader"]
            cell.outputs, cell.execution_count = [], None
            missing.discard(grade_id)
    if missing:
        raise ValueError(f"the submission has no cell for the graded checks {sorted(missing)}: it is not a copy of "
                         f"this assignment, or its nbgrader metadata was lost")
    return out


def grading_copy(submission: str | Path, out: str | Path | None = None) -> Path:
    """Write `for_grading` of the submission at `submission`, its assignment found by file name, to `out`
    (default: <name>.grading.ipynb beside it)."""
    submission = Path(submission)
    solution = next((s for s in assignments() if s.name == submission.name), None)
    if solution is None:
        raise ValueError(f"{submission.name!r} is not the name of an assignment: one of "
                         f"{[s.name for s in assignments()]}")
    out = Path(out) if out is not None else submission.with_suffix(".grading.ipynb")
    nbformat.write(for_grading(nbformat.read(submission, as_version=4), nbformat.read(solution, as_version=4)), out)
    return out


# -- nbgrader's format to Otter-Grader's -------------------------------------------------------------------------

OTTER_CONFIG = """\
# ASSIGNMENT CONFIG
name: {name}
init_cell: true        # `import otter; grader = otter.Notebook(...)` at the top of the student's copy
check_all_cell: false
export_cell: false     # students hand in the .ipynb itself; no PDF
run_tests: false       # the graders' round trip (tests/test_grading_round_trip.py) runs them
generate: true         # autograder/<name>-autograder_*.zip for `otter run` and `otter grade`
tests:
  files: true
  ok_format: false     # exception-based tests: a test passes unless it raises
"""


def _nbgrader(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _otter_markers(source: str) -> str:
    """nbgrader's `### BEGIN SOLUTION` lines as Otter's `# BEGIN SOLUTION`."""
    return "\n".join(line.replace("### BEGIN SOLUTION", "# BEGIN SOLUTION").replace("### END SOLUTION",
                                                                                      "# END SOLUTION")
                     for line in source.splitlines())


def _unmarked(source: str) -> str:
    return "\n".join(line for line in source.splitlines() if line.strip() not in (BEGIN, END))


def free_names(code: str) -> list[str]:
    """The names `code` reads but neither assigns, imports nor finds among the builtins: what a test function
    takes from the notebook."""
    tree = ast.parse(code)
    imports = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    bound = {a.asname or a.name.split(".")[0] for node in imports for a in node.names}
    bound |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    read = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    return sorted({n for n in read if n not in bound and not hasattr(builtins, n)})


def _test_cell(name: str, code: str, points: float, hidden: bool) -> nbformat.NotebookNode:
    body = "\n".join("    " + line if line.strip() else "" for line in code.strip("\n").splitlines())
    return new_code_cell(f'""" # BEGIN TEST CONFIG\npoints: {points}\nhidden: {str(hidden).lower()}\n'
                         f'""" # END TEST CONFIG\ndef {name}({", ".join(free_names(code))}):\n{body}')


def otter_master(nb: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """The solution notebook `nb` in Otter Assign's format."""
    cells, source = [new_raw_cell(OTTER_CONFIG.format(name=name))], list(nb.cells)
    i = 0
    while i < len(source):
        cell, meta = source[i], _nbgrader(source[i])
        if cell.cell_type == "code" and meta.get("solution"):
            checks = []
            while i + 1 < len(source) and _nbgrader(source[i + 1]).get("grade") and source[i + 1].cell_type == "code":
                i += 1
                checks.append(source[i])
            cells += [new_raw_cell(f"# BEGIN QUESTION\nname: {meta['grade_id']}"), new_raw_cell("# BEGIN SOLUTION"),
                      new_code_cell(_otter_markers(cell.source)), new_raw_cell("# END SOLUTION"),
                      new_raw_cell("# BEGIN TESTS")]
            for check in checks:
                grade_id, points = _nbgrader(check)["grade_id"], _nbgrader(check)["points"]
                visible, _, rest = check.source.partition(BEGIN_HIDDEN)
                hidden = rest.partition(END_HIDDEN)[0]
                cells += [_test_cell(f"test_{grade_id}", visible, 0, hidden=False),
                          _test_cell(f"test_{grade_id}_hidden", hidden, points, hidden=True)]
            cells += [new_raw_cell("# END TESTS"), new_raw_cell("# END QUESTION")]
        elif cell.cell_type == "markdown" and meta.get("grade"):  # a written answer, graded by hand
            prompt = [cells.pop()] if cells and cells[-1].cell_type == "markdown" else []
            cells += [new_raw_cell(f"# BEGIN QUESTION\nname: {meta['grade_id']}\nmanual: true\n"
                                   f"points: {meta['points']}"), *prompt, new_raw_cell("# BEGIN SOLUTION"),
                      new_markdown_cell(_unmarked(cell.source).strip()), new_raw_cell("# END SOLUTION"),
                      new_raw_cell("# END QUESTION")]
        elif meta.get("grade"):
            raise ValueError(f"cell {i} is a graded code cell that follows no exercise cell")
        else:
            copy = nbformat.from_dict(cell)
            copy.get("metadata", {}).pop("nbgrader", None)
            cells.append(copy)
        i += 1
    return new_notebook(cells=cells, metadata=nbformat.from_dict(nb.metadata))
