"""Course tooling: the model-picking cell's logic, the assignments' checks and their grader (the parts in
`grading`, judged from a notebook's `definitions` in a `sandbox`, one way for every grader in `autograde`), the
course's files as the package ships them, the student-notebook generator, the layouts for nbgrader, Otter-Grader
and pytest, the script that re-records the lecture traces and the one that records the outputs nbval checks.

    from teachspec.course import pick_pair
    pair = pick_pair("tiny")                 # the first cell of every notebook

    teachspec course my-course                                            # the course as students get it
    teachspec course my-key --with-solutions                              # the instructor's copy, INSTRUCTORS.md
    teachspec student teachspec/course/sources/a1_acceptance_rule.ipynb   # -> the student version
    teachspec grading nbgrader my-nbgrader                      # nbgrader's course folder (or: otter, pytest)
    teachspec traces --out notebooks/traces                               # re-record the traces
    teachspec pin notebooks/05_radix_attention.ipynb                   # pinned outputs

`pick_pair` loads on first use (PEP 562), so the tools that only handle files start without torch.
"""

from importlib import import_module

__all__ = ["HUB_PAIRS", "pick_pair"]


def __getattr__(name: str):
    if name in __all__:
        return getattr(import_module("teachspec.course.pairs"), name)
    raise AttributeError(f"module 'teachspec.course' has no attribute {name!r}")
