"""Two vLLM replicas behind vLLM's router on 127.0.0.1: routed by cache_aware, a replica killed mid-run, all stopped.

One cluster is started for the module (two replicas side by side, about 40 s on 2 CPUs, a 64-block KV cache each),
and its tests run in order: routing, then the fault (which kills replica 1), then the stop. Without vLLM or its
router (x86_64 Linux only) these tests are skipped, unless TEACHSPEC_REQUIRE_VLLM=1 or TEACHSPEC_REQUIRE_ROUTER=1
(as in CI), which makes a missing one a failure.
"""

from __future__ import annotations

import os
import platform
import threading
import time

import pytest

from teachspec.serving import Ask, Completion, ServerError, complete, router_binary, run_all, start_cluster, \
    vllm_python
from teachspec.serving.cluster import replica_cores

MISSING = None
for find in (vllm_python, router_binary):
    try:
        find()
    except ServerError as e:
        MISSING = MISSING or str(e)
if platform.machine() not in ("x86_64", "AMD64"):
    MISSING = MISSING or f"vLLM's CPU build and its router run on x86_64, this is {platform.machine()}"
for flag in ("TEACHSPEC_REQUIRE_VLLM", "TEACHSPEC_REQUIRE_ROUTER"):
    if MISSING and os.environ.get(flag) == "1":
        raise RuntimeError(f"{flag}=1 but the cluster cannot run here: {MISSING}")
pytestmark = [pytest.mark.vllm, pytest.mark.skipif(MISSING is not None, reason=f"no cluster here: {MISSING}")]

NEW_TOKENS = 16
TENANTS = {  # two system prompts, each longer than a block of 32 tokens, so a repeat is served from the cache
    "tenant-a": "You are a careful assistant for a bakery. Answer questions about bread, flour and ovens. " * 3,
    "tenant-b": "You are a terse assistant for a railway. Answer questions about trains, tickets and times. " * 3,
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with start_cluster("tiny", replicas=2, policy="cache_aware", kv_blocks=64,
                       workdir=tmp_path_factory.mktemp("cluster")) as started:
        yield started


def asks(n: int, tag: str) -> list[Ask]:
    """n requests, alternating between the tenants, each with a question of its own."""
    names = list(TENANTS)
    return [Ask(f"{tag}-{i}", TENANTS[names[i % 2]] + f"Question {i}: what comes first?", NEW_TOKENS,
                session=names[i % 2]) for i in range(n)]


def group_gone(pgid: int, within: float = 10.0) -> bool:
    """Whether no process is left in group `pgid` (a killed child lingers a moment, until it is reaped)."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def test_cache_aware_keeps_each_tenant_on_one_replica_and_serves_its_prefix_from_cache(cluster):
    results = run_all(cluster.url, asks(6, "route"), concurrency=1, deadline=300)
    assert all(isinstance(r, Completion) for r in results), results
    routes = cluster.routes(results)
    assert sorted(routes) == [f"route-{i}" for i in range(6)]
    for first in (0, 1):  # a tenant's later requests go where its first one left its prompt cached
        assert {routes[f"route-{i}"] for i in range(first, 6, 2)} == {routes[f"route-{first}"]}
        assert all(r.cached_tokens >= 32 for r in results[first + 2::2])
    assert all(r.ttft_s <= r.total_s and len(r.token_ids) == NEW_TOKENS for r in results)
    # greedy decoding is the same wherever it runs: the router's answer is the other replica's too
    direct = complete(cluster.replica_urls[1 - routes["route-0"]], asks(1, "direct")[0].prompt, NEW_TOKENS,
                      request_id="direct-0")
    assert direct.token_ids == results[0].token_ids and direct.served_by != results[0].served_by


def test_each_replica_runs_its_model_on_cores_of_its_own(cluster):
    for server, cores in zip(cluster.servers, replica_cores(2)):  # vLLM's CPU build says where its threads are bound
        assert f"core ids=[{', '.join(cores.split(','))}]" in server.log.read_text(errors="replace"), server.log


def test_a_replica_killed_mid_run_leaves_every_request_one_answer(cluster):
    work = asks(12, "fault")
    done, killed = [], threading.Event()

    def on_result(i, result):
        done.append(i)
        if len(done) == 4 and not killed.is_set():
            cluster.kill(1)
            killed.set()

    results = run_all(cluster.url, work, concurrency=3, deadline=300, retries=1, on_result=on_result)
    assert killed.is_set() and cluster.alive() == [True, False]
    failed = {ask.request_id: r for ask, r in zip(work, results) if not isinstance(r, Completion)}
    assert not failed, failed
    ids = [r.request_id for r in results]
    assert ids == [ask.request_id for ask in work] and len(set(ids)) == len(ids)  # one answer each, in order
    routes = cluster.routes(results)
    assert set(routes.values()) <= {0, 1} and len(routes) == 12
    # each answer, wherever it was written, is the live replica's own greedy answer
    for ask, result in zip(work, results):
        again = complete(cluster.replica_urls[0], ask.prompt, NEW_TOKENS, request_id=f"again-{ask.request_id}")
        assert again.token_ids == result.token_ids, ask.request_id


def test_stop_ends_every_process(cluster):
    groups = [cluster.router.pid] + [server.pid for server in cluster.servers]
    cluster.stop()
    assert cluster.alive() == [False, False] and cluster.router.poll() is not None
    for pgid in groups:  # each part ran in a session of its own: its group is gone, children and all
        assert group_gone(pgid), f"process group {pgid} outlived stop()"
    assert (cluster.folder / "router.log").is_file()
    assert all((cluster.folder / f"replica-{i}" / "server.log").is_file() for i in range(2))


def test_the_lectures_real_trace_records_a_whole_run_with_a_kill(tmp_path):
    """`teachspec traces`' routing_cluster: what lecture 15 replays, recorded again here."""
    from teachspec import load_pair
    from teachspec.course.traces import CLUSTER_KILL, Recorded, routing_cluster
    from teachspec.events import Counters, Health, Route

    log = Recorded.load(routing_cluster(load_pair("tiny")).save(tmp_path / "routing_cluster.jsonl"))
    routes = log.of(Route)
    assert sorted(e.request for e in routes) == list(range(48)) and {e.policy for e in routes} == {"cache_aware"}
    died = [e for e in log.of(Health) if e.state == "down"]
    assert [e.replica for e in died] == [1] and log.about["killed"] == {"replica": 1, "after": CLUSTER_KILL}
    assert sum(e.t < died[0].t for e in routes) >= CLUSTER_KILL  # killed after 24 answers, seen dead a moment later
    assert {e.replica for e in routes if e.t > died[0].t} == {0}
    assert {e.replica for e in log.of(Counters)} == {0, 1} and log.about["recorded"] and log.about["machine"]
