"""Benchmarks: speed goals are measured here, side by side in one run, never in timed tests."""
