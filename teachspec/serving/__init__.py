"""The course's two ideas in a real serving engine: vLLM's prefix cache and speculation, watched by teachspec.

    launch.py   start_vllm: a pair in vLLM's folder form, its OpenAI-compatible server on 127.0.0.1 with prefix
                caching, KV events and (if asked) the draft model, prompt lookup or suffix decoding (with
                arctic-inference, ARCTIC_INSTALL); stopped by its pid
    blocks.py   BlockTree: vLLM's cache of full blocks, named by a hash chain, as Insert and Evict events
    watch.py    Watcher: the server's KV-event socket and its /metrics, followed into an EventLog
    cluster_watch.py  ClusterWatcher: every replica's Watcher into one log, each event stamped with its replica;
                a replica that dies is a Health "down", not an error
    metrics.py  its Prometheus counters as alpha, acceptance by position and tokens per target pass
    remote.py   RemoteEngine: gen and select of `teachspec.program` over /v1/completions
    http.py     fetch: one HTTP exchange within a total deadline and a size cap, every failure named
    cluster.py  start_cluster: N replicas behind vLLM's router (a policy of teachspec.routing), stopped by pid;
                Cluster.routes: which replica answered each request
    client.py   complete: one streamed completion (tokens, cached prompt tokens, time to first token);
                run_all: a closed loop of many, one answer or one exception each

    with start_vllm("tiny", speculate="model", k=3) as server, Watcher(server) as watcher:
        remote = RemoteEngine(server, pair, events=watcher.log)
        state = run(program, engine=remote, ...)
        RadixTreeView(watcher.log, decode=pair)       # vLLM's blocks, one node per block

    with start_cluster("tiny", replicas=2, policy="cache_aware") as cluster, ClusterWatcher(cluster) as watcher:
        results = run_all(cluster.url, asks)          # through the router
        ClusterView(watcher.log, decode=pair)         # each replica's blocks, side by side

teachspec's side needs only an HTTP client (the standard library), pyzmq and msgpack (`pip install
"teachspec[serving]"`); vLLM itself can live in an environment of its own (TEACHSPEC_VLLM_PYTHON).
"""

from teachspec.serving.blocks import BlockTree
from teachspec.serving.client import Ask, Completion, complete, run_all
from teachspec.serving.cluster import Cluster, router_binary, start_cluster
from teachspec.serving.cluster_watch import ClusterWatcher
from teachspec.serving.launch import ServerError, VllmServer, layout, start_vllm, vllm_python
from teachspec.serving.metrics import MetricsError
from teachspec.serving.remote import RemoteEngine
from teachspec.serving.watch import EventStreamError, Watcher

__all__ = ["Ask", "BlockTree", "Cluster", "ClusterWatcher", "Completion", "EventStreamError", "MetricsError",
           "RemoteEngine", "ServerError", "VllmServer", "Watcher", "complete", "layout", "router_binary", "run_all",
           "start_cluster", "start_vllm", "vllm_python"]
