"""What nbgrader's feedback shows of a failed check: its verdict, not the hidden tests.

A failed check raises CheckFailed, whose message says what failed and the likely cause. nbgrader's feedback
(`nbgrader generate_feedback`) would show the whole traceback, and IPython's traceback quotes the cell's code
around the failing line: the hidden tests too. `VerdictOnly` keeps the error's last line, `CheckFailed: ...`,
and nbgrader's own ClearHiddenTests removes the hidden regions from the cells' code. The configuration that
`teachspec grading nbgrader` writes lists both:

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
