"""The cluster and its client without vLLM: options validated once, the router's command line, broken parts stopped.

Fake processes stand in for a replica that never answers and a router that dies or hangs, and a tiny HTTP server
plays a broken stream: none of these tests needs vLLM or vllm-router.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from teachspec.serving import Ask, Completion, ServerError, VllmServer, complete, router_binary, run_all, \
    start_cluster
from teachspec.serving import cluster as cluster_module
from teachspec.serving.cluster import ROUTER_INSTALL, check_cluster, router_command
from teachspec.serving.launch import check_cpus, server_environment, start_vllm

SILENT = "import socket, time\ns = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen()\ntime.sleep(600)"


# -- validation, once ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, named", [
    ({"replicas": 0}, "replicas must be an int >= 1, got 0"),
    ({"replicas": True}, "got True"),
    ({"policy": "fastest"}, "got 'fastest'"),
    ({"policy": "round_robin", "router_options": {"cache_threshold": 0.5}}, "policy 'round_robin' takes none"),
    ({"router_options": {"threshold": 0.5}}, "no 'threshold'"),
    # the knobs' values are checked by the simulator's CacheAwareConfig, the one place that knows them
    ({"router_options": {"cache_threshold": 1.5}}, "cache_threshold must be in [0, 1] (a fraction"),
    ({"router_options": {"cache_threshold": "0.3"}}, "cache_threshold must be a number, got '0.3'"),
    ({"router_options": {"balance_abs_threshold": 2.5}}, "balance_abs_threshold must be an integer, got 2.5"),
    ({"router_options": {"balance_rel_threshold": 0.5}}, "balance_rel_threshold must be >= 1 (max load over min "
                                                         "load), got 0.5"),
    ({"router_options": {"max_tree_size": "big"}}, "max_tree_size must be an integer, got 'big'"),
])
def test_a_bad_option_is_refused_by_name_before_anything_starts(kwargs, named, monkeypatch):
    monkeypatch.setattr(cluster_module, "start_vllm", lambda *a, **k: pytest.fail("a replica was started"))
    with pytest.raises((ValueError, TypeError), match=re.escape(named)):
        start_cluster("tiny", **{"replicas": 2, "policy": "cache_aware", **kwargs})


def test_each_replica_gets_cores_of_its_own_and_one_is_kept_for_the_rest(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert cluster_module.replica_cores(2) == ["0,1,2,3,4,5,6,7", "8,9,10,11,12,13,14"]  # 15 for servers and router
    assert cluster_module.replica_cores(4) == ["0,1,2,3", "4,5,6,7", "8,9,10,11", "12,13,14"]
    assert cluster_module.replica_cores(1) == [",".join(map(str, range(15)))]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert cluster_module.replica_cores(2) == ["0", "1"]        # no core to keep: one each, as two machines
    assert cluster_module.replica_cores(3) == ["0", "1", "0"]   # more replicas than cores: in turn
    assert cluster_module.replica_cores(1) == ["0"]             # as vLLM itself would: core 1 kept


def test_a_cpu_list_is_checked_against_the_cores_this_process_may_use(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert check_cpus("1") == [1] and check_cpus("0-2") == [0, 1, 2] and check_cpus("0,2-3") == [0, 2, 3]
    for bad in ("", "a", "1-", "-1", "0,,1", " 1", None, 1):
        with pytest.raises(ValueError, match="cpus must list cores as"):
            check_cpus(bad)
    with pytest.raises(ValueError, match=r"cpus='3-5' names cores .* may use \[0, 1, 2, 3\]"):
        check_cpus("3-5")
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    assert server_environment(cpus="2")["VLLM_CPU_OMP_THREADS_BIND"] == "2"
    assert "VLLM_CPU_OMP_THREADS_BIND" not in server_environment()  # None: vLLM's own choice
    with pytest.raises(ValueError, match="cpus="):  # refused before vLLM is looked for or anything starts
        start_vllm("tiny", cpus="7")


def test_router_binary_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setenv("TEACHSPEC_ROUTER", str(tmp_path / "nowhere"))
    with pytest.raises(ServerError, match="TEACHSPEC_ROUTER=.*nowhere.*not an executable") as e:
        router_binary()
    assert ROUTER_INSTALL in str(e.value)
    monkeypatch.delenv("TEACHSPEC_ROUTER")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ServerError, match="not installed") as e:
        router_binary()
    assert "pip install vllm-router==0.1.17" in str(e.value)


def test_the_router_command_line_carries_the_policy_its_options_and_the_health_settings(tmp_path):
    flags = check_cluster(2, "cache_aware", {"cache_threshold": 0.5, "balance_abs_threshold": 4})
    cmd = router_command("vllm-router", 8000, ["http://127.0.0.1:1", "http://127.0.0.1:2"], "cache_aware", flags,
                         9000, tmp_path)
    line = " ".join(cmd)
    assert "--host 127.0.0.1 --port 8000 --worker-urls http://127.0.0.1:1 http://127.0.0.1:2 --policy cache_aware" \
        in line
    assert "--cache-threshold 0.5" in line and "--balance-abs-threshold 4" in line
    assert f"--prometheus-port 9000 --log-dir {tmp_path}" in line
    assert "--health-check-interval-secs 1" in line and "--retry-max-retries 4" in line
    assert "--api-key" not in line  # a key on a command line is readable by every user


# -- broken parts: everything started is stopped ---------------------------------------------------------------

@pytest.fixture
def fake_replicas(monkeypatch, tmp_path):
    """start_vllm replaced by processes that listen and never answer; yields the list of them as they start."""
    started: list[VllmServer] = []

    def fake(pair, *, workdir, **kwargs):
        if Path(workdir).name == "replica-1" and os.environ.get("FAKE_REPLICA_1") == "fails":
            raise ServerError("the vLLM server exited with status 1 before it answered: out of memory")
        port = cluster_module.free_port()
        process = subprocess.Popen([sys.executable, "-c", SILENT.format(port=port)], start_new_session=True)
        server = VllmServer(f"http://127.0.0.1:{port}", "", "", process, str(workdir), None, 3, 32,
                            Path(workdir) / "server.log")
        started.append(server)
        return server

    monkeypatch.setattr(cluster_module, "start_vllm", fake)
    yield started
    for server in started:
        server.stop()


def fake_router(tmp_path: Path, body: str) -> str:
    script = tmp_path / "vllm-router"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


def test_a_router_that_dies_is_named_with_its_log_and_the_replicas_are_stopped(fake_replicas, monkeypatch,
                                                                               tmp_path):
    monkeypatch.setenv("TEACHSPEC_ROUTER", fake_router(tmp_path, "echo 'error: no such policy' >&2; exit 3"))
    with pytest.raises(ServerError, match=r"router exited with status 3(.|\n)*no such policy"):
        start_cluster("tiny", replicas=2, policy="round_robin", workdir=tmp_path / "c")
    assert len(fake_replicas) == 2 and not any(server.alive() for server in fake_replicas)


def test_replicas_that_never_answer_leave_the_router_unready_and_all_is_stopped(fake_replicas, monkeypatch,
                                                                                tmp_path):
    monkeypatch.setenv("TEACHSPEC_ROUTER", fake_router(tmp_path, "echo waiting for workers; exec sleep 600"))
    monkeypatch.setattr(cluster_module, "ROUTER_START", 2.0)
    routers = []
    real_popen = subprocess.Popen
    monkeypatch.setattr(cluster_module.subprocess, "Popen",
                        lambda *a, **k: routers.append(real_popen(*a, **k)) or routers[-1])
    with pytest.raises(ServerError, match=r"did not report its 2 replicas healthy(.|\n)*waiting for workers"):
        start_cluster("tiny", replicas=2, policy="round_robin", workdir=tmp_path / "c")
    assert routers and routers[0].poll() is not None
    assert not any(server.alive() for server in fake_replicas)


def test_a_replica_that_fails_to_start_is_named_and_the_others_are_stopped(fake_replicas, monkeypatch, tmp_path):
    monkeypatch.setenv("TEACHSPEC_ROUTER", fake_router(tmp_path, "exit 0"))
    monkeypatch.setenv("FAKE_REPLICA_1", "fails")
    with pytest.raises(ServerError, match="replica 1 of the cluster did not start: .*out of memory"):
        start_cluster("tiny", replicas=2, policy="round_robin", workdir=tmp_path / "c")
    assert len(fake_replicas) == 1 and not fake_replicas[0].alive()


# -- the client against a broken stream ------------------------------------------------------------------------

def event(model="m", text="a", ids=(7,), **extra) -> bytes:
    choice = {"index": 0, "text": text, "token_ids": list(ids), "finish_reason": None}
    return b"data: " + json.dumps({"id": "cmpl-x", "model": model, "choices": [choice], **extra}).encode() + b"\n\n"


USAGE = b'data: {"model": "m", "choices": [], "usage": {"prompt_tokens": 5, ' \
        b'"prompt_tokens_details": {"cached_tokens": 2}}}\n\n'
STREAMS = {  # request id -> what the server sends, piece by piece (a float is a pause)
    "good": [event(), 0.05, event(text="b", ids=(8,)), USAGE, b"data: [DONE]\n\n"],
    "cut": [event(), event(text="b", ids=(8,))],
    "garbled": [b"data: {not json\n\n"],
    "overcached": [event(), USAGE.replace(b'"cached_tokens": 2', b'"cached_tokens": 9'), b"data: [DONE]\n\n"],
    "mixed": [event(), event(model="other"), USAGE, b"data: [DONE]\n\n"],
    "trickle": [event()] + [1.0, b": still here\n"] * 10,
}


@pytest.fixture(scope="module")
def broken():
    """A server playing a broken one: each request id gets its stream from STREAMS, then the connection closes."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            rid = self.headers["X-Request-Id"]
            seen.append(rid)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for piece in STREAMS[rid.split("-")[0]]:
                if isinstance(piece, float):
                    time.sleep(piece)
                else:
                    self.wfile.write(piece)
                    self.wfile.flush()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()


def test_a_whole_stream_is_one_completion_with_its_time_to_first_token(broken):
    out = complete(broken[0], "hi", 2, request_id="good-1", session="tenant-a")
    assert out == Completion("good-1", "ab", [7, 8], 5, 2, out.ttft_s, out.total_s, "m", None)
    assert 0 < out.ttft_s < out.total_s and out.total_s >= 0.05


WHOLE = {"model": "m", "choices": [{"text": "ab", "token_ids": [7, 8], "finish_reason": "length"}],
         "usage": {"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 2}}}
REPLIES = {"whole": (200, WHOLE), "overcached": (200, {**WHOLE, "usage": {"prompt_tokens": 5, "prompt_tokens_details":
                                                                          {"cached_tokens": 9}}}),
           "refused": (500, {"error": "the engine died"})}


@pytest.fixture(scope="module")
def unstreamed():
    """A server that answers each request id at once with one JSON reply from REPLIES, and keeps what it was sent."""
    bodies: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            status, reply = REPLIES[self.headers["X-Request-Id"].split("-")[0]]
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", bodies
    server.shutdown()


def test_an_unstreamed_reply_is_one_completion_without_a_time_to_first_token(unstreamed):
    url, bodies = unstreamed
    out = complete(url, [1, 2, 3, 4, 5], 2, request_id="whole-1", stream=False)
    assert out == Completion("whole-1", "ab", [7, 8], 5, 2, None, out.total_s, "m", "length")
    assert bodies[-1]["stream"] is False and "stream_options" not in bodies[-1] and bodies[-1]["prompt"] == [1, 2, 3,
                                                                                                          4, 5]
    with pytest.raises(ServerError, match="cached_tokens from 0 to it"):
        complete(url, "hi", 2, request_id="overcached-1", stream=False)
    with pytest.raises(ServerError, match=r"refused the request \(HTTP 500\): .*the engine died"):
        complete(url, "hi", 2, request_id="refused-1", stream=False)


@pytest.mark.parametrize("rid, said", [
    ("cut-1", "closed the stream before its end"),
    ("garbled-1", "not JSON"),
    ("overcached-1", "cached_tokens from 0 to it"),
    ("mixed-1", "model is \"other\""),
])
def test_a_broken_stream_is_a_server_error_that_names_the_server(broken, rid, said):
    with pytest.raises(ServerError, match=said) as e:
        complete(broken[0], "hi", 2, request_id=rid)
    assert broken[0] in str(e.value)


def test_a_trickling_stream_is_cut_at_the_deadline(broken):
    start = time.monotonic()
    with pytest.raises(ServerError, match="within the 1.5 s allowed"):
        complete(broken[0], "hi", 2, request_id="trickle-1", timeout=1.5)
    assert time.monotonic() - start < 3


def test_spacing_sends_the_requests_in_the_order_asked(broken):
    url, seen = broken
    seen.clear()  # 8 at once, each held 0.05 s by the server: without spacing they race to it
    start = time.monotonic()
    results = run_all(url, [Ask(f"good-{i}", "hi", 2) for i in range(16)], concurrency=8, deadline=30, spacing=0.02)
    assert all(isinstance(r, Completion) for r in results)
    assert seen == [f"good-{i}" for i in range(16)] and time.monotonic() - start >= 15 * 0.02
    for bad in (-0.1, 2, True, "0.1"):
        with pytest.raises(ValueError, match="spacing must be a number of seconds from 0 to 1"):
            run_all(url, [Ask("good-0", "hi", 2)], spacing=bad)


def test_run_all_answers_in_order_one_result_per_request_and_retries_only_failures(broken):
    url, seen = broken
    asks = [Ask(f"good-{i}", "hi", 2) for i in range(5)] + [Ask("cut-9", "hi", 2)]
    seen.clear()
    results = run_all(url, asks, concurrency=3, deadline=30, retries=1)
    assert [r.request_id for r in results[:5]] == [f"good-{i}" for i in range(5)]
    assert isinstance(results[5], ServerError) and "cut-9" not in [getattr(r, "request_id", "") for r in results]
    assert sorted(seen) == sorted([f"good-{i}" for i in range(5)] + ["cut-9", "cut-9"])  # sent twice, failed once
    with pytest.raises(ValueError, match=r"unique.*\['good-0'\]"):
        run_all(url, [Ask("good-0", "hi", 2)] * 2)
