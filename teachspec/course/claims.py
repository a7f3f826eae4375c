"""What a lecture's prose says about its own measurements, checked in the cell that measures.

A sentence such as "the cache shortens the prefill", written under a table of times, has to stay true when a student
reruns the lecture on another day, with another seed, or beside a busy neighbour. So a lecture states a direction
only where the cell that measures it also checks it:

    claim("the radix cache shortens the prefill", max(prefill_ratios) < 0.8, f"ratios {prefill_ratios}")

On a run where the check fails the cell says so, under its own output, so the prose is never silently wrong on
screen. tests/course/test_lecture_claims.py reruns the lectures with another seed beside a busy neighbour (as
committed, they run under tests/course/test_notebooks.py), and fails when any claim does: a direction that a rerun can
overturn belongs in hedged prose, not in a claim. A lecture's `SEED` (its first cell) is the seed of every sampled
run in it, which is how those reruns draw other samples.

When TEACHSPEC_CLAIMS names a file, every claim is also appended to it as a line of JSON, for that test.
"""

from __future__ import annotations

import json
import os


def claim(says: str, holds: bool, measured: str = "") -> None:
    """Check one direction the lecture's prose states: `says` is the sentence, `holds` whether this run's numbers
    bear it out, `measured` the numbers it rests on. Prints a line only when it does not hold (and returns nothing,
    so a cell that ends with a claim shows no value)."""
    holds = bool(holds)
    if not holds:
        print(f"Not on this run: {says}" + (f" ({measured})" if measured else "") +
              ". The text around this cell says otherwise; if the machine was busy, rerun on a quiet one.")
    record = os.environ.get("TEACHSPEC_CLAIMS")
    if record:
        with open(record, "a") as f:
            f.write(json.dumps({"says": says, "holds": holds, "measured": measured}) + "\n")
