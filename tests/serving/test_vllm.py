"""teachspec against a real vLLM server on 127.0.0.1: the same tokens, the same acceptance, the cache it reports.

Each server is started once per module with `start_vllm` (about 30 s on 2 CPUs) and stopped by its pid. vLLM runs
where `teachspec.serving.vllm_python` finds it (CI: its own cached environment, TEACHSPEC_VLLM_PYTHON). Without
vLLM these tests are skipped, unless TEACHSPEC_REQUIRE_VLLM=1 (as in CI), which makes a missing vLLM a failure.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import warnings

import pytest
import zmq

import teachspec
from teachspec import workloads
from teachspec.events import Evict
from teachspec.program import run_batch
from teachspec.program.examples import EXAMPLES
from teachspec.serving import EventStreamError, RemoteEngine, ServerError, Watcher, metrics, start_vllm, vllm_python
from teachspec.speculative.policies import Constant
from teachspec.widgets import RadixTreeView
from teachspec.widgets.measure import steps

try:
    vllm_python()
    MISSING = None
except ServerError as e:
    MISSING = str(e)
if MISSING and os.environ.get("TEACHSPEC_REQUIRE_VLLM") == "1":
    raise RuntimeError(f"TEACHSPEC_REQUIRE_VLLM=1 but vLLM cannot be found: {MISSING}")
pytestmark = [pytest.mark.vllm, pytest.mark.skipif(MISSING is not None, reason="vLLM is not installed")]

N_PROMPTS, NEW_TOKENS, K = 16, 64, 3
BLOCK = 32


@pytest.fixture(scope="module")
def pair():
    return teachspec.load_pair("tiny")


@pytest.fixture(scope="module")
def prompts(pair):
    work = workloads.docs_completion(N_PROMPTS, prompt_tokens=48, max_new_tokens=NEW_TOKENS)
    return [pair.encode(r.prompt) for r in work.requests]


@pytest.fixture(scope="module")
def plain(pair, prompts):
    """teachspec's own greedy decoding of every prompt: the reference."""
    engine = teachspec.Engine(pair, cache_tokens=0)
    return [engine.generate(ids, NEW_TOKENS, speculate=None).tokens for ids in prompts]


class Served:
    """A server, its watcher and a RemoteEngine, remembering every sequence it served (prompt + new tokens)."""

    def __init__(self, server, pair):
        self.server = server
        self.watcher = Watcher(server).start()
        self.remote = RemoteEngine(server, pair, events=self.watcher.log)
        self.sequences: list[list[int]] = []

    def generate(self, ids, n=NEW_TOKENS, **kw):
        out = self.remote.generate(ids, n, **kw)
        self.sequences.append(list(ids) + out.tokens)
        return out

    def close(self):
        self.watcher.stop()
        self.server.stop()


@pytest.fixture(scope="module")
def servers(pair):
    """start(speculate): that server, started on first use and kept for the module (three fit in memory here)."""
    started: dict = {}

    def start(speculate):
        if speculate not in started:
            started[speculate] = Served(start_vllm("tiny", speculate=speculate, k=K), pair)
        return started[speculate]

    yield start
    for served in started.values():
        served.close()


def full_block_prefixes(sequences: list[list[int]]) -> set[tuple[int, ...]]:
    """Every chain of full blocks a server computed KV for: a sequence's last token is sampled, never fed back."""
    return {tuple(seq[:j * BLOCK]) for seq in sequences for j in range(1, (len(seq) - 1) // BLOCK + 1)}


def node_paths(tree) -> set[tuple[int, ...]]:
    out = set()
    for node in tree.blocks:
        path, n = [], node
        while n:
            path = tree.blocks[n].tokens + path
            n = tree.blocks[n].parent
        out.add(tuple(path))
    return out


def held(view: RadixTreeView) -> set[int]:
    """The blocks a view's tree holds now (drawn or folded into a "+N" stub): all but the root and the one fading."""
    fading = {i["id"] for i in view.snapshot().items.values() if i.get("mark") == "evicted"}
    return {n for n in view.nodes if n} - fading


# -- the same tokens -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("speculate", [None, "model", "ngram"], ids=["plain", "draft-model", "prompt-lookup"])
def test_greedy_tokens_are_teachspecs_token_for_token(servers, speculate, prompts, plain):
    served = servers(speculate)
    before = served.watcher.settle().counters
    outs = [served.generate(ids).tokens for ids in prompts]
    mismatched = [i for i, (a, b) in enumerate(zip(outs, plain)) if a != b]
    assert not mismatched, f"prompts {mismatched} differ from teachspec's plain greedy decoding"
    assert all(len(o) == NEW_TOKENS for o in outs)
    spent = metrics.difference(served.watcher.settle().counters, before)
    if served.server.speculate is not None:  # the server really guessed, and kept the output the same
        assert spent["drafts"] > 0 and spent["accepted"] > 0


class AfterPrefill(Constant):
    """vLLM's schedule for a draft model: the prefill pass samples the first token with nothing guessed, and
    every pass after it checks k guesses (teachspec's first step guesses too; its other steps are the same)."""

    def __init__(self, k: int):
        super().__init__(k)
        self.prefilled = False

    def next_k(self) -> int:
        k, self.prefilled = (self.k if self.prefilled else 0), True
        return k


def test_acceptance_per_position_is_teachspecs_at_the_same_k(servers, pair, prompts):
    """Greedy, the same draft model, k = 3: both engines guess the draft's argmax and keep the target's argmax,
    so on the same schedule of steps every guess gets the same verdict, and the counts are equal.

    The schedules differ in two places, which the test aligns: vLLM's prefill pass guesses nothing (teachspec's
    first step guesses k; AfterPrefill does as vLLM does), and vLLM's last step still guesses k and drops what
    overshoots max_tokens (teachspec guesses at most the tokens left; here it is given room for k more and its
    steps that start at or after token 64, which vLLM never runs, are left out)."""
    served = servers("model")
    engine = teachspec.Engine(pair, cache_tokens=0)
    ours, drafts = [0] * K, 0
    for ids in prompts:
        engine.events.clear()
        engine.generate(ids, NEW_TOKENS + K, speculate="model", k=AfterPrefill(K))
        for step in steps(engine.events):
            if step.drafted and step.first - len(ids) < NEW_TOKENS:
                drafts += 1
                ours = [n + ok for n, ok in zip(ours, step.accepted_at)]
    before = served.watcher.settle().counters
    for ids in prompts:
        served.generate(ids)
    theirs = metrics.difference(served.watcher.settle().counters, before)
    assert (theirs["drafts"], theirs["accepted_per_position"]) == (drafts, ours)
    s = metrics.stats(theirs)
    assert 0.5 < s.alpha <= 1 and s.acceptance_per_position == sorted(s.acceptance_per_position, reverse=True)


# -- the cache it reports ------------------------------------------------------------------------------------------

def test_the_tree_from_kv_events_is_the_full_blocks_of_what_was_served(servers, prompts):
    served = servers(None)
    shared = prompts[0] + prompts[1][:40]            # two requests that share a prefix that ends mid-block
    served.generate(prompts[0], 16)
    served.generate(shared, 16)
    served.watcher.settle()
    assert node_paths(served.watcher.tree) == full_block_prefixes(served.sequences)
    view = RadixTreeView(served.watcher.log)
    assert held(view) == set(served.watcher.tree.blocks)
    # the second request reused whole blocks of the first only: a partial block is never shared
    assert served.watcher.tree.cached_prefix(shared, BLOCK) >= (len(prompts[0]) // BLOCK) * BLOCK


@pytest.fixture(scope="module")
def small(pair):
    """A server whose KV cache holds 24 blocks (768 tokens): a few requests fill it and it evicts."""
    served = Served(start_vllm("tiny", kv_blocks=24, max_model_len=512), pair)
    yield served
    served.close()


def test_with_a_small_cache_evicted_blocks_leave_the_view(small, pair):
    live = RadixTreeView.live(small.watcher.log, decode=pair)  # drawn while vLLM serves, from the watcher's thread
    texts = workloads.no_reuse(8, prompt_tokens=200, max_new_tokens=16).requests
    for r in texts:
        small.generate(pair.encode(r.prompt), 16)
    small.watcher.settle()
    live.detach()
    assert live.frames == RadixTreeView(small.watcher.log, decode=pair).frames
    tree = small.watcher.tree
    assert small.watcher.log.of(Evict), "eight 7-block requests in a 24-block cache must evict"
    assert len(tree) <= 24
    assert node_paths(tree) <= full_block_prefixes(small.sequences)
    assert full_block_prefixes(small.sequences[-1:]) <= node_paths(tree)  # the newest request's blocks stay
    assert held(RadixTreeView(small.watcher.log)) == set(tree.blocks)


def test_garbage_on_the_socket_gives_one_error_and_keeps_the_view(small, tmp_path):
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.bind(f"ipc://{tmp_path}/kv")
    try:
        w = Watcher(small.server.url, f"ipc://{tmp_path}/kv", interval=0.1).start()
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            pub.send_multipart([b"", b"\x00" * 8, b"\xc1\xc1"])
            deadline = time.monotonic() + 10
            while w.error is None and time.monotonic() < deadline:
                time.sleep(0.05)
        assert isinstance(w.error, EventStreamError) and "not msgpack" in str(w.error)
        with pytest.raises(EventStreamError):
            w.settle()
        w.stop()
    finally:
        pub.close(0)
        ctx.term()


def test_a_wrong_port_is_refused_at_once(small):
    from teachspec.serving.launch import free_port
    wrong = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServerError, match=f"cannot watch {wrong}: nothing answers"):
        Watcher(wrong, small.server.events_endpoint).start()


def test_a_killed_server_is_said_once_and_the_view_keeps_what_it_had(small):
    """Run last on this server: it kills it."""
    w = small.watcher
    kept = len(w.log)
    blocks = set(w.tree.blocks)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        os.killpg(small.server.pid, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while w.error is None and time.monotonic() < deadline:
            time.sleep(0.1)
    assert w.error is not None and small.server.url in str(w.error) and "stopped answering" in str(w.error)
    assert [str(c.message) for c in caught if issubclass(c.category, RuntimeWarning)] == [str(w.error)]
    assert len(w.log) == kept and held(RadixTreeView(w.log)) == blocks
    with pytest.raises(ServerError):
        w.settle()


def test_teachspec_serve_starts_a_server_and_ctrl_c_stops_it_by_its_pid():
    """The command a user runs: it prints where the server is; Ctrl-C ends it, and no vLLM process is left."""
    import re
    import subprocess
    import sys
    import urllib.request

    proc = subprocess.Popen([sys.executable, "-m", "teachspec.cli", "serve", "--speculate", "ngram"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, pid = [], None
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not any("Ctrl-C stops it" in line for line in lines):
            line = proc.stdout.readline()
            assert line, "teachspec serve ended early:\n" + "".join(lines)
            lines.append(line)
        text = "".join(lines)
        url = re.search(r"url\s+(http://127\.0\.0\.1:\d+)", text).group(1)
        pid = int(re.search(r"pid\s+(\d+)", text).group(1))
        with urllib.request.urlopen(url + "/health", timeout=10) as r:
            assert r.status == 200
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 130
    except BaseException:
        # the server runs in a session of its own: killing the command would leave it serving, so on a failure
        # ask the command to stop it (its own Ctrl-C), then stop the server's group by its pid if it still runs
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(30)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        raise
    finally:
        if proc.poll() is None:
            proc.kill()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/health", timeout=5)


# -- programs on the server ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(EXAMPLES))
def test_example_programs_give_the_same_variables_on_the_server(servers, pair, name):
    served = servers("model")
    program, arguments, _ = EXAMPLES[name]
    args = arguments()
    local = run_batch(program, args, engine=teachspec.Engine(pair), speculate=None)
    there = run_batch(program, args, engine=served.remote)
    assert [s.variables for s in there] == [s.variables for s in local]
    assert [s.text for s in there] == [s.text for s in local]
