"""teachspec's grading in Otter-Grader: a plugin that judges a submission from its file before Otter runs it.

Otter Assign writes the plugin into the autograder's otter_config.json (`teachspec grading otter` puts it in each
master notebook's ASSIGNMENT CONFIG) with its configuration: the course's secret and the grader's hashes (the
course's file, teachspec.course.autograde), and which test case grades which part. Then, for each submission:

    before_execution   judge every part on the notebook's definitions, in the sandbox, before any cell runs; then
                       hand Otter the notebook with its code cells emptied, so that Otter's own run executes none
                       of the student's code (nothing there to kill the kernel, forge the results file Otter
                       unpickles, or touch the disk)
    after_grading      each configured test case passes or fails by its verdict, its message the verdict's;
                       a result for a test nobody configured is dropped
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import nbformat
from otter.plugins import AbstractOtterPlugin

from teachspec.course.autograde import Course, GraderChanged, hashes, judge_parts


class Judge(AbstractOtterPlugin):
    """plugin_config: {"secret": hex, "files": {file: sha256}, "tests": {test case name: part}}."""

    def before_execution(self, submission):
        config = self.plugin_config
        changed = sorted(f for f, h in hashes().items() if config["files"].get(f) != h)
        if changed:
            raise GraderChanged(f"teachspec's grader differs from the one that laid out this assignment: {changed}")
        folder = Path(self.submission_path).resolve().parents[1]  # the autograder's, its config (the secret) in it
        self.verdicts = judge_parts(submission, config["tests"], Course(bytes.fromhex(config["secret"]), folder))
        emptied = nbformat.from_dict(submission)
        for cell in emptied.cells:
            if cell.cell_type == "code":
                cell.source, cell.outputs = "", []
        return emptied

    def after_grading(self, results):
        wanted = self.verdicts
        for question in list(results.results):
            test_file = results.results[question]
            kept = [r for r in test_file.test_case_results if r.test_case.name in wanted]
            if not kept:
                del results.results[question]  # a test this course never wrote
                continue
            test_file._score = None  # no override from the notebook's side
            test_file.test_case_results = [
                dataclasses.replace(r, passed=wanted[r.test_case.name].passed, message=wanted[r.test_case.name].message)
                for r in kept]
