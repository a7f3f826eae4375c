"""A small cluster on one machine: N vLLM replicas behind vLLM's router, started, watched and stopped by pid.

RadixAttention pays only when a request lands where its prefix is cached (teachspec/routing/). Here that question is
asked of real servers: `start_cluster` starts `replicas` vLLM servers with `start_vllm` (prefix caching and KV events
on, a small KV cache so that eviction happens), then `vllm-router` in front of them with one of POLICIES:

    client --> router http://127.0.0.1:P  --policy cache_aware -+->  replica 0  http://127.0.0.1:A  (its own KV cache)
                                                               +->  replica 1  http://127.0.0.1:B

    with start_cluster("tiny", replicas=2, policy="cache_aware") as cluster:
        results = run_all(cluster.url, asks)          # teachspec/serving/client.py
        cluster.routes(results)                       # {request id: replica index}

Which replica served a request is read from its reply, not from a log. Each replica serves its own copy of the pair
(`FOLDER/replica-i/target`), and vLLM names the model it serves by that folder in every reply's "model" field, so a
reply says which replica wrote it; `complete` keeps it as `Completion.served_by`. Neither log would do: vLLM writes
request ids to its log only with `--enable-log-requests`, and the router logs its choice only when a worker fails.
(So a request through the router names no model: vLLM then serves the one it has.)

What the router is told, and why:

    --worker-startup-check-interval 1     the replicas already answer /health: no 30 s wait for its first look
    --health-check-interval-secs 1        a killed replica is taken out of the rotation within about two seconds
    --health-failure-threshold 2          (one slow /health on a busy CPU is not a death)
    --retry-max-retries 4                 a request refused before its reply began (a dead replica's closed port)
    --retry-initial-backoff-ms 250        is tried again 0.25, 0.5 and 1 s later, by when the health check or
    --retry-backoff-multiplier 2          the circuit breaker has taken the dead replica out: cache_aware would
    --cb-failure-threshold 2              otherwise send the retries of a cached prefix to the same dead replica
    --request-timeout-secs 600            a CPU replica with a queue can take minutes; the client has its own deadline
    --prometheus-port FREE                its metrics on a free port (default 29000): two clusters never clash
    --log-dir FOLDER/router               its log beside the replicas' logs

A router cannot save a request whose reply had begun: once it has passed the first streamed bytes on, it has no way
to start over elsewhere, so a replica killed mid-reply cuts that stream, and the client sees it cut (a ServerError;
`run_all(..., retries=1)` sends it again). The router's own retries cover the rest: requests sent to the dead replica
before the health check noticed are sent on to a live one.

With an API key (`api_key=`, else TEACHSPEC_API_KEY) the replicas ask for it and the router, which has none, passes
each client's `Authorization` header on: a request without the key is refused by the replica it reaches. The key is
never on a command line (start_vllm gives it to vLLM in its environment).

Each replica runs its model on cores of its own (`replica_cores`: on two cores, one each), as separate machines
would. Left to vLLM's CPU build, every replica binds its threads to the same cores, all but one: measured here, two
replicas then took turns on one core, a replica's requests waited seconds behind the other's, and the loads the
router saw (so where cache_aware put a new tenant) changed from run to run; on their own cores the same bench ran
about three times the tokens a second.

Every part runs in a session of its own and is stopped by its pid: the router first (no new request reaches a
stopping replica), then the replicas. A part that does not start stops everything started before it, and the
ServerError names the part and quotes the end of its log.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from teachspec.routing import POLICIES
from teachspec.routing.policies import CacheAwareConfig
from teachspec.serving.http import fetch, json_of
from teachspec.serving.launch import ServerError, VllmServer, free_port, start_vllm

ROUTER_INSTALL = ("Install vLLM's router (a Rust binary in a Python wheel; x86_64 Linux) in an environment of its "
                  "own and point teachspec at it:\n"
                  "    python3 -m venv ~/vllm-router && ~/vllm-router/bin/pip install vllm-router==0.1.17\n"
                  "    export TEACHSPEC_ROUTER=~/vllm-router/bin/vllm-router")

# cache_aware's knobs (teachspec/routing/policies.py, CacheAwareConfig, says what each does and checks their values)
# and the router's flag for each
CACHE_AWARE = {"cache_threshold": "--cache-threshold", "balance_abs_threshold": "--balance-abs-threshold",
               "balance_rel_threshold": "--balance-rel-threshold", "max_tree_size": "--max-tree-size"}
ROUTER_FLAGS = ["--worker-startup-check-interval", "1", "--health-check-interval-secs", "1",
                "--health-failure-threshold", "2", "--retry-max-retries", "4", "--retry-initial-backoff-ms", "250",
                "--retry-backoff-multiplier", "2", "--cb-failure-threshold", "2",
                "--request-timeout-secs", "600", "--log-level", "info"]
ROUTER_START = 60.0  # seconds for the router to answer once its replicas do (it starts in about one)


def router_binary() -> str:
    """vllm-router's command: TEACHSPEC_ROUTER when set, else `vllm-router` on PATH; else a ServerError."""
    named = os.environ.get("TEACHSPEC_ROUTER")
    if named:
        path = Path(named).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ServerError(f"TEACHSPEC_ROUTER={named!r} is not an executable file; it must name the vllm-router "
                              f"command. {ROUTER_INSTALL}")
        return str(path)
    found = shutil.which("vllm-router")
    if found is None:
        raise ServerError(f"vLLM's router (vllm-router) is not installed here. {ROUTER_INSTALL}")
    return found


def check_cluster(replicas: int, policy: str, router_options: dict | None) -> list[str]:
    """Validate the cluster's shape once; returns the router's flags for `router_options` (cache_aware's knobs)."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ValueError(f"replicas must be an int >= 1, got {replicas!r}")
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {list(POLICIES)}, got {policy!r}")
    options = dict(router_options or {})
    if options and policy != "cache_aware":
        raise ValueError(f"router_options are cache_aware's ({', '.join(CACHE_AWARE)}); policy {policy!r} takes "
                         f"none, got {sorted(options)}")
    unknown = sorted(set(options) - set(CACHE_AWARE))
    if unknown:
        raise ValueError(f"router_options has no {', '.join(map(repr, unknown))}; the router's cache_aware takes "
                         f"{', '.join(CACHE_AWARE)}")
    CacheAwareConfig(**options)  # the one check of their values, the simulator's too
    flags = [part for name, value in options.items() for part in (CACHE_AWARE[name], str(value))]
    return flags


def router_command(binary: str, port: int, worker_urls: list[str], policy: str, flags: list[str],
                   prometheus_port: int, log_dir: Path) -> list[str]:
    """The router's command line: on 127.0.0.1 in front of `worker_urls`, with the settings the module explains."""
    return [binary, "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *worker_urls, "--policy", policy,
            *flags, *ROUTER_FLAGS, "--prometheus-port", str(prometheus_port), "--log-dir", str(log_dir)]


def stop_process(process: subprocess.Popen, timeout: float = 20.0) -> None:
    """SIGTERM to the process's group (it was started in a session of its own), then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        if process.poll() is not None:
            return
        try:
            os.killpg(process.pid, sig)
            process.wait(wait)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# ----------------------------------------------------------------------------------------------------------------

@dataclass
class Cluster:
    """A running cluster: the router's URL, its replicas, and every process to stop."""
    url: str                          # the router: http://127.0.0.1:PORT, where clients send requests
    servers: list[VllmServer]         # replica i is servers[i]
    router: subprocess.Popen
    policy: str
    folder: Path                      # replica-i/ (its pair copy, server.log, KV-event sockets), router.log, router/
    replica_urls: list[str] = field(default_factory=list)
    router_log: Path | None = None
    scratch: bool = False             # start_cluster made `folder`: the pair copies are removed once stopped

    def alive(self) -> list[bool]:
        """Whether each replica's process still runs."""
        return [server.alive() for server in self.servers]

    def kill(self, i: int) -> None:
        """SIGKILL replica i's whole process group, as a crash would end it (no goodbye to the router)."""
        server = self.servers[i]
        try:
            os.killpg(server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        server.process.wait(10)

    def routes(self, results: Iterable) -> dict[str, int]:
        """{request id: replica index} for the completions among `results` (failures answered by no replica are
        left out), read from each reply's served model: replica i serves servers[i].model."""
        index = {server.model: i for i, server in enumerate(self.servers)}
        out = {}
        for result in results:
            served = getattr(result, "served_by", None)
            if served is None:
                continue
            if served not in index:
                raise ServerError(f"request {result.request_id!r} was answered by a model named {served!r}, which no "
                                  f"replica of this cluster serves ({sorted(index)})")
            out[result.request_id] = index[served]
        return out

    def stop(self) -> None:
        """Stop the router, then every replica, by pid; the logs stay in `folder`."""
        stop_process(self.router)
        for server in self.servers:
            server.stop()
        if self.scratch:
            for server in self.servers:
                for copy in server.folders.values():
                    shutil.rmtree(copy, ignore_errors=True)

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def replica_cores(replicas: int) -> list[str]:
    """Each replica's share of this process's cores, as start_vllm's `cpus`. Left to itself, vLLM's CPU build runs
    every server's model on the same cores (all but one), so two replicas would take turns on one core where two
    machines would each have their own. Here, with more cores than replicas, the last is kept for the servers' own
    processes, the router and the client (as vLLM keeps one) and the rest are split into consecutive runs (the
    first ones a core longer); otherwise each replica gets one core, in turn."""
    cores = sorted(os.sched_getaffinity(0))
    if replicas >= len(cores):
        return [str(cores[i % len(cores)]) for i in range(replicas)]
    share, extra = divmod(len(cores) - 1, replicas)
    out, start = [], 0
    for i in range(replicas):
        run = cores[start:start + share + (i < extra)]
        start += len(run)
        out.append(",".join(map(str, run)))
    return out


def start_cluster(pair: str | Path = "tiny", replicas: int = 2, policy: str = "cache_aware", *, kv_blocks: int = 64,
                  block_size: int = 32, router_options: dict | None = None, speculate: str | None = None, k: int = 3,
                  timeout: float = 240.0, workdir: str | Path | None = None, api_key: str | None = None) -> Cluster:
    """Start `replicas` vLLM servers on `pair` and vLLM's router in front of them with `policy` (one of POLICIES);
    return once the router answers with every replica healthy.

    kv_blocks, block_size, speculate, k and api_key are each replica's, as start_vllm takes them. router_options are
    cache_aware's knobs (CACHE_AWARE: cache_threshold, balance_abs_threshold, balance_rel_threshold,
    max_tree_size). The replicas start side by side, each within `timeout` seconds; the router within ROUTER_START.
    A part that fails stops every part already started, and a ServerError names it and quotes its log's end (a
    Ctrl-C while replicas start waits for their starts to end, each bounded, and stops them)."""
    flags = check_cluster(replicas, policy, router_options)
    binary = router_binary()  # missing: said before a replica is started
    scratch = workdir is None
    folder = Path(tempfile.mkdtemp(prefix="teachspec-cluster-")) if scratch else Path(workdir)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)

    cores = replica_cores(replicas)

    def replica(i: int) -> VllmServer:
        return start_vllm(pair, speculate=speculate, k=k, block_size=block_size, kv_blocks=kv_blocks,
                          timeout=timeout, workdir=folder / f"replica-{i}", api_key=api_key, cpus=cores[i])

    servers: list[VllmServer] = []
    with ThreadPoolExecutor(replicas, thread_name_prefix="replica") as pool:
        futures = [pool.submit(replica, i) for i in range(replicas)]
        failure = None
        try:
            for i, future in enumerate(futures):
                try:
                    servers.append(future.result())
                except ServerError as e:
                    failure = failure or ServerError(f"replica {i} of the cluster did not start: {e}")
        except BaseException:  # a bad argument or Ctrl-C: the other starts end (bounded), then all stop
            pool.shutdown(wait=True)
            for future in futures:
                if future.done() and future.exception() is None:
                    future.result().stop()
            raise
    if failure is not None:
        for server in servers:
            server.stop()
        raise failure

    port, log = free_port(), folder / "router.log"
    urls = [server.url for server in servers]
    with log.open("wb") as out:
        process = subprocess.Popen(router_command(binary, port, urls, policy, flags, free_port(), folder / "router"),
                                   stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    cluster = Cluster(f"http://127.0.0.1:{port}", servers, process, policy, folder, urls, log, scratch)
    try:
        wait_for_router(cluster, ROUTER_START)
    except BaseException:
        cluster.scratch = False  # keep the folder: the logs the error points at are there
        cluster.stop()
        raise
    return cluster


def wait_for_router(cluster: Cluster, timeout: float) -> None:
    """Until the router's /readiness says every replica is healthy; a router that exits or never says so is a
    ServerError quoting its log."""
    deadline = time.monotonic() + timeout
    said = "nothing"
    while time.monotonic() < deadline:
        if cluster.router.poll() is not None:
            raise ServerError(f"the router exited with status {cluster.router.returncode} before it answered; the "
                              f"end of its output ({cluster.router_log}):\n{tail(cluster.router_log)}")
        try:  # {"status": "ready", "healthy_workers": N, "total_workers": N}
            reply = fetch(cluster.url + "/readiness", timeout=2, limit=64 * 1024, error=ServerError)
            ready = json_of(reply, ServerError) if reply.status == 200 else None
            said = reply.body[:200].decode(errors="replace")
            if isinstance(ready, dict) and ready.get("healthy_workers") == len(cluster.servers):
                return
        except ServerError:
            pass
        time.sleep(0.3)
    raise ServerError(f"the router did not report its {len(cluster.servers)} replicas healthy at {cluster.url}/"
                      f"readiness within {timeout:.0f} s (last: {said}); the end of its output "
                      f"({cluster.router_log}):\n{tail(cluster.router_log)}")
