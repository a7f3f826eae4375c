"""Benchmarks: speed goals are measured here, side by side in one run, never in timed tests."""

import json


def save(result: dict, path: str) -> None:
    """Write a benchmark's result as JSON."""
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
