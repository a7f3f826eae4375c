"""teachspec's grading as plain pytest: each graded part of a submitted notebook is a test, judged from its file.

    teachspec grading pytest my-grading          # conftest.py and the course's file (teachspec.course.autograde)
    cp alice/a1_acceptance_rule.ipynb my-grading/submitted/alice/
    pytest my-grading                            # one test per graded check cell, then the points per notebook

A notebook named like an assignment (a1_acceptance_rule.ipynb, ...) anywhere under the folder is a submission;
its graded check cells are the instructor's (the assignment's own, matched by grade_id: a submission cannot
change which parts it is graded on or their points). No kernel runs: the parts are judged in the sandbox from the
notebook's definitions, on the visible and the hidden cases, exactly as nbgrader and Otter grade them.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from teachspec.course.autograde import course, find, judge_parts
from teachspec.course.materials import sources


def assignment(path: Path) -> Path | None:
    return next((s for s in sources() if s.name == path.name), None)


def pytest_collect_file(parent, file_path: Path):
    if file_path.suffix == ".ipynb" and assignment(file_path) is not None:
        return Submission.from_parent(parent, path=file_path)
    return None


class Submission(pytest.File):
    def collect(self):
        source = nbformat.read(assignment(self.path), as_version=4)
        for cell in source.cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if cell.cell_type == "code" and meta.get("grade"):
                yield GradedPart.from_parent(self, name=meta["grade_id"], cell=cell, points=float(meta["points"]))


class GradedPart(pytest.Item):
    def __init__(self, *, cell, points: float, **kwargs):
        super().__init__(**kwargs)
        from teachspec.course.autograde import PART

        self.part, self.points = PART.search(cell.source).group(1), points
        self.user_properties.append(("points", points))

    def runtest(self) -> None:
        nb = nbformat.read(self.path, as_version=4)
        verdict = judge_parts(nb, {self.name: self.part}, course(find(self.path.parent)))[self.name]
        if not verdict.passed:
            raise PartFailed(verdict.message)

    def repr_failure(self, excinfo, style=None):
        return str(excinfo.value) if isinstance(excinfo.value, PartFailed) else super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.nodeid} ({self.part}, {self.points:g} points)"


class PartFailed(AssertionError):
    """A part's verdict: what failed and its likely cause."""


def pytest_terminal_summary(terminalreporter) -> None:
    earned: dict[str, list[float]] = {}
    for report in terminalreporter.getreports("passed") + terminalreporter.getreports("failed"):
        points = dict(report.user_properties).get("points")
        if points is None or report.when != "call":
            continue
        got = earned.setdefault(report.nodeid.split("::")[0], [0.0, 0.0])
        got[0] += points if report.passed else 0.0
        got[1] += points
    if earned:
        terminalreporter.section("teachspec points")
        for notebook, (score, possible) in sorted(earned.items()):
            terminalreporter.write_line(f"{notebook}: {score:g} of {possible:g}")
