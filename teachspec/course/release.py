"""Handing the assignments out and grading them: one source, the solution notebooks in teachspec/course/sources/
(`materials.sources()`), written in nbgrader's format, and laid out for the grader an instructor uses.

    teachspec grading nbgrader my-grading    # nbgrader_config.py and source/<assignment>/<assignment>.ipynb
    teachspec grading otter my-grading       # Otter-Grader master notebooks: <assignment>/<assignment>.ipynb
    teachspec grading pytest my-grading      # conftest.py: `pytest my-grading` grades the notebooks put under it

Each layout also writes the course's file (`autograde.COURSE_FILE`: the secret the hidden cases are drawn from,
and the grader's hashes), readable by its owner only, and never into what is released to students. Every grader
then grades the same way (`teachspec.course.autograde`): each part judged from the submission's file in a
sandbox before the notebook runs.

nbgrader reads the source notebooks as they are: `### BEGIN SOLUTION` regions and graded cells (metadata
nbgrader.grade, points), each a visible `check(...)` that names its part. The configuration written beside them
puts teachspec's judge around nbgrader's Execute, gives the notebooks time to run their models, and makes
feedback show each failed check's message without a traceback (`teachspec.course.feedback`).

Otter-Grader has a format of its own (`otter assign`): a raw `# ASSIGNMENT CONFIG` cell, then per question raw
`# BEGIN QUESTION` / `# BEGIN SOLUTION` / `# BEGIN TESTS` cells around the prompt, the solution and its test
cells. `otter_master` translates: each exercise cell becomes a question, each graded check after it a test case
with its points (decided by teachspec's plugin, `teachspec.course.otter_plugin`), and each written answer a
manually graded question. INSTRUCTORS.md says how to release, collect and grade with each.
"""

from __future__ import annotations

import ast
import builtins
import json
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_raw_cell

from teachspec.course.autograde import PART, hashes, lay_out
from teachspec.course.materials import sources
from teachspec.course.student import BEGIN, END, outside_sources

NBGRADER_CONFIG = '''\
# nbgrader's configuration for the teachspec assignments, written by `teachspec grading nbgrader`.
# INSTRUCTORS.md (`teachspec course DEST --with-solutions` writes it) has the whole round trip.
c = get_config()  # noqa: F821 -- nbgrader defines it

c.CourseDirectory.course_id = "teachspec"

import os

# The graded parts are judged from the submission's file, in teachspec's sandbox, before the notebook runs (and
# each within its own time limit); the notebook's run then leaves its checks to those verdicts.
c.JudgeFirst.course_file = os.path.join(os.path.dirname(__file__), "teachspec_grading.json")
c.Autograde.autograde_preprocessors = [
    "teachspec.course.autograde.JudgeFirst",
    "teachspec.course.autograde.ExecuteToTheEnd",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "teachspec.course.autograde.VerdictsOfRecord",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# Assignments 3 and 7 load a model and run it: give a cell minutes, not nbgrader's 30 seconds.
c.Execute.timeout = 300

# Feedback shows each failed check's message: an error keeps its last line (the verdict) without the traceback.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "teachspec.course.feedback.VerdictOnly",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
'''


def assignments() -> list[Path]:
    """The solution notebooks, a1_... to a8_..., in order: what every grader here is laid out from."""
    return sources()


def _refuse_overwrite(files: list[Path], force: bool) -> None:
    for f in files:
        outside_sources(f)
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
    return files + [lay_out(dest)]


def otter_course(dest: str | Path, force: bool = False) -> list[Path]:
    """Otter-Grader master notebooks, <assignment>/<assignment>.ipynb, ready for `otter assign`."""
    dest = Path(dest)
    solutions = assignments()
    files = [dest / s.stem / s.name for s in solutions]
    _refuse_overwrite(files, force)
    course_file = lay_out(dest)
    secret = json.loads(course_file.read_text())["secret"]
    for solution, target in zip(solutions, files):
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(otter_master(nbformat.read(solution, as_version=4), solution.stem, secret), target)
    return files + [course_file]


PYTEST_CONFTEST = '''"""Grading with pytest, written by `teachspec grading pytest`: put the submitted notebooks
anywhere under this folder (submitted/<student>/<assignment>.ipynb, say) and run `pytest` on it.
teachspec_grading.json beside this file holds the course's secret: keep it, and this folder, away from students."""
from teachspec.course.pytest_grading import pytest_collect_file, pytest_terminal_summary  # noqa: F401
'''


def pytest_course(dest: str | Path, force: bool = False) -> list[Path]:
    """A folder that pytest grades: conftest.py, and the course's file."""
    dest = Path(dest)
    files = [dest / "conftest.py"]
    _refuse_overwrite(files, force)
    dest.mkdir(parents=True, exist_ok=True)
    files[0].write_text(PYTEST_CONFTEST)
    return files + [lay_out(dest)]


# -- nbgrader's format to Otter-Grader's -------------------------------------------------------------------------

OTTER_CONFIG = """\
# ASSIGNMENT CONFIG
name: {name}
plugins:               # teachspec judges the graded tests from the submission's file (teachspec.course.otter_plugin)
  - teachspec.course.otter_plugin.Judge: {plugin}
init_cell: true        # `import otter; grader = otter.Notebook(...)` at the top of the student's copy
check_all_cell: false
export_cell: false     # students hand in the .ipynb itself; no PDF
run_tests: false       # the graders' round trip (tests/course/test_grading_round_trip.py) runs them
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


def _test_cell(name: str, code: str, points: float, hidden: bool = False) -> nbformat.NotebookNode:
    body = "\n".join("    " + line if line.strip() else "" for line in code.strip("\n").splitlines())
    return new_code_cell(f'""" # BEGIN TEST CONFIG\npoints: {points}\nhidden: {str(hidden).lower()}\n'
                         f'""" # END TEST CONFIG\ndef {name}({", ".join(free_names(code))}):\n{body}')


def otter_master(nb: nbformat.NotebookNode, name: str, secret: str) -> nbformat.NotebookNode:
    """The solution notebook `nb` in Otter Assign's format, its graded tests decided by teachspec's plugin with the
    course's `secret`."""
    tests = {}  # Otter names a question's test cases "<question> - 1", "- 2", ...: each one's part
    cells, source = [], list(nb.cells)
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
            for n, check in enumerate(checks, 1):
                grade_id, points = _nbgrader(check)["grade_id"], _nbgrader(check)["points"]
                cells.append(_test_cell(f"test_{grade_id}", check.source, points))
                tests[f"{meta['grade_id']} - {n}"] = PART.search(check.source).group(1)
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
    plugin = json.dumps({"secret": secret, "files": hashes(), "tests": tests})
    cells.insert(0, new_raw_cell(OTTER_CONFIG.format(name=name, plugin=plugin)))
    return new_notebook(cells=cells, metadata=nbformat.from_dict(nb.metadata))
