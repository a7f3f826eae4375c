"""What nbgrader's feedback shows of an error: its verdict, not the traceback.

A failed part's verdict is a CheckFailed, whose message says what failed and the likely cause (never a hidden
case; `teachspec.course.autograde.VerdictsOfRecord` makes it the check cell's output). nbgrader's feedback
(`nbgrader generate_feedback`) would show an error's whole traceback, which quotes code around the failing line.
`VerdictOnly` keeps each error's last line, `Name: message`. The configuration that `teachspec grading nbgrader`
writes lists it:

    c.GenerateFeedback.preprocessors = ["nbgrader.preprocessors.GetGrades",
                                        "nbgrader.preprocessors.ClearHiddenTests",
                                        "teachspec.course.feedback.VerdictOnly",
                                        "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor"]

Imported only by nbgrader, which brings nbconvert.
"""

from __future__ import annotations

from nbconvert.preprocessors import Preprocessor
from traitlets import Bool


class VerdictOnly(Preprocessor):
    """An error output keeps `Name: message` and loses the traceback that quotes the cell's code."""

    enabled = Bool(True).tag(config=True)  # nbconvert's own preprocessors start disabled; nbgrader's do not

    def preprocess_cell(self, cell, resources, index):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                output["traceback"] = [f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"]
        return cell, resources
