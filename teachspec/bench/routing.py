"""`teachspec bench routing`: one multi-tenant workload through every routing policy, on real replicas.

RadixAttention saves a prefill only on the replica that holds the prefix, so with N replicas behind a router the
policy decides the hit rate (teachspec/routing/__init__.py names the policies). This bench sends the same
requests (`workloads.tenants`: tenants of Zipf-distributed sizes, each with its own long system prompt, few-shot
questions and multi-turn chats) through each policy, and for each:

    a fresh cluster       `start_cluster(pair, replicas, policy)`: N vLLM replicas behind vllm-router, so nothing
                          cached by one policy serves the next
    warm up               each replica once, directly (not through the router, whose counters, trees and ring stay
                          the policy's own) on a prompt shorter than a block, so nothing is cached by it
    the workload          every request in the workload's order, `concurrency` in flight (a closed loop:
                          `client.run_all`), each with its tenant as the session key (x-session-id) and its
                          prompt as token ids (below), not streamed: vllm-router 0.1.17 counts a request as its
                          replica's load only until the reply begins, so streamed requests leave every load near 0
                          and cache_aware sends every new tenant to the first replica (measured: 9 of 10 tenants on
                          one replica streamed, 6 and 4 not)
    /metrics              each replica's prefix-cache counters read before and after; the differences are this
                          policy's (vLLM counts prompt tokens looked up, `queries`, and found cached, `hits`)

and reports

    hit rate              hits / queries, summed over the replicas
    computed              queries - hits: the prompt tokens the replicas had to compute
    throughput            generated tokens / the workload's wall seconds
    TTFT p50, p99         time to the first token as the replicas counted it (their vllm:time_to_first_token_seconds
                          histograms, before and after, as Prometheus' histogram_quantile estimates a quantile)
    balance               the most loaded replica's requests over the mean (1.0: even; N: all on one), counted by
                          the replicas themselves (vllm:request_success)
    identical             every greedy output token for token teachspec's own (an Engine, plain decoding, cache off,
                          on the same ids)
    simulated             `routing.simulate` on the same arrivals, replica URLs (consistent_hash hashes them),
                          KV blocks, concurrency and the router's worker order (below): its hit rate beside the
                          real one, and the share of requests it routes where the router did (consistent_hash on
                          every request; round_robin on most, its turns slipping by one where a request overtakes
                          another inside the router; random and power_of_two only by chance)

The router's worker order decides round_robin's turns and every tie of cache_aware's least-loaded choice, and
vllm-router draws it anew each time it starts (routing/policies.py). The client sends its requests SPACING_S apart
at least, so they reach the router in the workload's order (requests a batch answers together would otherwise race,
and round robin would deal them out in the order the race ended), and the worker order is read back from the routes:
the replicas in the order they first answered (request 0's replica first). With the replicas on cores of their own
(`cluster.replica_cores`), the requests in order and the router's order known, the simulator follows the router
closely; before, cache_aware's placement of new tenants varied from run to run (a 31/65 split in one run, 60/36 in
the next).

Prompts travel as token ids, the bundled tokenizer's, because vllm-router 0.1.17's cache_aware matches token ids:
given text, it counts the request as "missing_tokens" (its /metrics, vllm_router_prefix_routing_decisions_total)
and sends it to the least loaded replica, so no tenant sticks anywhere. That the replicas would read the text as the
same ids is checked once per run, on the first cluster, with vLLM's own tokenizer (its /tokenize).

Which replica served a request is read from its reply (`Cluster.routes`). teachspec's reference outputs are
decoded once, before any server starts (a server's OpenMP threads spin a while after each step and would slow it).
Every policy's run is watched (`teachspec.busy`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from teachspec.bench.table import table
from teachspec.busy import Watch, warning
from teachspec.models.pair import BUNDLED, Pair
from teachspec.routing import POLICIES
from teachspec.validate import check_int

BLOCK_SIZE = 32         # vLLM's CPU attention needs blocks of a multiple of 32 tokens (serving/launch.py)
MAX_MODEL_LEN = 1024    # start_vllm's default, which start_cluster keeps: a prompt and its new tokens must fit
SETTLE_S = 15.0         # at most this long for a replica's counters to count every request it answered
WARM_UP = "Warm up"     # shorter than a block: a replica caches none of it
SPACING_S = 0.01        # between two requests' sending (client.run_all): they reach the router in order


@dataclass
class Replica:
    """What one replica's /metrics counted during one policy's run."""
    requests: int       # requests it answered
    queries: int        # prompt tokens it looked up in its prefix cache
    hits: int           # of those, the tokens it found cached


@dataclass
class PolicyRun:
    """One policy's figures (the module docstring says how each is measured)."""
    policy: str
    requests: int                   # requests sent
    failed: int                     # requests that ended in an error, not an answer
    prompt_tokens: int              # the prompts' tokens, counted by the bundled tokenizer
    queries: int                    # prompt tokens the replicas looked up (more than prompt_tokens after a preemption)
    hits: int
    hit_rate: float                 # hits / queries
    computed_tokens: int            # queries - hits
    generated_tokens: int
    seconds: float                  # the workload's wall time
    throughput: float               # generated tokens / seconds
    ttft_p50_s: float
    ttft_p99_s: float
    balance: float                  # most requests on one replica over the mean
    identical: bool                 # every greedy output is teachspec's own
    simulated_hit_rate: float       # routing.simulate's hit rate for the same arrivals
    simulated_balance: float
    routes_agree: float             # share of requests the simulator sent to the replica the router chose
    router_order: list[int] = field(default_factory=list)     # the router's worker order, read from its routes
    per_replica: list[Replica] = field(default_factory=list)
    routes: list[int | None] = field(default_factory=list)     # each request's replica (None: no answer)
    simulated_routes: list[int] = field(default_factory=list)
    cached: list[int | None] = field(default_factory=list)     # each request's prompt tokens its replica had cached
    simulated_cached: list[int] = field(default_factory=list)
    machine: dict = field(default_factory=dict)
    trace: str | None = None        # where its events were saved (--trace)


@dataclass
class RoutingResult:
    pair: str
    replicas: int
    kv_blocks: int
    concurrency: int
    workload: dict                  # tenants()'s arguments, and its description
    router_options: dict
    runs: list[PolicyRun]
    tokenizer_agrees: bool          # vLLM's tokenizer gives every prompt the ids the bundled one gives

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def run(self, policy: str) -> PolicyRun:
        return next(r for r in self.runs if r.policy == policy)


# -- the figures --------------------------------------------------------------------------------------------------

def balance(requests: Sequence[int]) -> float:
    """The most requests one replica served over the mean over every replica, idle ones included: 1.0 is even,
    len(requests) is everything on one replica."""
    total = sum(requests)
    if not requests or total <= 0:
        raise ValueError(f"balance needs at least one replica with a request, got {list(requests)}")
    return max(requests) * len(requests) / total


def hit_rate(replicas: Sequence[Replica]) -> float:
    """Tokens found cached over tokens looked up, summed over the replicas (not a mean of their rates: a replica
    that saw few tokens weighs little)."""
    queries = sum(r.queries for r in replicas)
    return sum(r.hits for r in replicas) / queries if queries else 0.0


def agreement(simulated: Sequence[int], real: dict[int, int]) -> float:
    """The share of the requests the router placed (`real`: arrival id -> replica) that the simulator placed on
    the same replica."""
    if not real:
        return 0.0
    return sum(simulated[i] == r for i, r in real.items()) / len(real)


# -- checking what is asked, once ---------------------------------------------------------------------------------

def check_policies(policies) -> tuple[str, ...]:
    if isinstance(policies, str) or not isinstance(policies, Sequence) or not policies:
        raise ValueError(f"policies must be a non-empty list of names from {list(POLICIES)}, got {policies!r}")
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise ValueError(f"policies {unknown} are not routing policies; use some of {list(POLICIES)}")
    if len(set(policies)) != len(policies):
        raise ValueError(f"policies must be distinct (each runs once, on a cluster of its own), got {list(policies)}")
    return tuple(policies)


def check_kv_blocks(kv_blocks) -> int:
    """A replica's KV cache must hold one request as long as the server allows besides the block vLLM keeps aside,
    or vLLM refuses to start: said here, before anything is decoded or started."""
    from teachspec.serving.launch import least_kv_blocks

    check_int("kv_blocks", kv_blocks, least_kv_blocks(BLOCK_SIZE, MAX_MODEL_LEN))
    return kv_blocks


# -- the bench ----------------------------------------------------------------------------------------------------

def bench(pair: Pair, policies: Sequence[str] = POLICIES, replicas: int = 2, kv_blocks: int = 64,
          concurrency: int = 8, n_tenants: int = 10, n_requests: int = 96, zipf: float = 0.3, max_new_tokens: int = 8,
          seed: int = 0, router_options: dict | None = None, trace: str | Path | None = None,
          progress: bool = True, system_tokens: int = 320) -> RoutingResult:
    """The module docstring's bench on `pair` (a bundled pair: vLLM serves it by name). The defaults put the caches
    under pressure, where routing matters: the tenants' prefixes fit in two replicas' caches together, split by tenant,
    but not in each one (64 blocks of 32 tokens a replica, 10 tenants of about 13 blocks each, besides the blocks of
    the requests running); with room for every tenant everywhere, round_robin loses only each prefix's second
    computation (bench/README.md has both). `router_options` are
    cache_aware's knobs (serving.cluster.CACHE_AWARE), given to its router and its simulation alike. `trace`: each
    policy's events (every replica's blocks and counters, a Route per request: `ClusterWatcher`) saved to that path
    with the policy's name before its suffix (routing.jsonl -> routing.cache_aware.jsonl). Every argument is
    checked before anything is decoded or started."""
    from tqdm.auto import tqdm

    from teachspec import workloads
    from teachspec.routing.simulate import arrivals as arrivals_of
    from teachspec.serving.cluster import check_cluster, router_binary
    from teachspec.serving.launch import vllm_python

    policies = check_policies(policies)
    check_int("concurrency", concurrency, 1)
    check_kv_blocks(kv_blocks)
    if pair.name not in BUNDLED:
        raise ValueError(f"pair must be a bundled pair, which vLLM serves by name ({', '.join(BUNDLED)}), got "
                         f"{pair.name!r}")
    for policy in policies:
        check_cluster(replicas, policy, router_options if policy == "cache_aware" else None)
    work = workloads.tenants(n_tenants, n_requests, zipf, system_tokens=system_tokens, max_new_tokens=max_new_tokens,
                             seed=seed, encode=pair)
    arrivals = arrivals_of(work, pair.encode)
    longest = max(len(a.tokens) + a.max_new_tokens for a in arrivals)
    if longest > MAX_MODEL_LEN:
        raise ValueError(f"the longest request needs {longest} tokens (prompt and new tokens), more than a "
                         f"replica's {MAX_MODEL_LEN}; ask for fewer turns or shorter prompts")
    vllm_python()      # vLLM or its router missing: a ServerError that says how to install it, before anything runs
    router_binary()

    bar = tqdm(total=len(arrivals) * (len(policies) + 1), desc="bench routing", disable=not progress)
    reference = greedy(pair, arrivals, bar)
    agrees = []  # vLLM's tokenizer against the bundled one: asked of the first cluster, before its workload
    runs = [run_policy(pair.name, policy, arrivals, reference, replicas, kv_blocks, concurrency,
                       router_options if policy == "cache_aware" else None, seed, _trace_path(trace, policy), bar,
                       agrees)
            for policy in policies]
    bar.close()
    shape = {"n_tenants": n_tenants, "n_requests": n_requests, "zipf": zipf, "system_tokens": system_tokens,
             "max_new_tokens": max_new_tokens, "seed": seed, "description": work.description}
    return RoutingResult(pair.name, replicas, kv_blocks, concurrency, shape, dict(router_options or {}), runs,
                         all(agrees))


def greedy(pair: Pair, arrivals: Sequence, bar) -> list[list[int]]:
    """teachspec's own greedy output for every request: the reference every policy's outputs must equal."""
    from teachspec.engine import Engine

    engine = Engine(pair, cache_tokens=0)  # no cache: each prompt computed whole, the plainest peer
    out = []
    for a in arrivals:
        out.append(engine.generate(a.tokens, a.max_new_tokens, speculate=None).tokens)
        bar.update()
    return out


def run_policy(pair: str, policy: str, arrivals: Sequence, reference: list[list[int]], replicas: int,
               kv_blocks: int, concurrency: int, router_options: dict | None, seed: int, trace: Path | None,
               bar, agrees: list[bool]) -> PolicyRun:
    """One policy on a fresh cluster: warm up, counters, the workload, counters again; then its simulation. On the
    first cluster (`agrees` still empty) the replicas' tokenizer is checked first, and the answer appended."""
    from teachspec.routing.simulate import simulate
    from teachspec.serving import metrics
    from teachspec.serving.client import Ask, complete, run_all
    from teachspec.serving.cluster import start_cluster
    from teachspec.serving.cluster_watch import ClusterWatcher

    # not streamed: vllm-router counts a request as load only until its reply begins (client.complete says more)
    asks = [Ask(f"{policy}-{a.id}", a.tokens, a.max_new_tokens, a.key or None, stream=False) for a in arrivals]
    with start_cluster(pair, replicas, policy, kv_blocks=kv_blocks, block_size=BLOCK_SIZE,
                       router_options=router_options) as cluster:
        if not agrees:
            agrees.append(tokenizer_agrees(cluster.replica_urls[0], arrivals))
        for i, url in enumerate(cluster.replica_urls):
            complete(url, WARM_UP, 1, request_id=f"{policy}-warm-up-{i}")
        watcher = ClusterWatcher(cluster).start() if trace is not None else None
        try:
            before = [_counters(url) for url in cluster.replica_urls]
            ttft_before = [_ttft(url) for url in cluster.replica_urls]
            watch = Watch()
            t0 = time.perf_counter()
            results = run_all(cluster.url, asks, concurrency, spacing=SPACING_S, on_result=lambda i, r: bar.update())
            seconds = time.perf_counter() - t0
            machine = watch.stop().as_dict()
            answered = sum(not isinstance(r, Exception) for r in results)
            after = _settled(cluster.replica_urls, before, answered)
            ttft = _summed([metrics.histogram_difference(_ttft(url), was)
                            for url, was in zip(cluster.replica_urls, ttft_before)])
            routes = cluster.routes(results)
            if watcher is not None:
                for a in arrivals:
                    if asks[a.id].request_id in routes:
                        watcher.routed(a.id, routes[asks[a.id].request_id], policy, a.key, len(a.tokens))
                watcher.settle()
                watcher.log.save(trace)
        finally:
            if watcher is not None:
                watcher.stop()
        urls = list(cluster.replica_urls)
    per_replica = [Replica(a["requests"] - b["requests"], a["prefix_queries"] - b["prefix_queries"],
                           a["prefix_hits"] - b["prefix_hits"]) for a, b in zip(after, before)]
    done = [r for r in results if not isinstance(r, Exception)]
    ids = {ask.request_id: a.id for ask, a in zip(asks, arrivals)}
    placed = {ids[request]: replica for request, replica in routes.items()}
    order = router_order(placed, replicas)
    sim = simulate(arrivals, replicas, policy, kv_blocks=kv_blocks, block_size=BLOCK_SIZE, concurrency=concurrency,
                   seed=seed, urls=urls, order=order, prompt="tokens", **(router_options or {}))  # it is sent ids
    queries, hits = sum(r.queries for r in per_replica), sum(r.hits for r in per_replica)
    generated = sum(len(r.token_ids) for r in done)
    return PolicyRun(
        policy=policy, requests=len(asks), failed=len(asks) - len(done),
        prompt_tokens=sum(len(a.tokens) for a in arrivals), queries=queries, hits=hits,
        hit_rate=hit_rate(per_replica), computed_tokens=queries - hits, generated_tokens=generated, seconds=seconds,
        throughput=generated / seconds, ttft_p50_s=metrics.quantile(ttft, 0.5),
        ttft_p99_s=metrics.quantile(ttft, 0.99),
        balance=balance([r.requests for r in per_replica]),
        identical=len(done) == len(asks) and all(r.token_ids == reference[ids[r.request_id]] for r in done),
        simulated_hit_rate=sim.hit_rate, simulated_balance=sim.balance,
        routes_agree=agreement(sim.routes, placed), router_order=order, per_replica=per_replica,
        routes=[placed.get(a.id) for a in arrivals], simulated_routes=list(sim.routes),
        cached=[None if isinstance(r, Exception) else r.cached_tokens for r in results],
        simulated_cached=list(sim.cached), machine=machine, trace=str(trace) if trace is not None else None)


def router_order(placed: dict[int, int], replicas: int) -> list[int]:
    """The router's worker order as its routes show it: the replicas in the order they first answered a request
    (by request number), then any that answered none. Round robin's turns go down that list, and so do
    cache_aware's first requests, each new prefix to the first least-loaded replica."""
    order = list(dict.fromkeys(placed[i] for i in sorted(placed)))
    return order + [r for r in range(replicas) if r not in order]


def tokenizer_agrees(url: str, arrivals: Sequence) -> bool:
    """Whether the server at `url` encodes every distinct prompt to the arrival's ids (vLLM's /tokenize, with the
    special tokens a completion's text prompt gets; it computes nothing, so it caches nothing)."""
    from teachspec.serving.http import fetch, json_of
    from teachspec.serving.launch import ServerError

    seen = {}
    for a in arrivals:
        seen.setdefault(a.text, a.tokens)
    for text, tokens in seen.items():
        reply = fetch(url.rstrip("/") + "/tokenize", json.dumps({"prompt": text}).encode(), timeout=30,
                      limit=16 * 1024 * 1024, error=ServerError)
        if reply.status != 200 or json_of(reply, ServerError).get("tokens") != tokens:
            return False
    return True


def _counters(url: str) -> dict:
    from teachspec.serving import metrics

    return metrics.counters(metrics.read(url))


def _ttft(url: str) -> list[tuple[float, float]]:
    from teachspec.serving import metrics

    return metrics.histogram(metrics.read(url), metrics.TTFT)


def _summed(histograms: list[list[tuple[float, float]]]) -> list[tuple[float, float]]:
    """The replicas' histograms as one: their counts added bucket by bucket (vLLM's buckets are the same)."""
    total: dict[float, float] = {}
    for buckets in histograms:
        for bound, count in buckets:
            total[bound] = total.get(bound, 0.0) + count
    return sorted(total.items())


def _settled(urls: list[str], before: list[dict], answered: int) -> list[dict]:
    """Every replica's counters once they count all `answered` requests (vLLM updates /metrics just after a reply
    ends) and read the same twice in a row, waiting at most SETTLE_S; then as they are."""
    deadline = time.monotonic() + SETTLE_S
    last = None
    while True:
        now = [_counters(url) for url in urls]
        counted = sum(a["requests"] - b["requests"] for a, b in zip(now, before))
        if (counted >= answered and now == last) or time.monotonic() > deadline:
            return now
        last = now
        time.sleep(0.2)


def _trace_path(trace: str | Path | None, policy: str) -> Path | None:
    if trace is None:
        return None
    trace = Path(trace)
    return trace.with_name(f"{trace.stem}.{policy}{trace.suffix}")


# -- the report ---------------------------------------------------------------------------------------------------

def markdown(result: RoutingResult) -> str:
    w = result.workload
    lines = [f"pair {result.pair}, {result.replicas} replicas of {result.kv_blocks} KV blocks ({BLOCK_SIZE} tokens "
             f"each) behind vllm-router, a fresh cluster per policy; {w['description']}; {w['max_new_tokens']} new "
             f"tokens a request, greedy, {result.concurrency} in flight" +
             (f"; cache_aware's options {result.router_options}" if result.router_options else ""), ""]
    lines += table(["policy", "hit rate", "simulated hit rate", "prompt tokens computed", "tokens/s",
                    "TTFT p50, ms", "TTFT p99, ms", "balance (max / mean)", "simulated balance",
                    "routes as simulated", "outputs identical to teachspec", "failed"],
                   [[r.policy, f"{r.hit_rate:.1%}", f"{r.simulated_hit_rate:.1%}", f"{r.computed_tokens:,}",
                     f"{r.throughput:.0f}", f"{1e3 * r.ttft_p50_s:.0f}", f"{1e3 * r.ttft_p99_s:.0f}",
                     f"{r.balance:.2f}", f"{r.simulated_balance:.2f}", f"{r.routes_agree:.0%}", r.identical,
                     r.failed] for r in result.runs])
    lines += ["", "per replica (requests, prompt tokens looked up, found cached), from each replica's /metrics, and "
                  "the router's worker order:"]
    lines += [f"  {r.policy}: " + "; ".join(f"replica {i}: {p.requests}, {p.queries:,}, {p.hits:,}"
                                            for i, p in enumerate(r.per_replica)) +
              f"; order {', '.join(map(str, r.router_order))}" for r in result.runs]
    baseline = next((r for r in result.runs if r.policy == "round_robin"), None)
    if baseline is not None:
        lines += [""] + [f"{r.policy} against round_robin: hit rate {r.hit_rate / baseline.hit_rate:.2f}x, prompt "
                         f"tokens computed {baseline.computed_tokens / r.computed_tokens:.2f}x fewer"
                         for r in result.runs if r is not baseline and baseline.hit_rate and r.computed_tokens]
    worst = max(result.runs, key=lambda r: abs(r.hit_rate - r.simulated_hit_rate))
    lines += [f"simulator against the router: at most {100 * abs(worst.hit_rate - worst.simulated_hit_rate):.1f} "
              f"points of hit rate apart ({worst.policy})",
              f"vLLM's tokenizer gives every prompt the bundled tokenizer's ids: {result.tokenizer_agrees}"]
    for r in result.runs:
        if warning(r.machine):
            lines += ["", f"{r.policy}: {warning(r.machine)}"]
        if r.trace:
            lines += [f"{r.policy}'s events: {r.trace}"]
    return "\n".join(lines)
