"""What a lecture's run said of its own prose: the claims it recorded (`teachspec.course.claims.claim` appends one
line per claim to the file TEACHSPEC_CLAIMS names), and those that did not hold. Used by tests/course/
test_notebooks.py (each lecture as committed) and test_lecture_claims.py (rerun with another seed, beside a busy
neighbour)."""

from __future__ import annotations

import json
from pathlib import Path


def recorded(record: Path) -> list[dict]:
    """The claims a run appended to `record` (TEACHSPEC_CLAIMS), none if it made none."""
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


def failed(claims: list[dict]) -> list[str]:
    """The claims that did not hold, as lines for a failure message."""
    return [f"{c['says']} ({c['measured']})" for c in claims if not c["holds"]]
