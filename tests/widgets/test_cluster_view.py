"""ClusterView against trusted peers: each replica's tree against a RadixTreeView of that replica's own log, the
readouts against a count by hand, and mutants planted to show that each check can fail."""

from __future__ import annotations

import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import fields

import pytest

from teachspec.events import Counters, EventLog, Health, Match, ReplicaLog, Route
from teachspec.radix.tree import RadixCache
from teachspec.widgets import RadixTreeView
from teachspec.widgets.cluster import ClusterView, ReplicaTreeView, RouteView, hit_rate_chart, replicas_in

TENANTS = 3


def relay(own: EventLog, shared: EventLog, replica: int) -> None:
    """Every event of one replica's own log, stamped and copied into the cluster's shared log as it happens."""
    stamp = ReplicaLog(shared, replica)
    skip = {"t", "request", "replica"}
    own.subscribe(lambda e: stamp.emit(type(e), e.request, **{f.name: getattr(e, f.name) for f in fields(e)
                                                              if f.name not in skip}))


def cluster_run(shared: EventLog | None = None, requests: int = 18, kill_at: int | None = 9, budget: int = 30):
    """Two replicas, each a RadixCache that evicts past `budget` tokens, three tenants with their own prompt prefix;
    replica 1 is killed before request `kill_at`, and its tenant goes to replica 0. Returns (the shared log, each
    replica's own log)."""
    shared = shared if shared is not None else EventLog()
    owns = [EventLog(), EventLog()]
    caches = []
    for i, own in enumerate(owns):
        relay(own, shared, i)
        caches.append(RadixCache(events=own))
    alive = [0, 1]
    for r in range(requests):
        tenant = r % TENANTS
        if r == kill_at:
            shared.emit(Health, replica=1, url="sim://replica-1", state="down")
            alive = [0]
        replica = alive[tenant % len(alive)]
        prompt = [tenant * 10 + j for j in range(8)] + [100 + r, 101 + r]
        shared.emit(Route, request=r, replica=replica, policy="cache_aware", key=f"tenant-{tenant}",
                    prompt_tokens=len(prompt))
        cache = caches[replica]
        cache.match_prefix(prompt, r)
        cache.insert(prompt, list(prompt), r)
        if cache.evictable_size > budget:
            cache.evict(8, r)
    return shared, owns


def nodes(view: RadixTreeView) -> dict[int, tuple]:
    return {n.id: (n.parent, n.tokens, tuple(n.ids or ())) for n in view.nodes.values()}


def same_trees(view_cls: type[ReplicaTreeView]) -> bool:
    """Whether each replica's tree, drawn from the shared log, is the tree a RadixTreeView draws from that replica's
    own log: the check that the per-replica filter reads `replica`."""
    shared, owns = cluster_run()
    try:
        return all(nodes(view_cls(shared, replica=i)) == nodes(RadixTreeView(own)) for i, own in enumerate(owns))
    except ValueError:  # node ids of one replica met in the other's tree
        return False


class IgnoresReplica(ReplicaTreeView):
    """Mutant: draws every replica's cache events into one tree."""
    def _step(self, e, index):
        return RadixTreeView._step(self, e, index)


class ForgetsDeath(ReplicaTreeView):
    """Mutant: never hears that its replica died."""
    def _step(self, e, index):
        return None if isinstance(e, Health) else super()._step(e, index)


def test_each_replica_tree_is_the_tree_of_that_replicas_own_log_and_a_filter_ignoring_replica_fails():
    assert same_trees(ReplicaTreeView)
    assert not same_trees(IgnoresReplica)


def dead_replica_drawn(view_cls: type[ReplicaTreeView]) -> bool:
    shared, _ = cluster_run()
    tree = view_cls(shared, replica=1)
    drawn = [i for i in tree.snapshot().items.values() if not i.get("stub")]
    return (tree.readout.state == "down" and "down" in tree.meta["program"] and len(drawn) > 1
            and all(i["mark"] == "evicted" and not i["matched"] for i in drawn))


def test_a_dead_replica_is_down_and_greyed_in_its_tree_its_column_and_the_picture():
    assert dead_replica_drawn(ReplicaTreeView)
    assert not dead_replica_drawn(ForgetsDeath)
    shared, _ = cluster_run()
    view = ClusterView(shared)
    assert view.routes.items["r1"]["state"] == "down" and view.routes.items["r0"]["state"] == "up"
    assert view.trees[0].readout.state == "up"
    picture = view.to_svg()
    ET.fromstring(picture)  # well-formed: a code-hosting site shows it
    assert "DOWN" in picture and picture.count("replica ") >= 2


def test_the_readouts_are_the_hit_rates_counted_by_hand():
    shared, _ = cluster_run()
    view = ClusterView(shared)
    routes = {e.request: e for e in shared.of(Route)}
    for replica in (0, 1):
        first: dict[int, int] = {}
        for m in shared.of(Match):
            if m.replica == replica:
                first.setdefault(m.request, m.length)
        queries = sum(routes[r].prompt_tokens for r in first)
        hits = sum(first.values())
        assert view.trees[replica].readout.rate == pytest.approx(hits / queries)
        assert view.routes.items[f"r{replica}"]["rate"] == pytest.approx(hits / queries)
        assert view.trees[replica].readout.requests == sum(r.replica == replica for r in routes.values())
    # a server's own counters win over the router's count: they see every request
    shared.emit(Counters, source="http://r0", drafts=0, draft_tokens=0, accepted=0, accepted_per_position=[],
                prefix_queries=10, prefix_hits=4, requests=5, replica=0)
    assert ClusterView(shared).trees[0].readout.rate == pytest.approx(0.4)


def test_the_routes_are_drawn_in_their_replicas_column_coloured_by_tenant():
    shared, _ = cluster_run()
    view = RouteView(shared, replicas=2, max_routes=6)
    routes = [i for i in view.items.values() if i["kind"] == "route"]
    assert sorted(i["request"] for i in routes) == list(range(12, 18))  # the newest max_routes
    colours = {}
    for item in routes:
        assert item["replica"] == next(e.replica for e in shared.of(Route) if e.request == item["request"])
        assert colours.setdefault(item["tenant"], item["color"]) == item["color"]
    assert len(set(colours.values())) == len(colours) == TENANTS
    assert all(0 <= i["hit"] <= 1 for i in routes)
    by_order = sorted(routes, key=lambda i: i["order"])
    assert [i["request"] for i in by_order] == sorted(i["request"] for i in routes)  # newest highest, once each
    assert len({i["order"] for i in routes}) == len(routes)


def test_a_saved_trace_replays_to_the_same_frames_with_its_replica_stamps(tmp_path):
    shared, _ = cluster_run()
    again = EventLog.load(shared.save(tmp_path / "cluster.jsonl"))
    assert [getattr(e, "replica", None) for e in again] == [getattr(e, "replica", None) for e in shared]
    before, after = ClusterView(shared), ClusterView(again)
    assert [v.frames for v in before.views] == [v.frames for v in after.views]


def test_following_live_gives_the_frames_of_a_replay():
    log = EventLog()
    live = ClusterView.live(log, replicas=2)
    cluster_run(log)
    live.flush().detach()
    replayed = ClusterView(log, replicas=2)
    assert [v.frames for v in live.views] == [v.frames for v in replayed.views]
    assert len(live.trees[0].frames) > 10


def test_replicas_come_from_the_log_or_are_asked_for():
    shared, _ = cluster_run()
    assert replicas_in(shared) == 2 and len(ClusterView(shared).trees) == 2
    with pytest.raises(ValueError, match="give replicas="):
        ClusterView(EventLog())
    with pytest.raises(ValueError, match="replicas=2 or more"):
        ClusterView(shared, replicas=1)


def test_the_hit_rate_falls_when_a_replica_dies_and_recovers():
    shared, _ = cluster_run(requests=30, kill_at=12, budget=60)
    chart = hit_rate_chart(shared, window=3)
    ys = list(chart.data[0].y)
    assert len(ys) == 30 and chart.layout.shapes[0].x0 == 12  # the dashed line where replica 1 died
    assert min(ys[12:16]) < ys[11] and ys[-1] > min(ys[12:16])
    assert "<svg" in chart.to_svg()
    assert "no routed lookups" in hit_rate_chart(EventLog()).layout.annotations[0].text


def test_the_page_holds_every_view_and_plays_offline(tmp_path):
    shared, _ = cluster_run()
    view = ClusterView(shared)
    text = view.to_html(tmp_path / "cluster.html").read_text()
    assert text.count('class="teachspec-export') == 3 and "ts-wide" in text
    bundle = view._repr_mimebundle_()
    assert {"text/html", "image/svg+xml", "text/plain"} <= set(bundle)


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_the_front_end_loads_and_groups_routes_by_replica(tmp_path):
    path = tmp_path / "cluster.mjs"
    path.write_text(RouteView._esm)
    shared, _ = cluster_run()
    items = list(RouteView(shared, replicas=2).items.values())
    script = (f"const m = await import({json.dumps(path.as_uri())});"
              f"const items = new Map({json.dumps([[i['key'], i] for i in items])});"
              f"const cols = m.routeColumns(items, 2);"
              f"console.log(JSON.stringify([typeof m.default.render, cols.map(c => [c.head.state, "
              f"c.routes.map(r => r.request)])]))")
    done = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    render, columns = json.loads(done.stdout)
    assert render == "function"
    for replica, (state, requests) in enumerate(columns):
        assert state == ("down" if replica == 1 else "up")
        expected = [i["request"] for i in sorted(items, key=lambda i: -i.get("order", 0))
                    if i["kind"] == "route" and i["replica"] == replica]
        assert requests == expected


def test_the_readouts_of_a_simulated_cluster_are_the_simulators_own_hit_rates():
    """The simulator (teachspec.routing.simulate) counts each replica's hits itself: a trusted peer."""
    from teachspec.routing.simulate import arrivals, simulate
    from teachspec.workloads import tenants

    log = EventLog()
    run = simulate(arrivals(tenants(n_tenants=3, n_requests=16)), replicas=2, policy="cache_aware", kill=(1, 8),
                   kv_blocks=12, events=log)
    view = ClusterView(log)
    assert [t.readout.rate for t in view.trees] == pytest.approx(run.by_replica_hits)
    assert [t.readout.requests for t in view.trees] == run.per_replica
    assert [t.readout.state for t in view.trees] == ["up", "down"]
    assert [len(t.frames) > 1 for t in view.trees] == [True, True]
