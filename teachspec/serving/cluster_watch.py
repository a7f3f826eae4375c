"""Watching a cluster: one Watcher per replica, all writing into one event log, each event stamped with its replica.

A router in front of N vLLM replicas (teachspec.serving.cluster) decides where each request's prefix gets cached:
the lecture's question is whether requests that share a prefix land on the replica that holds it. To see that, the
replicas' caches go into ONE log, so that a view draws them side by side on one timeline (widgets/cluster.py):

    replica i's blocks      Insert and Evict with replica=i (its Watcher's BlockTree, through ReplicaLog)
    replica i's counters    Counters with replica=i (its /metrics: prefix_hits / prefix_queries is its hit rate)
    the router's choice     Route(request, replica, policy, key, prompt_tokens), by `routed(...)`
    a replica's state       Health(replica, url, "up") when watching starts, Health(..., "down") once if it dies

Node ids are per replica (each BlockTree numbers its own blocks from 1), which is why every event carries its
replica.

A replica that dies is news, not a failure: the lecture kills one on purpose to show the hit rate fall and recover.
Its watcher emits Health "down" once and stops quietly (no warning); the others go on, and `settle()` and
`check()` carry on without it. Anything else that stops a replica's watcher (a message on its socket that is not a
KV event batch) is an error of the whole watcher, as it is for one server: said once by a warning, and raised by
the next `settle()` or `check()`. A replica that does not answer when watching starts raises a ServerError at once,
with nothing left running.

    with start_cluster(pair, replicas=2, policy="cache_aware") as cluster, ClusterWatcher(cluster) as watcher:
        ... send requests; for each, watcher.routed(request, replica, policy, key, prompt_tokens) ...
        cluster.kill(1)                            # Health(replica=1, state="down") appears in watcher.log
        watcher.settle()
        ClusterView(watcher.log, decode=pair)
"""

from __future__ import annotations

import threading
from typing import Any

from teachspec.events import EventLog, Health, Route
from teachspec.serving.launch import ServerError, VllmServer
from teachspec.serving.watch import LogWriter, ServerGone, Watcher


class ClusterWatcher:
    """Follows every replica of a cluster (a Cluster, or a list of VllmServers) into one shared `log`."""

    def __init__(self, cluster: Any, log: EventLog | None = None, interval: float = 0.25, patience: float = 30.0):
        servers = getattr(cluster, "servers", cluster)
        if not isinstance(servers, (list, tuple)) or not servers or \
                not all(isinstance(s, VllmServer) for s in servers):
            raise TypeError(f"cluster must be a Cluster (from start_cluster) or a non-empty list of VllmServers "
                            f"(from start_vllm), got {type(cluster).__name__} {cluster!r:.80}")
        if log is not None and not isinstance(log, EventLog):
            raise TypeError(f"log must be an EventLog, or None for a new one, got {type(log).__name__}")
        self.log = log if log is not None else EventLog(pair=getattr(servers[0], "pair", None))
        self.watchers = [Watcher(s, log=self.log, interval=interval, patience=patience, replica=i,
                                 on_gone=lambda error, i=i: self._down(i, error)) for i, s in enumerate(servers)]
        self.down: list[int] = []           # replicas that died while watched, in the order they did
        self._router = LogWriter(self.log)  # Route events, written one at a time with the watchers' events
        self._downs = threading.Lock()      # a replica's death is heard by its thread, or by settle(): said once

    # -- starting and stopping ------------------------------------------------------------------------------------

    def start(self) -> "ClusterWatcher":
        """Start every replica's watcher; one that does not answer raises a ServerError, none left running."""
        started = []
        try:
            for i, w in enumerate(self.watchers):
                w.start()
                started.append(w)
                w.writer.emit(Health, url=w.url, state="up")
        except ServerError as e:
            for w in started:
                w.stop()
            raise ServerError(f"replica {i} of the cluster: {e}") from None
        return self

    def stop(self) -> None:
        for w in self.watchers:
            w.stop()

    def __enter__(self) -> "ClusterWatcher":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- reading what it has -------------------------------------------------------------------------------------

    def check(self) -> None:
        """Raise the error that stopped a replica's watcher, if one did (a replica that died is not an error)."""
        for w in self.watchers:
            w.check()

    def settle(self, quiet: float = 0.3, timeout: float = 15.0) -> "ClusterWatcher":
        """Each replica still up settled in turn (Watcher.settle: until its events have arrived, then its counters
        read once more); raise what stopped a watcher, if anything did."""
        for i, w in enumerate(self.watchers):
            if i not in self.down:
                try:
                    w.settle(quiet, timeout)
                except ServerGone as e:  # it died just now, and settle() was the first to ask it
                    w.stop()
                    self._down(i, e)
        self.check()
        return self

    @property
    def trees(self) -> list:
        """Each replica's BlockTree: what its cache holds now."""
        return [w.tree for w in self.watchers]

    # -- the router's side ---------------------------------------------------------------------------------------

    def routed(self, request: int, replica: int, policy: str, key: str = "", prompt_tokens: int = 0) -> Route:
        """Record that the router sent `request` to `replica` (a Route event), so the view can draw it."""
        if isinstance(replica, bool) or not isinstance(replica, int) or not 0 <= replica < len(self.watchers):
            raise ValueError(f"replica must be an index of this cluster's {len(self.watchers)} replicas, "
                             f"0 .. {len(self.watchers) - 1}, got {replica!r}")
        return self._router.emit(Route, request=request, replica=replica, policy=policy, key=key,
                                 prompt_tokens=prompt_tokens)

    # -- a replica that dies -------------------------------------------------------------------------------------

    def _down(self, replica: int, error: ServerGone) -> None:
        """Replica `replica` stopped answering: one Health "down" for it, however many times this is heard."""
        with self._downs:
            if replica in self.down:
                return
            self.down.append(replica)
        watcher = self.watchers[replica]
        watcher.gone = watcher.gone or error
        watcher.writer.emit(Health, url=watcher.url, state="down")
