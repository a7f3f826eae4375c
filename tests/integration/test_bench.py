"""`teachspec bench speculative`'s tables, on config-built models: every method runs, and the columns mean what
teachspec/bench/README.md says they mean."""

from __future__ import annotations

import pytest

from helpers.pairs import COPY_PROMPT, PROMPT, make_pair
from teachspec.bench import mechanics
from teachspec.bench.speculative import bench, markdown
from teachspec.theory import speedup


@pytest.fixture(scope="module")
def result():
    return bench(make_pair(), [PROMPT, PROMPT[5:]], [COPY_PROMPT, COPY_PROMPT[2:]], n=16, ks=(1, 3), progress=False)


def rows(result, workload) -> dict[str, dict]:
    return {r["method"]: r for r in result["workloads"][workload]["rows"]}


def test_every_method_runs_and_greedy_outputs_agree(result):
    assert result["workloads"]["docs, temperature 0"]["greedy_outputs_identical"] is True
    assert result["workloads"]["copy-heavy, temperature 0"]["greedy_outputs_identical"] is True
    docs = rows(result, "docs, temperature 0")
    assert {"transformers generate", "transformers assisted (defaults)", "transformers assisted (k=2)", "ours k=1",
            "ours k=3", "ours adaptive", "ours k=2, events off", "ours k=2, widget events"} <= docs.keys()
    assert all(r["tokens"] == 2 * 16 for r in docs.values())


def test_the_columns(result):
    docs = rows(result, "docs, temperature 0")
    plain, k3, hf = docs["ours plain"], docs["ours k=3"], docs["transformers generate"]
    assert plain["speedup"] == plain["decoding_speedup"] == plain["tokens_per_target_pass"] == 1.0
    assert "decoding_speedup" not in hf and "alpha" not in hf  # transformers does not report its steps
    assert 1.0 <= k3["tokens_per_target_pass"] <= 4.0 and 0.0 <= k3["alpha"] <= 1.0 and k3["c"] > 0
    assert k3["predicted"] == pytest.approx(speedup(k3["alpha"], 3, k3["c"]))
    assert k3["measured_over_predicted"] == pytest.approx(k3["decoding_speedup"] / k3["predicted"])
    assert plain["pass_cost"] == 1.0 and k3["pass_cost"] > 0
    # the cost-aware prediction is the paper's with the measured pass cost in place of 1
    cost_aware = sum(k3["alpha"] ** i for i in range(4)) / (3 * k3["c"] + k3["pass_cost"])  # E[tokens] / cost
    assert k3["predicted_cost_aware"] == pytest.approx(cost_aware)
    lookup = rows(result, "copy-heavy, temperature 0")["ours prompt lookup k=8"]
    assert "predicted" not in lookup  # no formula for its runs of guesses
    table = markdown(result)
    assert "| pass cost |" in table and "| measured / paper |" in table and f"| ours k=3 | {k3['speedup']:.2f}x | " in table


def test_the_time_split_of_each_method_adds_up_to_its_wall_time(result):
    """draft passes + target passes + the engine's own work = the wall time the engine measured, per new token."""
    for workload in ("docs, temperature 0", "copy-heavy, temperature 0"):
        for name, r in rows(result, workload).items():
            if name.startswith("transformers"):
                assert "time_split" not in r  # it records no statistics
                continue
            t = r["time_split"]
            assert t["target_ms"] > 0 and t["engine_ms"] >= 0 and (t["draft_ms"] > 0) == (name != "ours plain")
            # timed inside the call, a little less than around it (seconds are rounded to the ms)
            assert sum(t.values()) <= 1e3 * (r["seconds"] + 5e-4) / r["tokens"]
    eagle = rows(result, "docs, temperature 0")["ours eagle k=3"]["time_split"]
    table = markdown(result)
    assert "**Where the time goes**" in table and "| method | draft | target | engine | total |" in table
    assert (f"| ours eagle k=3 | {eagle['draft_ms']:.2f} | {eagle['target_ms']:.2f} | {eagle['engine_ms']:.2f} | "
            f"{sum(eagle.values()):.2f} |") in table


def test_the_noise_floor_is_how_far_two_runs_of_one_method_land_apart(result):
    """One method runs twice in each docs workload; the table states how far apart their speedups landed."""
    table = markdown(result)
    for workload in ("docs, temperature 0", "docs, temperature 1"):
        by_method = rows(result, workload)
        once, twice = by_method["ours k=2"], by_method["ours k=2, again"]
        assert once["tokens"] == twice["tokens"] and once["alpha"] == twice["alpha"]  # the same work, seed for seed
        floor = result["workloads"][workload]["noise"]
        assert floor == pytest.approx(abs(once["speedup"] / twice["speedup"] - 1))
        assert f"its two speedups differ by {floor:.1%}" in table
    assert result["workloads"]["copy-heavy, temperature 0"]["noise"] is None  # no method runs twice there


def test_mechanics_times_the_oracle_on_a_config_built_target():
    pair = mechanics.config_pair(mechanics.Shape(layers=1, hidden=64))
    result = mechanics.bench(pair, n_prompts=2, prompt_tokens=8, n=8, ks=(1, 3), progress=False)
    workload = result["workloads"]["random prompts, temperature 0"]
    assert workload["greedy_outputs_identical"] is True  # the oracle's output is plain greedy decoding's
    by_method = {r["method"]: r for r in workload["rows"]}
    for k in (1, 3):
        row = by_method[f"ours oracle k={k}"]
        # q = p: every guess accepted, k + 1 tokens a step (8 new tokens split evenly for k = 1 and k = 3)
        assert row["alpha"] == 1.0 and row["tokens_per_target_pass"] == k + 1
        assert row["predicted"] == pytest.approx((k + 1) / (k * row["c"] + 1))
    assert "| ours oracle k=3 |" in markdown(result)


@pytest.mark.parametrize("shape, message", [(dict(hidden=100), "hidden must be a multiple of 64"),
                                            (dict(layers=0), "layers must be >= 1")])
def test_mechanics_refuses_a_shape_it_cannot_build(shape, message):
    with pytest.raises(ValueError, match=message):
        mechanics.config_pair(mechanics.Shape(**shape))

