"""`teachspec bench batch` (teachspec/bench/batch.py) at a tiny scale against real vLLM servers: both servers
measured at every batch, the prediction and the measurement side by side in a JSON-able result, greedy outputs
identical with and without the draft model, and the crossovers read off the rows they come from.

The real run starts two servers (about 40 s together on 2 CPUs) and is skipped where vLLM is not installed, unless
TEACHSPEC_REQUIRE_VLLM=1 (as in CI), which makes a missing vLLM a failure (as in tests/serving/test_vllm.py). The
argument checks and the interpolation need no server.
"""

from __future__ import annotations

import json
import os

import pytest

import teachspec
from teachspec import workloads
from teachspec.bench import batch
from teachspec.serving import ServerError, vllm_python

try:
    vllm_python()
    MISSING = None
except ServerError as e:
    MISSING = str(e).splitlines()[0]
if MISSING and os.environ.get("TEACHSPEC_REQUIRE_VLLM") == "1":
    raise RuntimeError(f"TEACHSPEC_REQUIRE_VLLM=1 but vLLM cannot be found: {MISSING}")

NEW_TOKENS, K, BATCHES = 8, 2, (1, 4)


@pytest.fixture(scope="module")
def pair():
    return teachspec.load_pair("tiny")


@pytest.fixture(scope="module")
def prompts(pair):
    work = workloads.docs_completion(3, prompt_tokens=32, max_new_tokens=NEW_TOKENS)
    return [pair.encode(r.prompt) for r in work.requests]


@pytest.mark.vllm
@pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
def test_a_tiny_sweep_on_real_servers(pair, prompts):
    result = batch.bench(pair, prompts, NEW_TOKENS, batches=BATCHES, k=K, rounds=2, progress=False)
    assert json.loads(json.dumps(result))["rows"][0]["b"] == 1  # JSON-able as it is
    rows = {row["b"]: row for row in result["rows"]}
    assert sorted(rows) == list(BATCHES)
    assert result["stopped"] in ("every batch measured", "speculation lost at 2 batch sizes in a row (b = 1 and 4)")
    assert result["all_identical"], "greedy outputs differ between plain vLLM and vLLM with the draft model"
    assert 0 < result["alpha"] <= 1 and result["c"] > 0
    for b, row in rows.items():
        # the faster of two rounds per server, and the measured speedup is their ratio
        assert len(row["rounds"]["plain"]) == len(row["rounds"]["draft"]) == 2
        assert row["plain_tokens_per_s"] == max(row["rounds"]["plain"])
        assert row["measured"] == pytest.approx(row["draft_tokens_per_s"] / row["plain_tokens_per_s"])
        assert 0 < row["alpha"] <= 1  # vLLM's own counters: the server did speculate
        # the prediction is theory's, from the curves the result keeps
        cost, draft = dict(result["pass_cost"]), dict(result["draft_cost"])
        assert row["predicted"] == pytest.approx(teachspec.theory.batch_speedup(
            result["alpha"], K, result["c"], cost.get, b, draft.get))
        assert row["verify_ms"] == cost[b * (K + 1)]
        # the speedup split as the formula splits it: tokens per step over a step's cost in plain steps
        assert row["predicted"] == pytest.approx(result["expected_tokens"] / row["step_cost"])
        assert row["measured"] == pytest.approx(row["tokens_per_target_pass"] / row["step_cost_vllm"])
    vllm = result["crossover"]["vLLM"]
    assert vllm["first_losing"] == next((b for b in BATCHES if rows[b]["measured"] < 1), None)
    assert vllm["at"] == batch.crossing(BATCHES, [rows[b]["measured"] for b in BATCHES])
    for name in ("one sequence", "b sequences"):
        x = result["crossover"][name]
        assert x["ratio"] == (x["at"] / vllm["at"] if None not in (x["at"], vllm["at"]) else None)
    table = batch.markdown(result)
    assert "| b | plain tokens/s |" in table and f"| {BATCHES[-1]} | " in table
    assert "| crossover (speculation stops paying) | first batch that loses |" in table


def test_where_the_speedup_crosses_1():
    assert batch.crossing([1, 2, 4], [1.5, 1.2, 0.8]) == pytest.approx(2 * 2**0.5)  # halfway on log b
    assert batch.crossing([1, 2, 4], [1.5, 1.0, 0.5]) == pytest.approx(2.0)  # 1.0 still pays; 2 is where it is 1
    assert batch.crossing([8, 16], [0.9, 0.5]) == 8.0  # even the first loses
    assert batch.crossing([1, 2, 4], [1.5, 1.2, 1.1]) is None


@pytest.mark.parametrize("kwargs, match", [
    (dict(prompts=[]), "prompts must be a non-empty list"),
    (dict(prompts=[[1, 2], []]), "prompts must be a non-empty list"),
    (dict(prompts=[[1, -2]]), "prompts must be a non-empty list"),
    (dict(n=0), "n must be an int >= 1"),
    (dict(k=0), "k must be an int >= 1"),
    (dict(rounds=True), "rounds must be an int >= 1"),
    (dict(batches=(4, 2)), "batches must be increasing ints >= 1"),
    (dict(batches=(0, 1)), "batches must be increasing ints >= 1"),
    (dict(batches=()), "batches must be increasing ints >= 1"),
])
def test_bad_arguments_are_refused_before_anything_runs(kwargs, match):
    class Untouchable:  # a pair that fails the test if the bench reads anything of it
        def __getattr__(self, name):
            raise AssertionError(f"the bench read pair.{name} before refusing its arguments")

    args = dict(pair=Untouchable(), prompts=[[1, 2, 3]], n=4) | kwargs
    with pytest.raises(ValueError, match=match):
        batch.bench(**args)


def test_a_pair_vllm_cannot_serve_by_name_is_refused_before_anything_runs():
    class Elsewhere:  # a hub pair, say: its name is no bundled folder start_vllm could lay out
        name = "smollm2"

    with pytest.raises(ValueError, match="pair must be a bundled pair, which vLLM serves by name .*'smollm2'"):
        batch.bench(Elsewhere(), [[1, 2, 3]], 4)
