"""ClusterWatcher against hand-made servers: two /metrics and two ZMQ publishers, one per replica, fed frames the
way vLLM sends them; then, where vLLM is installed and the cluster module exists, two real replicas."""

from __future__ import annotations

import http.server
import os
import threading
import time
import warnings
from pathlib import Path

import msgpack
import pytest
import zmq

from teachspec.events import Counters, EventLog, Evict, Health, Insert, Route
from teachspec.serving import EventStreamError, Watcher
from teachspec.serving.cluster_watch import ClusterWatcher
from teachspec.serving.launch import VllmServer
from teachspec.widgets.cluster import ClusterView
from helpers.servers import MetricsHandler

B = 4  # block size of the hand-made streams
METRICS = """vllm:prefix_cache_queries_total{engine="0",model_name="m"} 100.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 64.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 3.0
"""


class Metrics(MetricsHandler):
    body = METRICS


class Replica:
    """A server's two faces made by hand: /metrics on 127.0.0.1, a KV-event publisher on a socket file."""

    def __init__(self, folder: Path, ctx: zmq.Context, i: int):
        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.pub = ctx.socket(zmq.PUB)
        endpoint = f"ipc://{folder}/kv{i}"
        self.pub.bind(endpoint)
        self.server = VllmServer(url=f"http://127.0.0.1:{self.http.server_address[1]}", events_endpoint=endpoint,
                                 replay_endpoint=None, process=None, model="m", speculate=None, k=0, block_size=B,
                                 log=folder / f"server{i}.log")
        self.seq = 0

    def store(self, h: int, parent, tokens: list[int]) -> None:
        self.send([{"type": "BlockStored", "block_hashes": [h], "parent_block_hash": parent, "token_ids": tokens,
                    "block_size": B, "lora_id": None, "medium": None}])

    def send(self, events: list) -> None:
        self.pub.send_multipart([b"", self.seq.to_bytes(8, "big"), msgpack.packb([time.time(), events, 0])])
        self.seq += 1

    def die(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def replicas(tmp_path):
    ctx = zmq.Context()
    made = [Replica(tmp_path, ctx, i) for i in range(2)]
    yield made
    for r in made:
        r.pub.close(0)
        try:
            r.die()
        except OSError:
            pass
    ctx.term()


def wait_for(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert condition()


def stamped_by_replica(log: EventLog, trees: list) -> bool:
    """Whether each replica's blocks are in the log under its own stamp, and nowhere else."""
    inserts = log.of(Insert)
    return all(sorted(e.node for e in inserts if e.replica == i) == sorted(t.blocks) for i, t in enumerate(trees)) \
        and all(e.replica is not None for e in inserts + log.of(Counters))


def test_each_replica_writes_into_one_log_under_its_stamp_which_a_saved_trace_keeps(replicas, tmp_path):
    with ClusterWatcher([r.server for r in replicas], interval=0.1) as watcher:
        replicas[0].store(1, None, [1, 2, 3, 4])
        replicas[1].store(1, None, [5, 6, 7, 8])       # the same hash on another replica: another block
        replicas[1].store(2, 1, [9, 9, 9, 9])
        wait_for(lambda: [len(t) for t in watcher.trees] == [1, 2])
        watcher.routed(0, 1, "cache_aware", "tenant-a", 8)
        watcher.settle(quiet=0.2)
    log = watcher.log
    assert stamped_by_replica(log, watcher.trees)
    assert [(e.replica, e.state) for e in log.of(Health)] == [(0, "up"), (1, "up")]
    assert [(e.request, e.replica, e.key) for e in log.of(Route)] == [(0, 1, "tenant-a")]
    again = EventLog.load(log.save(tmp_path / "cluster.jsonl"))
    assert again.events == log.events  # the stamps survive save and load
    view = ClusterView(again)
    assert [len(t.nodes) - 1 for t in view.trees] == [1, 2]
    assert view.routes.items["r0"]["rate"] == pytest.approx(0.64)  # its counters: 64 of 100 prompt tokens


def test_the_stamp_check_fails_on_a_log_without_stamps(replicas):
    """The planted mutant: watchers that share a log but stamp nothing, as before `replica=`."""
    log = EventLog()
    watchers = [Watcher(r.server, log=log, interval=0.1).start() for r in replicas]
    try:
        replicas[0].store(1, None, [1, 2, 3, 4])
        replicas[1].store(1, None, [5, 6, 7, 8])
        wait_for(lambda: all(len(w.tree) == 1 for w in watchers))
    finally:
        for w in watchers:
            w.stop()
    assert not stamped_by_replica(log, [w.tree for w in watchers])


def test_a_replica_that_dies_is_down_once_quietly_and_the_others_go_on(replicas):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ClusterWatcher([r.server for r in replicas], interval=0.1) as watcher:
            replicas[1].store(1, None, [1, 2, 3, 4])
            wait_for(lambda: len(watcher.trees[1]) == 1)
            replicas[1].die()
            wait_for(lambda: watcher.down == [1])
            replicas[0].store(7, None, [5, 6, 7, 8])          # the living replica is still followed
            wait_for(lambda: len(watcher.trees[0]) == 1)
            watcher.settle(quiet=0.2)                          # no error: a death is not one
            watcher.check()
    downs = [e for e in watcher.log.of(Health) if e.state == "down"]
    assert [(e.replica, e.url) for e in downs] == [(1, replicas[1].server.url)]
    assert not [c for c in caught if "stopped answering" in str(c.message)]
    assert watcher.watchers[1].gone is not None and watcher.watchers[1].error is None
    view = ClusterView(watcher.log)
    assert view.trees[1].readout.state == "down" and view.trees[0].readout.state == "up"


def test_garbage_on_a_replicas_socket_is_still_an_error_of_the_whole_watcher(replicas):
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        with ClusterWatcher([r.server for r in replicas], interval=0.1) as watcher:
            replicas[0].pub.send_multipart([b"", b"\x00" * 8, b"\xc1 garbage"])
            wait_for(lambda: watcher.watchers[0].error is not None)
            with pytest.raises(EventStreamError, match="not msgpack"):
                watcher.settle(quiet=0.1)
    assert watcher.down == []


def test_a_replica_that_does_not_answer_at_the_start_stops_everything(replicas):
    replicas[1].die()
    watcher = ClusterWatcher([r.server for r in replicas], interval=0.1)
    with pytest.raises(Exception, match="replica 1 of the cluster"):
        watcher.start()
    assert all(w._thread is None or not w._thread.is_alive() for w in watcher.watchers)


def test_bad_arguments_name_themselves(replicas):
    with pytest.raises(TypeError, match="a Cluster"):
        ClusterWatcher([])
    with pytest.raises(ValueError, match="replica must be"):
        Watcher(replicas[0].server, replica=-1)
    watcher = ClusterWatcher([r.server for r in replicas])
    with pytest.raises(ValueError, match="0 .. 1"):
        watcher.routed(0, 2, "round_robin")


def test_a_watcher_alone_stamps_nothing_as_before(replicas):
    with Watcher(replicas[0].server, interval=0.1) as w:
        replicas[0].store(1, None, [1, 2, 3, 4])
        wait_for(lambda: len(w.tree) == 1)
    assert all(e.replica is None for e in w.log.of(Insert, Evict, Counters))


# -- two real replicas --------------------------------------------------------------------------------------------

def test_two_real_replicas_are_watched_and_one_killed(tmp_path):
    from teachspec.serving import ServerError, vllm_python
    from teachspec.serving.cluster import router_binary, start_cluster

    try:
        vllm_python()
        router_binary()
    except ServerError as e:
        if "1" in (os.environ.get("TEACHSPEC_REQUIRE_VLLM"), os.environ.get("TEACHSPEC_REQUIRE_ROUTER")):
            raise  # as in CI: a missing vLLM or router is a failure there, not a skip
        pytest.skip(str(e).splitlines()[0])
    with start_cluster("tiny", replicas=2, policy="round_robin", kv_blocks=40) as cluster, \
            ClusterWatcher(cluster) as watcher:
        cluster.kill(1)
        wait_for(lambda: watcher.down == [1], timeout=30)
        watcher.settle()
    assert [e.replica for e in watcher.log.of(Health) if e.state == "down"] == [1]
