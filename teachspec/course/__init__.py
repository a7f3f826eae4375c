"""Course tooling: the model-picking cell's logic, the assignments' checks, the student-notebook generator, the
script that re-records the lecture traces and the one that records the outputs nbval checks.

    from teachspec.course import pick_pair
    pair = pick_pair("tiny")                 # the first cell of every notebook

    python -m teachspec.course.student notebooks/assignments/a1_acceptance_rule.ipynb    # -> student version
    python -m teachspec.course.traces                                                     # -> notebooks/traces/
    python -m teachspec.course.pin notebooks/05_radix_attention.ipynb                     # pinned outputs
"""

from teachspec.course.pairs import HUB_PAIRS, pick_pair

__all__ = ["HUB_PAIRS", "pick_pair"]
