"""Re-record the traces that ship beside the notebooks, so a lecturer can step through every demo with no model.

    teachspec traces [--pair tiny] [--out traces]        # from a checkout: --out notebooks/traces

Each trace is an `EventLog` saved with `EventLog.save`; a notebook replays one with

    SpeculationView(EventLog.load("traces/speculation.jsonl"))      or RadixTreeView(...)

The recordings are seeded, so re-recording with the same pair and library versions gives the same events (the
timestamps differ). `vllm_blocks` and `vllm_batching` are recorded from a vLLM server (teachspec.serving) and need
vLLM installed (TEACHSPEC_VLLM_PYTHON names its Python); without it, or with a pair other than the bundled one that
the server serves, they are skipped with a message and the other traces are recorded as usual. `vllm_batching` is a
timing: its events are the same requests each time, its times are the machine's, and its header says which machine
and when (`Recorded`). `suffix_cache` is not the engine's log but the suffix tree's own (lecture 14): its nodes and
guesses, which `RadixTreeView` draws as it draws the radix cache. `routing` is simulated; `routing_cluster` is the
same kind of run on two real vLLM replicas behind vllm-router, which it needs too (TEACHSPEC_ROUTER).
"""

from __future__ import annotations

import datetime
import itertools
import json
import tempfile
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from teachspec import workloads
from teachspec.chat import Chat
from teachspec.engine import Engine
from teachspec.events import Counters, EventLog, Finish, RequestStart
from teachspec.program import gen, run
from teachspec.program.examples import agent_requests
from teachspec.speculative.suffix import SuffixCache

PROMPT = "Return a new dictionary"


def speculation(pair) -> EventLog:
    """Lecture 2: one sampled generation with the draft model, k = 4, the top alternatives recorded."""
    engine = Engine(pair, record_top=3, cache_tokens=0)
    engine.generate(PROMPT, max_new_tokens=40, temperature=0.8, k=4, seed=0)
    return engine.events


def radix_shared(pair) -> EventLog:
    """Lecture 5: a shared system prompt, then few-shot questions (one-letter answers), then a three-turn chat, in
    one cache."""
    engine = Engine(pair, cache_tokens=8192)
    system = workloads.system_prompt(n_requests=4, system_tokens=120, question_tokens=20, max_new_tokens=8)
    engine.serve(system.requests, speculate=None, seed=0)
    shots = workloads.few_shot(n_questions=3, shots=3, example_tokens=60, question_tokens=40)
    engine.serve(shots.requests, speculate=None, seed=0)
    chat = Chat(engine, system=workloads.CHAT_SYSTEM)
    for message in ("What does dict.get return?", "And with a default?", "Thanks."):
        chat.say(message, max_new_tokens=12, speculate=None, seed=0)
    return engine.events


def radix_eviction(pair) -> EventLog:
    """Lecture 5: the same kind of traffic through a cache of 400 tokens: LRU leaves go first, locked ones never."""
    engine = Engine(pair, cache_tokens=400)
    shots = workloads.few_shot(n_questions=6, shots=2, example_tokens=80, question_tokens=40)
    engine.serve(shots.requests, speculate=None, seed=0)
    engine.serve(workloads.no_reuse(n_requests=3, prompt_tokens=120, max_new_tokens=8).requests, speculate=None,
                 seed=0)
    return engine.events


def together(pair) -> EventLog:
    """Lecture 7: a system-prompt workload served with speculation and prefix reuse, in lpm order."""
    engine = Engine(pair, cache_tokens=8192)
    system = workloads.system_prompt(n_requests=4, system_tokens=120, question_tokens=20, max_new_tokens=16)
    engine.serve(system.requests, schedule="lpm", speculate="model", k=3, seed=0)
    return engine.events


# -- lecture 12: vLLM on the same requests ----------------------------------------------------------------------

class Unavailable(RuntimeError):
    """A trace that cannot be recorded here (no vLLM, another pair); `record` skips it and says why."""


VLLM_KV_BLOCKS = 16     # the server's KV cache: 16 blocks of 32 tokens, which the requests below overflow
CONTINUATIONS = ("Return a new dictionary", 'The "with" statement is used to',
                 "def read(path):\n    with open(path) as")


# the lecture's three programs, as it writes them: the trace names them, and the lecture finds their runs by name
def continue_text(s, text, max_tokens):
    s += text
    s += gen("continuation", max_tokens=max_tokens)


def answer(s, question):
    s += question
    s += gen("answer", max_tokens=1)


def conversation(s, system_text, messages, max_tokens):
    s += system_text + "\n\n"
    for i, message in enumerate(messages):
        s += "User: " + message + "\nAssistant:"
        s += gen(f"reply_{i}", max_tokens=max_tokens)
        s += "\n"


def vllm_requests(pair) -> list[tuple]:
    """Lecture 12's programs with the arguments of each run, in the order it sends them: [(program, [dict])]."""
    few_shot = workloads.few_shot(n_questions=4, shots=2, example_tokens=60, question_tokens=40, encode=pair)
    chats = workloads.multi_turn(n_conversations=2, turns=3, message_tokens=24, max_new_tokens=12,
                                 system_tokens=100, encode=pair).conversations
    return [(continue_text, [dict(text=t, max_tokens=32) for t in CONTINUATIONS]),
            (answer, [dict(question=r.prompt) for r in few_shot.requests]),
            (conversation, [dict(system_text=c.system, messages=c.messages, max_tokens=12) for c in chats])]


def vllm_blocks(pair) -> EventLog:
    """Lecture 12: vLLM serving the bundled pair (its draft model, k = 3, a KV cache of VLLM_KV_BLOCKS blocks),
    watched: its blocks as Insert and Evict events, its counters, and the programs' steps and requests, for three
    greedy continuations, four few-shot questions and two three-turn chats, sent one at a time (so what the cache
    finds does not depend on timing). Raises Unavailable where vLLM is not installed or the pair is another."""
    from teachspec.serving import RemoteEngine, Watcher, start_vllm

    _need_vllm(pair)
    with tempfile.TemporaryDirectory() as folder, \
            start_vllm("tiny", speculate="model", k=3, kv_blocks=VLLM_KV_BLOCKS, max_model_len=384,
                       workdir=folder) as server, Watcher(server) as watcher:
        remote = RemoteEngine(server, pair, events=watcher.log)
        for program, arguments in vllm_requests(pair):
            for a in arguments:
                run(program, engine=remote, **a)
                watcher.settle()  # each run after the server's events about the last one have arrived
    return watcher.log


def _need_vllm(pair) -> None:
    """Raise Unavailable unless vLLM is installed here and `pair` is the bundled pair, which the server serves."""
    from teachspec.serving import ServerError, vllm_python

    if pair.name != "tiny":
        raise Unavailable(f"the server serves the bundled pair, and this is {pair.name!r}: record it with --pair tiny")
    try:
        vllm_python()
    except ServerError as e:
        why = str(e).splitlines()[0].rstrip(":")
        raise Unavailable(why if "TEACHSPEC_VLLM_PYTHON" in why else why + " (TEACHSPEC_VLLM_PYTHON)") from None


# -- lecture 12: many requests in one step ----------------------------------------------------------------------

BATCH_REQUESTS = 16             # prompts sent in each round (held-out documentation openings)
BATCH_PROMPT_TOKENS = 32        # at most this many tokens each
BATCH_NEW_TOKENS = 32           # tokens written for each, always all of them (ignore_eos)
BATCH_IN_FLIGHT = (1, 2, 4, 8, 16)  # two rounds each: at most this many requests in flight at once
CHECKED = 4                     # requests of the first round sent again at the end: their spread says "busy"


class Recorded(EventLog):
    """An EventLog of timings whose header also says where and when they were measured: `about`, a dict such as
    {"machine": ..., "recorded": "2026-11-20", "vllm": "0.32.0"}. A replayed time means little without them.

    The header is the trace's first line (events.py); `EventLog.load` reads the extra keys without complaint, and
    `Recorded.load` keeps them."""

    def __init__(self, events=None, pair: str | None = None, about: dict | None = None):
        super().__init__(events, pair)
        self.about = dict(about or {})

    def save(self, path: str | Path) -> Path:
        path = super().save(path)
        header, rest = path.read_text(encoding="utf-8").split("\n", 1)
        path.write_text(json.dumps({**json.loads(header), **self.about}) + "\n" + rest, encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Recorded":
        log = EventLog.load(path)  # every line checked, the header's own keys too
        header = json.loads(Path(path).read_text(encoding="utf-8").removeprefix("\ufeff").split("\n", 1)[0])
        about = {key: value for key, value in header.items() if key not in ("format", "version", "pair")}
        return cls(log.events, log.pair, about)


def machine() -> str:
    """This machine in a few words: its processor's name and the CPUs this process may use."""
    import platform

    from teachspec.threads import usable_cpus

    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), name)
    except OSError:
        pass
    cpus = usable_cpus()
    return f"{name}, {cpus} CPU{'s' if cpus != 1 else ''}"


def send_in_flight(server, pair, in_flight=BATCH_IN_FLIGHT) -> Recorded:
    """Lecture 12: the same BATCH_REQUESTS greedy requests sent to `server` twice per entry of `in_flight`, with at
    most that many in flight at once (a thread each), after one request that warms the server up.

    The rounds go in turning order (1, 2, 4, 8, 16, 16, 8, 4, 2, 1), listed in the header's "in_flight": a machine
    that drifts during the run weighs on both ends alike, and since a disturbance only ever slows a round (a round
    of 16 lasts under a second on two cores), the faster of a count's two rounds is its measure.

    Each request is a RequestStart when it is sent and a Finish when its answer is back (`ms` its wall time), so
    the log says how many were in flight at every moment; a Counters event (the server's /metrics) before the
    first round and after each one marks where the rounds end, and gives each round's speculation counters. At the
    end the first CHECKED requests go once more, one at a time and unrecorded: when they take much longer or
    shorter than in the first round, the machine moved under the measurement, and the header's "busy" says so."""
    from teachspec.busy import Watch, warning
    from teachspec.serving import RemoteEngine, metrics

    remote = RemoteEngine(server, pair)
    work = workloads.docs_completion(BATCH_REQUESTS, prompt_tokens=BATCH_PROMPT_TOKENS,
                                     max_new_tokens=BATCH_NEW_TOKENS)
    prompts = [pair.encode(r.prompt) for r in work.requests]
    with urllib.request.urlopen(server.url + "/version", timeout=10) as r:
        version = json.load(r).get("version", "?")
    order = list(in_flight) + list(in_flight)[::-1]
    log = Recorded(pair=pair.name, about={"machine": machine(), "recorded": datetime.date.today().isoformat(),
                                          "vllm": version, "speculate": server.speculate, "k": server.k,
                                          "in_flight": order})
    ids, lock = itertools.count(1), threading.Lock()  # the threads share the log: one event at a time

    def send(prompt: list[int], record: bool = True) -> None:
        if record:
            with lock:
                request = next(ids)
                sent = log.emit(RequestStart, request=request, prompt_tokens=len(prompt), prompt=list(prompt)).t
        out = remote.complete({"prompt": prompt, "max_tokens": BATCH_NEW_TOKENS, "temperature": 0.0,
                               "ignore_eos": True})
        if record:
            with lock:
                log.emit(Finish, request=request, new_tokens=int(out["usage"]["completion_tokens"]),
                         reason="length", ms=(log.now() - sent) * 1e3)

    def counters() -> None:
        log.emit(Counters, source=server.url, **metrics.counters(metrics.read(server.url)))

    def alone(few: list[list[int]]) -> float:
        """Seconds to send `few` one at a time, unrecorded."""
        t0 = log.now()
        for prompt in few:
            send(prompt, record=False)
        return log.now() - t0

    send(prompts[0], record=False)  # the first request pays for the server's warm-up: not a round's
    with Watch() as watch:  # was the machine busy meanwhile? (teachspec/busy.py)
        counters()
        for n in order:
            with ThreadPoolExecutor(max_workers=n) as pool:
                list(pool.map(send, prompts))
            counters()
        # the machine's check: the first CHECKED requests again, one at a time, against their time in the first
        # round. The client mostly waits on the server, so its own threads' wait for a CPU says little here.
        first = [e for e in log.events if isinstance(e, Finish)][:CHECKED]
        again = alone(prompts[:CHECKED])
    watch.check.repeats([sum(e.ms for e in first) / 1e3, again])
    log.about["busy"] = warning(watch.check.as_dict())  # "" on a quiet machine
    return log


def vllm_batching(pair) -> Recorded:
    """Lecture 12: vLLM serving the bundled pair (its draft model, k = 3, vLLM's own KV-cache size) the same
    BATCH_REQUESTS requests with 1, 2, 4, 8 and 16 of them in flight (`send_in_flight`): a timing, so its header
    names the machine and the date. Raises Unavailable where vLLM is not installed or the pair is another."""
    from teachspec.serving import start_vllm

    _need_vllm(pair)
    with tempfile.TemporaryDirectory() as folder, \
            start_vllm("tiny", speculate="model", k=3, max_model_len=256, workdir=folder) as server:
        return send_in_flight(server, pair)


# -- lecture 14: the suffix cache ----------------------------------------------------------------------------------

SUFFIX_DEPTH = 6        # the recorded tree's paths hold at most 6 tokens (the engine's default is 24): a picture
SUFFIX_NEW_TOKENS = 24  # of a few dozen nodes, each path readable as a phrase


def suffix_cache(pair) -> EventLog:
    """Lecture 14: the engine's tree of earlier outputs (`SuffixCache`) while speculate="suffix" writes an agent's
    three branches of thought on one problem, greedy, one after another: a node made for every suffix of what they
    wrote (Insert, one token each) and the guess of every step (Match: the matched suffix's path and the branch it
    proposes). Only the suffix tree's events: the engine's radix cache records into its own log, and one view of
    both would draw two trees as one."""
    engine = Engine(pair)
    log = EventLog(pair=pair.name)
    engine.learnt["suffix"] = SuffixCache(depth=SUFFIX_DEPTH, events=log)  # before the first request: it records
    branches = [job for job in agent_requests(1, SUFFIX_NEW_TOKENS, encode=pair).requests
                if job.group.endswith("tree of thought")]
    for job in branches:
        engine.generate(job.prompt, job.max_new_tokens, speculate="suffix", k=16)
    return log


# -- routing: many replicas behind a router ---------------------------------------------------------------------------

ROUTING_KILL = (1, 24)  # replica 1 dies when request 24 (of tenants()' 48) arrives: half-way, its caches warm


def routing(pair) -> EventLog:
    """The routing lecture: tenants()' requests through two replicas behind cache_aware routing, simulated
    (teachspec.routing.simulate, no server): every replica's cache events stamped with its replica, a Route per
    request, and replica 1 killed half-way (a Health "down"), so that ClusterView shows its tenants move and the hit
    rate fall and recover."""
    from teachspec.routing.simulate import arrivals, simulate

    log = EventLog(pair=pair.name)
    simulate(arrivals(workloads.tenants(encode=pair), encode=pair), replicas=2, policy="cache_aware",
             kill=ROUTING_KILL, events=log)
    return log


CLUSTER_KILL = 24       # the real cluster's replica 1 is killed once 24 of tenants()' 48 requests are answered
CLUSTER_IN_FLIGHT = 4


def routing_cluster(pair) -> Recorded:
    """The routing lecture, for real: tenants()' requests through two vLLM replicas (64 KV blocks each, a core
    each) behind vllm-router's cache_aware, watched (ClusterWatcher): every replica's blocks and counters, a Route
    for each request once its answer says which replica wrote it, and replica 1 killed once CLUSTER_KILL requests
    are answered (a Health "down"). CLUSTER_IN_FLIGHT requests in flight, in order (client.run_all's spacing),
    unstreamed, as token ids, one retry for a reply the kill cut. Its header names the machine and the date.
    Raises Unavailable where vLLM or its router is not installed, or the pair is another."""
    from teachspec.routing.simulate import arrivals
    from teachspec.serving import Ask, ClusterWatcher, ServerError, run_all, start_cluster
    from teachspec.serving.cluster import router_binary

    _need_vllm(pair)
    try:
        router_binary()
    except ServerError as e:
        raise Unavailable(str(e).splitlines()[0]) from None
    requests = arrivals(workloads.tenants(encode=pair), encode=pair)
    asks = [Ask(f"r{a.id}", a.tokens, a.max_new_tokens, a.key or None, stream=False) for a in requests]
    answered = []
    with start_cluster("tiny", replicas=2, policy="cache_aware", kv_blocks=64) as cluster, \
            ClusterWatcher(cluster) as watcher:

        def on_result(i: int, result) -> None:
            if not isinstance(result, Exception):
                a = requests[i]
                watcher.routed(a.id, cluster.routes([result])[result.request_id], "cache_aware", a.key,
                               len(a.tokens))
            answered.append(i)
            if len(answered) == CLUSTER_KILL:
                cluster.kill(1)

        results = run_all(cluster.url, asks, CLUSTER_IN_FLIGHT, retries=1, spacing=0.01, on_result=on_result)
        watcher.settle()
    failed = [ask.request_id for ask, r in zip(asks, results) if isinstance(r, Exception)]
    if failed:
        raise RuntimeError(f"requests {failed} had no answer: the trace would not be the whole run")
    return Recorded(watcher.log.events, pair.name, about={"machine": machine(),
                                                           "recorded": datetime.date.today().isoformat(),
                                                           "router": "vllm-router 0.1.17, cache_aware",
                                                           "killed": {"replica": 1, "after": CLUSTER_KILL}})


TRACES = {"speculation": speculation, "radix_shared": radix_shared, "radix_eviction": radix_eviction,
          "together": together, "vllm_blocks": vllm_blocks, "vllm_batching": vllm_batching,
          "suffix_cache": suffix_cache, "routing": routing, "routing_cluster": routing_cluster}


def record(pair, out: Path) -> dict[str, Path]:
    """Record every trace with `pair` into `out`; returns name -> path. A trace that cannot be recorded here
    (`Unavailable`: the vLLM traces without vLLM) is skipped with a line that says why, its old file left as it was."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, make in TRACES.items():
        try:
            log = make(pair)
        except Unavailable as e:
            print(f"{name:16s} skipped: {e}")
            continue
        written[name] = log.save(out / f"{name}.jsonl")
    return written


def main(argv: list[str] | None = None) -> None:
    """`python -m teachspec.course.traces ...` is `teachspec traces ...`: the same parser (`teachspec.arguments`)."""
    from teachspec.arguments import run_course

    run_course("traces", command, argv)


def command(args) -> None:
    """`teachspec traces`, its arguments parsed (`teachspec.arguments.traces_arguments`)."""
    from teachspec.course.pairs import pick_pair

    if args.threads is not None:
        from teachspec.threads import set_threads

        set_threads(args.threads)
    for name, path in record(pick_pair(args.pair), args.out).items():
        print(f"{name:16s} {path}  ({path.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
