"""Grading a submission the one way, for nbgrader, Otter-Grader and pytest alike: from its file, before it runs.

    verdicts(nb, course)   grade_id -> Grade, for every graded check cell of a submitted notebook

Each graded check cell names its part (`check("a1.decisions", speculative_step)`); the part is judged by
`grading.judge` on the notebook's definitions (`teachspec.course.definitions`), run in a sandbox, on the visible
cases and then on hidden ones drawn from the course's secret. That happens before the notebook's own cells run
at all, so nothing they do (patching runpy, the checks, builtins or torch in the kernel; reading the course's
files; writing beside them) can reach a verdict. The graders then run the notebook as they always do, for the
written answers and the outputs, with GRADED_OUTSIDE set so that its check cells do not judge again, and the
verdicts here replace what those cells printed:

    nbgrader   JudgeFirst before the notebook runs (ExecuteToTheEnd: nbgrader's Execute, surviving a kernel the
               notebook kills), VerdictsOfRecord before SaveAutoGrades (NBGRADER_CONFIG in teachspec.course.release
               puts them there)
    Otter      teachspec.course.otter_plugin.Judge, an Otter plugin: before_execution judges, after_grading sets
               each test's result
    pytest     teachspec.course.pytest_grading: a graded part is a test item; no kernel runs at all

The course's file (COURSE_FILE, written by `teachspec grading ...` beside the gradebook, readable by its owner
only) holds the secret and a hash of every file of teachspec whose code decides a verdict. Grading refuses to
start when one of those files differs from what was laid out: what a submission's cells could have rewritten on
disk while an earlier one was graded. INSTRUCTORS.md says what else to contain, and how.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

import nbformat

from teachspec.course.checks import GRADED_OUTSIDE
from teachspec.course.definitions import definitions
from teachspec.course.grading import CheckFailed, judge

COURSE_FILE = "teachspec_grading.json"
PACKAGE = Path(__file__).resolve().parents[1]
# the files whose code decides a verdict: the judges, the sandbox, what it offers, and this
GRADER_FILES = ("course/grading.py", "course/sandbox.py", "course/sandbox_child.py", "course/definitions.py",
                "course/autograde.py", "course/checks.py", "course/otter_plugin.py", "course/pytest_grading.py",
                "sampling.py", "speculative/verify.py",
                # assignment 8 judges a route in the simulator: its router, its replicas' caches
                "routing/approx_tree.py", "routing/policies.py", "routing/simulate.py", "radix/tree.py")
PART = re.compile(r'^\s*check\(\s*"(a\d+\.\w+)"', re.MULTILINE)


class GraderChanged(RuntimeError):
    """A file of the grader is not what it was when the course was laid out."""


@dataclass(frozen=True)
class Grade:
    part: str
    passed: bool
    message: str     # the `ok` line, or what failed and its likely cause (never a hidden case)


# -- the course's file -------------------------------------------------------------------------------------------

def hashes() -> dict[str, str]:
    return {f: hashlib.sha256((PACKAGE / f).read_bytes()).hexdigest() for f in GRADER_FILES}


def lay_out(folder: str | Path) -> Path:
    """Write the course's file into `folder`: a new secret (or the one already there, so that a course laid out
    again grades as before) and the grader's hashes. Readable by its owner only."""
    path = Path(folder) / COURSE_FILE
    secret = json.loads(path.read_text())["secret"] if path.is_file() else secrets.token_hex(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"secret": secret, "files": hashes()}, f, indent=1)
    return path


@dataclass(frozen=True)
class Course:
    secret: bytes
    folder: Path     # the course's folder: graded code may not read it


def course(path: str | Path) -> Course:
    """The course at `path` (its file), once the grader's files are checked against its hashes."""
    path = Path(path)
    try:
        saved = json.loads(path.read_text())
        secret, files = bytes.fromhex(saved["secret"]), saved["files"]
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is not there: lay the course out with `teachspec grading ...` first, "
                                f"which writes it") from None
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path} is not a course file teachspec wrote ({e})") from None
    changed = sorted(f for f, h in hashes().items() if files.get(f) != h)
    if changed:
        raise GraderChanged(f"teachspec's grader differs from the one that laid out {path.parent}: "
                            f"{', '.join(str(PACKAGE / f) for f in changed)}. Something rewrote it, or teachspec was "
                            f"upgraded: reinstall the version the course was laid out with, or lay the course out "
                            f"again (`teachspec grading ... --force` keeps its secret).")
    return Course(secret, path.parent.resolve())


def find(start: str | Path) -> Path:
    """The course file in `start` or the first folder above it that has one."""
    for folder in [Path(start).resolve(), *Path(start).resolve().parents]:
        if (folder / COURSE_FILE).is_file():
            return folder / COURSE_FILE
    raise FileNotFoundError(f"no {COURSE_FILE} in {start} or above it: lay the course out with `teachspec grading "
                            f"...` and grade from inside its folder")


# -- judging a notebook ------------------------------------------------------------------------------------------

def graded_parts(nb: nbformat.NotebookNode) -> dict[str, str]:
    """grade_id -> part, for each graded check cell (the instructor's source names its part)."""
    out = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        found = PART.search(cell.source) if cell.cell_type == "code" else None
        if meta.get("grade") and found:
            out[meta["grade_id"]] = found.group(1)
    return out


def judge_parts(nb: nbformat.NotebookNode, parts: dict[str, str], where: Course) -> dict[str, Grade]:
    """Judge each named part on the definitions of `nb`, hidden cases from the course's secret."""
    code, out = definitions(nb), {}
    for name, part in parts.items():
        try:
            out[name] = Grade(part, True, judge(part, code, where.secret, denied=(str(where.folder),)))
        except CheckFailed as e:
            out[name] = Grade(part, False, str(e))
    return out


def verdicts(nb: nbformat.NotebookNode, where: Course) -> dict[str, Grade]:
    return judge_parts(nb, graded_parts(nb), where)


# -- nbgrader ----------------------------------------------------------------------------------------------------

try:
    from nbclient.exceptions import DeadKernelError
    from nbconvert.preprocessors import Preprocessor
    from nbgrader.preprocessors import Execute
    from traitlets import Bool, Unicode
except ImportError:  # nbgrader's pipeline is not installed: the other graders do not need it
    Preprocessor = None

if Preprocessor is not None:
    class JudgeFirst(Preprocessor):
        """Before nbgrader's Execute: judge every graded part from the notebook as submitted, and have the run
        that follows leave its checks to these verdicts."""

        enabled = Bool(True)  # nbconvert runs a preprocessor registered by name only when it is enabled
        course_file = Unicode(help="the course's file, teachspec_grading.json beside nbgrader_config.py").tag(
            config=True)

        def preprocess(self, nb, resources):
            resources["teachspec_verdicts"] = verdicts(nb, course(self.course_file))
            os.environ[GRADED_OUTSIDE] = "1"
            return nb, resources

    class ExecuteToTheEnd(Execute):
        """nbgrader's Execute, except that a notebook whose cell kills its kernel (os._exit) is still graded: the
        cells after it keep no output, and the graded parts keep the verdicts judged before the notebook ran."""

        def preprocess(self, nb, resources, *args, **kwargs):
            try:
                return super().preprocess(nb, resources, *args, **kwargs)
            except DeadKernelError:
                self.log.warning("the notebook's kernel died while it ran (os._exit in a cell?); its graded parts "
                                 "keep the verdicts judged from its file")
                return nb, resources

    class VerdictsOfRecord(Preprocessor):
        """Before SaveAutoGrades: each graded check cell's outputs become its verdict, so that nbgrader's own
        rule (an error output scores 0, anything else full points) scores it, and feedback shows it."""

        enabled = Bool(True)

        def preprocess(self, nb, resources):
            os.environ.pop(GRADED_OUTSIDE, None)
            found = resources.get("teachspec_verdicts")
            if found is None:
                raise RuntimeError("teachspec.course.autograde.JudgeFirst did not run before this: put it before "
                                   "nbgrader's Execute in c.Autograde.autograde_preprocessors")
            for cell in nb.cells:
                verdict = found.get(cell.get("metadata", {}).get("nbgrader", {}).get("grade_id"))
                if verdict is not None and cell.cell_type == "code":
                    cell.outputs = [output(verdict)]
            return nb, resources


def output(verdict: Grade) -> nbformat.NotebookNode:
    if verdict.passed:
        return nbformat.v4.new_output("stream", name="stdout", text=verdict.message + "\n")
    return nbformat.v4.new_output("error", ename="CheckFailed", evalue=verdict.message,
                                  traceback=[f"CheckFailed: {verdict.message}"])
