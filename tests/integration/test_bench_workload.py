"""`teachspec bench speculative --workloads`: every drafter on one multi-request workload, one engine each."""

import pytest

from teachspec.bench import workload as bench
from teachspec.models import load_pair
from teachspec.workloads import Job, Workload


@pytest.fixture(scope="module")
def pair():
    return load_pair("tiny")


def test_every_method_writes_the_same_tokens_and_only_suffix_decoding_learns_from_the_request_before(pair):
    prompt = "def read(path):\n    with open(path) as f:"
    repeated = Workload("repeated", "one prompt twice, then another", [Job(prompt, 24, "a"), Job(prompt, 24, "a"),
                                                                      Job("The with statement", 24, "b")])
    runs = bench.run(pair, repeated)
    assert list(runs) == list(bench.METHODS)  # the bundled pair has a draft model and an EAGLE head
    outputs = [r.outputs for r in runs.values()]
    assert all(o == outputs[0] for o in outputs) and all(len(t) == 24 for t in outputs[0])
    rows = {r["method"]: r for r in bench.summarise(runs)}
    assert rows["plain"]["speedup"] == 1.0 and rows["plain"]["tokens_per_target_pass"] == 1.0
    assert "alpha" not in rows["plain"] and 0 < rows["suffix"]["alpha"] <= 1
    assert rows["suffix"]["k"] == 16 and rows["draft model"]["k"] == 3
    # the second request is the first again: its whole output is in the suffix cache, and one engine's cache
    # never serves another's, so prompt lookup (its own context only) cannot know it
    assert runs["suffix"].stats.target_passes < runs["prompt lookup"].stats.target_passes
    split = rows["suffix"]["time_split"]
    assert set(split) == {"draft_ms", "target_ms", "engine_ms"} and split["target_ms"] > 0
    table = bench.markdown({"pair": "tiny", "device": "cpu", "new_tokens": 24, "workloads": {"repeated": {
        "description": repeated.description, "requests": 3, "greedy_outputs_identical": True,
        "rows": list(rows.values())}}})
    assert "| suffix | 16 |" in table and "greedy outputs identical: True" in table


def test_a_pair_without_a_draft_model_has_no_draft_model_rows(pair):
    import dataclasses
    alone = dataclasses.replace(pair, draft=None, eagle=None)
    assert list(bench.methods_for(alone)) == ["plain", "prompt lookup", "suffix"]


@pytest.mark.parametrize("names, message", [(["sudoku"], r"workloads \['sudoku'\] are not workloads"),
                                            ([], "non-empty list"), ("agentic", "non-empty list")])
def test_names_that_are_not_workloads_are_refused_before_anything_runs(pair, names, message):
    with pytest.raises(ValueError, match=message):
        bench.bench(pair, names)


def test_the_workloads_have_the_sizes_the_docstring_gives():
    built = bench.workloads(n_new=32)
    assert list(built) == ["agentic", "code_edits", "novel"]
    assert [len(w.requests) for w in built.values()] == [30, 12, 12]
    assert all(job.max_new_tokens == 32 for w in built.values() for job in w.requests)
    assert len(bench.workloads(("novel",), scale=2)["novel"].requests) == 24
    with pytest.raises(ValueError, match="scale must be >= 1"):
        bench.workloads(scale=0)
