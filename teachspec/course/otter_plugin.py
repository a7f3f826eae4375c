"""teachspec's grading in Otter-Grader: a plugin that judges a submission from its file before Otter runs it.

Otter Assign writes the plugin into the autograder's otter_config.json (`teachspec grading otter` puts it in each
master notebook's ASSIGNMENT CONFIG) with its configuration: the course's secret and the grader's hashes (the
course's file, teachspec.course.autograde), and which test case grades which part. Then, for each submission:

    before_execution   judge every part on the notebook's definitions, in the sandbox, before any cell runs;
                       the run that follows leaves its checks to these verdicts (GRADED_OUTSIDE)
    after_grading      each configured test case passes or fails by its verdict, its message the verdict's;
                       a result for a test nobody configured is dropped

Otter's own run of the notebook returns its results from the kernel as a pickle, which code in the notebook can
write: this plugin decides every graded test case, but a notebook that forges that file can still run code in
Otter's process. Otter grades in a container by default; INSTRUCTORS.md says why to keep it so.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import os
import tempfile
from pathlib import Path

from otter.plugins import AbstractOtterPlugin
from otter.test_files.abstract_test import TestCaseResult
from otter.test_files.exception_test import ExceptionTestFile

from teachspec.course.autograde import Course, GraderChanged, hashes, judge_parts
from teachspec.course.checks import GRADED_OUTSIDE


class Judge(AbstractOtterPlugin):
    """plugin_config: {"secret": hex, "files": {file: sha256}, "tests": {test case name: part}}."""

    def before_execution(self, submission):
        config = self.plugin_config
        changed = sorted(f for f, h in hashes().items() if config["files"].get(f) != h)
        if changed:
            raise GraderChanged(f"teachspec's grader differs from the one that laid out this assignment: {changed}")
        folder = Path(tempfile.gettempdir()) / hashlib.sha256(config["secret"].encode()).hexdigest()[:12]
        self.verdicts = judge_parts(submission, config["tests"], Course(bytes.fromhex(config["secret"]), folder))
        os.environ[GRADED_OUTSIDE] = "1"
        return submission

    def after_grading(self, results):
        os.environ.pop(GRADED_OUTSIDE, None)
        wanted = self.verdicts
        if results.catastrophic_error is not None:  # the notebook's run broke (a cell killed its kernel, say)
            results._catastrophic_error = None       # the verdicts stand apart from it: give each test its result
            for path in sorted(glob.glob("tests/*.py")):
                test_file = ExceptionTestFile.from_file(path)
                test_file.test_case_results = [TestCaseResult(tc, "the notebook's run broke", False)
                                               for tc in test_file.test_cases]
                results.results.setdefault(test_file.name, test_file)
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
