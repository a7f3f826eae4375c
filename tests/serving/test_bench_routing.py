"""`teachspec bench routing` (teachspec/bench/routing.py): its figures, its report and its options, then a small run
on real clusters.

The figures (time-to-first-token quantiles, balance, the hit rate over replicas, route agreement), the table and
the JSON, and the options' checks need no server. The real run starts two clusters of two replicas one after the other (about a
minute each on 2 CPUs) and is skipped where vLLM or its router is missing, unless TEACHSPEC_REQUIRE_VLLM=1 or
TEACHSPEC_REQUIRE_ROUTER=1 (as in CI), which makes a missing one a failure (as in tests/serving/test_cluster.py).
"""

from __future__ import annotations

import inspect
import json
import math
import os
import platform
from pathlib import Path

import pytest

import teachspec
from teachspec.bench import routing
from teachspec.bench.routing import PolicyRun, Replica, RoutingResult
from teachspec.cli import main, parser
from teachspec.events import EventLog, Route
from teachspec.serving import ServerError, metrics, router_binary, vllm_python

MISSING = None
for find in (vllm_python, router_binary):
    try:
        find()
    except ServerError as e:
        MISSING = MISSING or str(e).splitlines()[0]
if platform.machine() not in ("x86_64", "AMD64"):
    MISSING = MISSING or f"vLLM's CPU build and its router run on x86_64, this is {platform.machine()}"
for flag in ("TEACHSPEC_REQUIRE_VLLM", "TEACHSPEC_REQUIRE_ROUTER"):
    if MISSING and os.environ.get(flag) == "1":
        raise RuntimeError(f"{flag}=1 but the cluster cannot run here: {MISSING}")


@pytest.fixture(scope="module")
def pair():
    return teachspec.load_pair("tiny")


# -- the figures ------------------------------------------------------------------------------------------------

INF = math.inf
TTFT = [(0.1, 2.0), (0.5, 6.0), (1.0, 8.0), (INF, 10.0)]  # 2 requests <= 0.1 s, 4 in (0.1, 0.5], 2 in (0.5, 1], 2 over


@pytest.mark.parametrize("buckets, q, expected", [
    (TTFT, 0.5, 0.4),            # rank 5: the 3rd of 4 in (0.1, 0.5], spread evenly: 0.1 + 0.4 * 3/4
    (TTFT, 0.1, 0.05),           # rank 1: half way through the first bucket, from 0
    (TTFT, 0.8, 1.0),            # rank 8: the top of (0.5, 1]
    (TTFT, 0.99, 1.0),           # rank 9.9: in +Inf, given the highest finite bound, as histogram_quantile does
    ([(0.1, 0.0), (0.2, 4.0), (INF, 4.0)], 0.5, 0.15),   # an empty first bucket is skipped
])
def test_a_quantile_of_a_histogram_is_prometheus_histogram_quantile(buckets, q, expected):
    assert metrics.quantile(buckets, q) == pytest.approx(expected)


def test_a_histogram_is_read_summed_and_differenced_as_the_server_counts():
    text = "\n".join(f'vllm:time_to_first_token_seconds_bucket{{engine="{e}",le="{le}"}} {n}'
                     for e, rows in ((0, ((0.1, 1), (0.5, 3), ("+Inf", 4))), (1, ((0.1, 1), (0.5, 1), ("+Inf", 2))))
                     for le, n in rows)
    buckets = metrics.histogram(metrics.parse(text), metrics.TTFT)
    assert buckets == [(0.1, 2.0), (0.5, 4.0), (INF, 6.0)]
    assert metrics.histogram_difference(buckets, [(0.1, 1.0), (0.5, 1.0), (INF, 1.0)]) == \
        [(0.1, 1.0), (0.5, 3.0), (INF, 5.0)]
    with pytest.raises(metrics.MetricsError, match="not a histogram"):  # counts falling with le: not cumulative
        metrics.histogram(metrics.parse(text.replace("} 3", "} 0")), metrics.TTFT)
    with pytest.raises(ValueError, match="empty histogram"):
        metrics.quantile([(0.1, 0.0), (INF, 0.0)], 0.5)


@pytest.mark.parametrize("requests, expected", [
    ([24, 24], 1.0),
    ([36, 12], 1.5),
    ([48, 0], 2.0),         # an idle replica counts in the mean
    ([5, 1, 0, 2], 2.5),
])
def test_balance_is_the_most_loaded_over_the_mean(requests, expected):
    assert routing.balance(requests) == pytest.approx(expected)


def test_balance_needs_a_request():
    with pytest.raises(ValueError, match="at least one replica with a request"):
        routing.balance([0, 0])


def test_hit_rate_sums_tokens_over_replicas_rather_than_averaging_rates():
    replicas = [Replica(requests=1, queries=100, hits=90), Replica(requests=9, queries=900, hits=0)]
    assert routing.hit_rate(replicas) == pytest.approx(0.09)  # the mean of 90% and 0% would say 45%
    assert routing.hit_rate([Replica(0, 0, 0)]) == 0.0


def test_the_routers_order_is_the_replicas_in_the_order_they_first_answered():
    assert routing.router_order({0: 1, 1: 1, 2: 0, 3: 1}, 2) == [1, 0]
    assert routing.router_order({1: 2, 0: 0, 5: 1}, 3) == [0, 2, 1]   # by request number, not by when answered
    assert routing.router_order({0: 2, 1: 2}, 3) == [2, 0, 1]          # never answered: after, in index order
    assert routing.router_order({}, 2) == [0, 1]


def test_agreement_counts_the_requests_placed_alike():
    assert routing.agreement([0, 1, 0, 1], {0: 0, 1: 1, 2: 1, 3: 1}) == pytest.approx(0.75)
    assert routing.agreement([0, 1], {1: 1}) == 1.0  # a request no replica answered is left out
    assert routing.agreement([0, 1], {}) == 0.0


# -- the options, checked before anything starts -----------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    (dict(policies=["round_robin", "round_robin"]), "must be distinct"),
    (dict(policies=["fastest"]), r"\['fastest'\] are not routing policies"),
    (dict(policies=[]), "non-empty list"),
    (dict(policies="cache_aware"), "non-empty list"),
    (dict(kv_blocks=32), "kv_blocks must be >= 33"),
    (dict(concurrency=0), "concurrency must be >= 1"),
    (dict(replicas=0), "replicas must be an int >= 1"),
    (dict(router_options={"cache_threshold": 2.0}), "cache_threshold must be"),
    (dict(n_requests=0), "n_requests must be >= 1"),
    (dict(n_tenants=2, n_requests=4, max_new_tokens=1000), "the longest request needs"),
])
def test_bench_refuses_bad_options_before_starting_anything(pair, kwargs, message):
    with pytest.raises(ValueError, match=message):
        routing.bench(pair, progress=False, **kwargs)


def test_bench_needs_a_bundled_pair(pair):
    import dataclasses

    with pytest.raises(ValueError, match="must be a bundled pair"):
        routing.bench(dataclasses.replace(pair, name="elsewhere"), progress=False)


@pytest.mark.parametrize("argv, message", [
    (["--policies", "cache_aware", "cache_aware"], "argument --policies: must be distinct"),
    (["--policies", "fastest"], "argument --policies: invalid choice: 'fastest'"),
    (["--kv-blocks", "32"], "argument --kv-blocks: must be >= 33, got 32"),
    (["--replicas", "0"], "argument --replicas: must be >= 1, got 0"),
    (["--requests", "x"], "argument --requests: 'x' is not a whole number"),
])
def test_the_command_refuses_bad_options_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as done:
        main(["bench", "routing", *argv])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("teachspec bench routing: error: ") and message in err and len(err.splitlines()) == 1


def test_json_alone_prints_and_json_with_a_file_writes(tmp_path):
    def parse(*argv):
        return parser().parse_args(["bench", "routing", *argv])

    assert parse().json is None
    assert parse("--json").json is True
    assert parse("--json", str(tmp_path / "out.json")).json == tmp_path / "out.json"
    defaults, bench = parse(), inspect.signature(routing.bench).parameters  # the command's defaults are the bench's
    assert defaults.policies == list(routing.POLICIES)
    for flag, name in (("replicas", "replicas"), ("kv_blocks", "kv_blocks"), ("concurrency", "concurrency"),
                       ("requests", "n_requests"), ("tenants", "n_tenants"), ("zipf", "zipf"),
                       ("system_tokens", "system_tokens")):
        assert getattr(defaults, flag) == bench[name].default, flag


def test_trace_paths_name_the_policy():
    assert routing._trace_path("out/routing.jsonl", "cache_aware") == Path("out/routing.cache_aware.jsonl")
    assert routing._trace_path(None, "cache_aware") is None


# -- the report ---------------------------------------------------------------------------------------------------

def run_of(policy: str, hits: int, *, busy: bool = False, identical: bool = True) -> PolicyRun:
    replicas = [Replica(12, 3000, hits // 2), Replica(12, 3000, hits - hits // 2)]
    machine = {"busy": busy, "reasons": ["its threads waited for a CPU 40% of the time"] if busy else []}
    return PolicyRun(policy, 24, 0, 6000, 6000, hits, routing.hit_rate(replicas), 6000 - hits, 192, 2.0, 96.0, 0.05,
                     0.25, 1.0, identical, hits / 6000 + 0.02, 1.0, 0.9, per_replica=replicas, machine=machine)


def result_of(*runs: PolicyRun) -> RoutingResult:
    return RoutingResult("tiny", 2, 64, 4, {"n_tenants": 6, "n_requests": 24, "zipf": 1.2, "max_new_tokens": 8,
                                            "seed": 0, "description": "24 requests from 6 tenants"}, {}, list(runs),
                         tokenizer_agrees=True)


def test_markdown_reports_every_policy_and_the_ratios_to_round_robin():
    text = routing.markdown(result_of(run_of("round_robin", 2400), run_of("cache_aware", 3600, identical=False)))
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| policy | hit rate | simulated hit rate | prompt tokens computed |")
    assert rows[1] == ("| round_robin | 40.0% | 42.0% | 3,600 | 96 | 50 | 250 | 1.00 | 1.00 | 90% | True | 0 |")
    assert rows[2].startswith("| cache_aware | 60.0% | 62.0% | 2,400 |") and "| False | 0 |" in rows[2]
    # hit rate 60 / 40 = 1.5x; tokens computed 3600 / 2400 = 1.5x fewer
    assert "cache_aware against round_robin: hit rate 1.50x, prompt tokens computed 1.50x fewer" in text
    assert "at most 2.0 points of hit rate apart" in text
    assert "vLLM's tokenizer gives every prompt the bundled tokenizer's ids: True" in text
    assert "replica 0: 12, 3,000, 1,200; replica 1: 12, 3,000, 1,200" in text
    assert "this machine was busy" not in text


def test_markdown_says_when_the_machine_was_busy():
    text = routing.markdown(result_of(run_of("cache_aware", 3600, busy=True)))
    assert "cache_aware: this machine was busy: these times are not reliable; rerun (its threads waited" in text


def test_the_result_is_json_as_it_is():
    result = result_of(run_of("round_robin", 2400), run_of("cache_aware", 3600))
    back = json.loads(json.dumps(result.as_dict()))
    assert [r["policy"] for r in back["runs"]] == ["round_robin", "cache_aware"]
    assert back["runs"][1]["per_replica"][0] == {"requests": 12, "queries": 3000, "hits": 1800}
    assert result.run("cache_aware").hit_rate == pytest.approx(0.6)


# -- on real clusters -----------------------------------------------------------------------------------------------

@pytest.mark.vllm
@pytest.mark.skipif(MISSING is not None, reason=f"no cluster here: {MISSING}")
def test_two_policies_on_real_clusters(pair, tmp_path):
    result = routing.bench(pair, ["round_robin", "cache_aware"], n_tenants=3, n_requests=12, progress=False,
                           trace=tmp_path / "routing.jsonl")
    assert json.loads(json.dumps(result.as_dict()))["replicas"] == 2
    assert result.tokenizer_agrees, "vLLM's tokenizer and the bundled one give a prompt different ids"
    for run in result.runs:
        assert run.failed == 0
        assert run.identical, f"{run.policy}: a greedy output differs from teachspec's own"
        assert sum(r.requests for r in run.per_replica) == run.requests == 12
        assert run.queries >= run.prompt_tokens and 0 <= run.hits <= run.queries  # more only after a preemption
        assert run.computed_tokens == run.queries - run.hits
        assert 0 < run.hit_rate < 1 and 0 <= run.simulated_hit_rate < 1
        assert 0 < run.ttft_p50_s <= run.ttft_p99_s and run.throughput > 0
        assert 1.0 <= run.balance <= 2.0
        assert sorted(run.router_order) == [0, 1]
        routes = EventLog.load(run.trace).of(Route)
        assert sorted(e.request for e in routes) == list(range(12)) and {e.policy for e in routes} == {run.policy}
        # the simulator was given the router's worker order: request 0 (every load 0, nothing cached) goes to the
        # first worker in both, whichever replica the router happened to list first
        assert run.simulated_routes[0] == run.routes[0] == run.router_order[0]
