"""ClusterView: N replicas behind a router, their caches side by side, and where each request was sent.

Prefix caching pays only where a request lands on the replica that holds its prefix. A cluster's log
(teachspec.serving.cluster_watch for real vLLM servers, teachspec.routing.simulate for the simulator) holds every
replica's cache events, each stamped with its `replica`, and the router's Route per request. This view draws them:

    above       each request's route: a chip "#12 tenant-3" in the column of the replica it was sent to, newest
                first, coloured by its session key (one colour per tenant), with the share of its prompt found
                cached there; over each column the replica's readout: hit rate, requests, evictions, up or down
    below       each replica's cache tree, side by side: a RadixTreeView of the events with that replica's stamp
                (`ReplicaTreeView`), so vLLM's blocks and the simulator's radix nodes draw as they do alone;
                evictions fade out as there, and a replica that died is greyed out with "down"

A replica's hit rate is its prompt tokens found in its cache over its prompt tokens looked up: from its own
Counters (prefix_hits / prefix_queries, a real server's totals) when the log has them, else from the router's
Route events (the prompt tokens sent there) and the replica's Match events (how many of them it had cached).
`hit_rate_chart(log)` plots the cluster's hit rate over the requests, a dashed line where a replica died: it falls
as the dead replica's tenants land on caches that never saw them, and recovers as those caches fill.

The view is several widgets of one log, linked, so one timeline moves them all (base.py): `routes`, a RouteView,
and `trees`, one ReplicaTreeView per replica. A notebook shows them as one box; `to_html` writes them as one page
that plays offline; `to_svg` draws the newest state as one picture, for pages that run nothing.

    ClusterView(EventLog.load("traces/routing.jsonl"))          a recorded run, no kernel and no model needed
    ClusterView.live(watcher.log, decode=pair)                  following a cluster while it serves
    hit_rate_chart(log)                                         the hit rate over requests (plotly)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teachspec.events import Counters, Event, EventLog, Evict, Health, Insert, Lock, Match, Route, Split, Unlock
from teachspec.widgets import assets, page, svg
from teachspec.widgets.base import ReplayView
from teachspec.widgets.charts import COLORS, Chart, figure
from teachspec.widgets.radix import COLUMNS, RadixTreeView

CACHE = (Match, Insert, Split, Evict, Lock, Unlock)  # the events a replica's tree is made of
# one colour per session key, in the order keys first appear; beyond these they repeat
KEY_COLORS = ("#2563eb", "#ea580c", "#16a34a", "#db2777", "#8b5cf6", "#0891b2", "#ca8a04", "#dc2626")
NO_KEY = "#9ca3af"


# -- the numbers a replica's readout shows ------------------------------------------------------------------------

@dataclass(slots=True)
class Readout:
    """One replica as the log tells of it so far."""
    url: str = ""
    state: str = "up"                       # "up" | "down", from Health events
    requests: int = 0                       # routed to it (Route)
    queries: int = 0                        # prompt tokens routed to it whose lookup the log holds
    hits: int = 0                           # of them, found in its cache (its Match for that request)
    evictions: int = 0                      # Evict events of its cache
    counted: Counters | None = None         # its server's own totals, when the log has them

    @property
    def rate(self) -> float | None:
        """Its prefix hit rate: the server's counters when known (they see every request), else Route and Match."""
        if self.counted is not None and self.counted.prefix_queries:
            return self.counted.prefix_hits / self.counted.prefix_queries
        return self.hits / self.queries if self.queries else None

    def words(self) -> str:
        if self.state == "down":
            return f"down · {self.requests} requests · {self.evictions} evicted"
        rate = "no lookups yet" if self.rate is None else f"hit rate {self.rate:.0%}"
        return f"{rate} · {self.requests} requests · {self.evictions} evicted"


@dataclass(slots=True)
class Readouts:
    """Every replica's Readout, kept from events one at a time; also each routed request's own hit."""
    replicas: list[Readout] = field(default_factory=list)
    routes: dict[int, Route] = field(default_factory=dict)                # request -> its Route
    looked: dict[tuple[int, int], int] = field(default_factory=dict)     # (replica, request) -> tokens its Match found

    def of(self, replica: int) -> Readout:
        while len(self.replicas) <= replica:
            self.replicas.append(Readout())
        return self.replicas[replica]

    def hit(self, request: int) -> float | None:
        """The share of request `request`'s prompt found cached where it was routed (None: not known yet)."""
        route = self.routes.get(request)
        if route is None or (route.replica, request) not in self.looked or not route.prompt_tokens:
            return None
        return min(1.0, self.looked[route.replica, request] / route.prompt_tokens)

    def add(self, e: Event) -> int | None:
        """Count one event; return the replica whose readout it changed (None: none)."""
        replica = getattr(e, "replica", None)
        if replica is None:
            return None
        r = self.of(replica)
        if isinstance(e, Route):
            self.routes[e.request] = e
            r.requests += 1
            if (replica, e.request) in self.looked:  # its lookup came first
                self._count(r, e, self.looked[replica, e.request])
        elif isinstance(e, Match) and e.request >= 0 and (replica, e.request) not in self.looked:
            self.looked[replica, e.request] = e.length  # its first lookup: later ones find what it just stored
            route = self.routes.get(e.request)
            if route is not None and route.replica == replica:
                self._count(r, route, e.length)
        elif isinstance(e, Evict):
            r.evictions += 1
        elif isinstance(e, Counters):
            r.counted = e
        elif isinstance(e, Health):
            r.state, r.url = e.state, e.url
        else:
            return None
        return replica

    @staticmethod
    def _count(r: Readout, route: Route, found: int) -> None:
        r.queries += route.prompt_tokens
        r.hits += min(found, route.prompt_tokens)


def replicas_in(log: EventLog) -> int:
    """How many replicas `log` tells of: one more than the highest `replica` any event names."""
    return 1 + max((e.replica for e in log if getattr(e, "replica", None) is not None), default=-1)


# -- one replica's tree ---------------------------------------------------------------------------------------------

class ReplicaTreeView(RadixTreeView):
    """A RadixTreeView of the cache events stamped with `replica`, its readout in the line above the tree, greyed
    out once the replica is down."""

    nothing = "No cache events of this replica in this log yet."

    def __init__(self, log: EventLog | None = None, replica: int = 0, decode: Any = None, budget: int | None = None,
                 columns: int | None = COLUMNS, interval: float = 0.05, pair: Any = None):
        if isinstance(replica, bool) or not isinstance(replica, int) or replica < 0:
            raise ValueError(f"replica must be an int >= 0 (a replica's index in the cluster), got {replica!r}")
        self.replica = replica
        self.readouts = Readouts()
        super().__init__(log, decode=decode, budget=budget, interval=interval, pair=pair, columns=columns)

    @property
    def readout(self) -> Readout:
        return self.readouts.of(self.replica)

    def _step(self, e: Event, index: int) -> str | None:
        if self.readouts.add(e) == self.replica and not isinstance(e, CACHE):
            if isinstance(e, Health):
                self._replace(self._drawn())  # greyed, or not
                return (f"replica {self.replica} is down: its cache is gone with it, and the router sends its "
                        f"requests elsewhere" if e.state == "down" else f"replica {self.replica} is up at {e.url}")
            if isinstance(e, Route):
                return f"request {e.request} is routed to replica {self.replica} ({e.prompt_tokens} prompt tokens)"
            return f"replica {self.replica}'s counters: {self.readout.words()}"
        if isinstance(e, CACHE) and e.replica != self.replica:  # another replica's node ids: not this tree's
            return None
        caption = super()._step(e, index)
        return None if caption is None else f"replica {self.replica}: {caption}"

    def _drawn(self) -> dict[str, dict]:
        items = super()._drawn()
        if self.readout.state != "down":
            return items
        grey = {"mark": "evicted", "matched": False, "proposed": False}  # its last lookup is news no more
        return {k: item if item.get("stub") else {**item, **grey} for k, item in items.items()}

    def _meta(self) -> dict:
        meta = super()._meta()
        program = f" · {meta['program']}" if meta["program"] else ""
        return {**meta, "program": f"replica {self.replica} · {self.readout.words()}{program}",
                "replica": self.replica, "state": self.readout.state}


# -- the routes ----------------------------------------------------------------------------------------------------

class RouteView(ReplayView):
    """Which replica each request went to (the newest `max_routes`), and each replica's readout."""

    _esm = assets.module("helpers.js", "player.js", "cluster.js")
    _css = assets.stylesheet("teachspec.css", "cluster.css")
    wide = True  # a row of its own on a page: the trees go side by side under it

    nothing = "No routes in this log yet: the router's Route events say where each request went."

    def __init__(self, log: EventLog | None = None, replicas: int = 1, max_routes: int = 12, interval: float = 0.05):
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            raise ValueError(f"replicas must be an int >= 1, got {replicas!r}")
        if isinstance(max_routes, bool) or not isinstance(max_routes, int) or max_routes < 1:
            raise ValueError(f"max_routes must be an int >= 1 (routes drawn at once), got {max_routes!r}")
        self.replicas, self.max_routes = replicas, max_routes
        self.readouts = Readouts()
        self._colors: dict[str, str] = {}     # session key -> its colour, in the order keys first appear
        self._order: list[int] = []           # the requests drawn, oldest first
        self._policy = ""
        super().__init__(log, interval=interval)

    def _step(self, e: Event, index: int) -> str | None:
        replica = self.readouts.add(e)
        if replica is None:
            return None
        if replica >= self.replicas:
            raise ValueError(f"event {index} ({e.kind}) is about replica {replica}, and this view draws "
                             f"{self.replicas} replicas: give ClusterView replicas={replica + 1} or more")
        readout = self._replica_item(replica)
        if self.items.get(readout["key"]) != readout:
            self._put(readout)
        if isinstance(e, Route):
            self._policy = e.policy
            self._order.append(e.request)
            self._put(self._route_item(e.request, len(self.readouts.routes)))
            while len(self._order) > self.max_routes:
                self._drop(f"q{self._order.pop(0)}")
            tenant = f" ({e.key})" if e.key else ""
            return f"request {e.request}{tenant}, {e.prompt_tokens} prompt tokens → replica {replica} by {e.policy}"
        if isinstance(e, Match) and f"q{e.request}" in self.items:
            self._put(self._route_item(e.request, self.items[f"q{e.request}"]["order"]))
            hit = self.readouts.hit(e.request)
            found = "" if hit is None else f": {hit:.0%} of its prompt was cached"
            return f"replica {replica} looks up request {e.request}{found}"
        if isinstance(e, Health):
            return f"replica {replica} is {e.state}" + (": its requests go to the others" if e.state == "down" else "")
        if isinstance(e, Evict):
            return f"replica {replica} evicts node {e.node} ({e.tokens} tokens)"
        if isinstance(e, Counters):
            return f"replica {replica}'s counters: {self.readouts.of(replica).words()}"
        return None  # its other cache events change no readout

    def _replica_item(self, replica: int) -> dict:
        r = self.readouts.of(replica)
        return {"key": f"r{replica}", "kind": "replica", "replica": replica, "state": r.state, "url": r.url,
                "requests": r.requests, "rate": r.rate, "evictions": r.evictions, "words": r.words()}

    def _route_item(self, request: int, order: int) -> dict:
        """Request `request`'s chip; `order` counts the routes up to its own, so newer chips go higher."""
        route = self.readouts.routes[request]
        color = self._colors.setdefault(route.key, KEY_COLORS[len(self._colors) % len(KEY_COLORS)]) \
            if route.key else NO_KEY
        return {"key": f"q{request}", "kind": "route", "request": request, "replica": route.replica,
                "tenant": route.key, "color": color, "tokens": route.prompt_tokens,
                "hit": self.readouts.hit(request), "order": order}

    def _meta(self) -> dict:
        return {"replicas": self.replicas, "policy": self._policy, "routed": len(self.readouts.routes),
                "keys": [[k, c] for k, c in self._colors.items()][:len(KEY_COLORS)]}

    def to_svg(self, frame: int | None = None) -> str:
        return routes_svg(self.snapshot(frame).items, self.replicas, COLUMN_W)[0]


# -- the whole view --------------------------------------------------------------------------------------------------

class ClusterView:
    """The routes above, each replica's tree below: linked views of one cluster's log (see the module docstring)."""

    def __init__(self, log: EventLog, replicas: int | None = None, decode: Any = None, pair: Any = None,
                 budget: int | None = None, max_routes: int = 12, interval: float = 0.05):
        if not isinstance(log, EventLog):
            raise TypeError(f"log must be an EventLog (a cluster watcher's log, or EventLog.load(path)), "
                            f"got {type(log).__name__}")
        n = replicas_in(log) if replicas is None else replicas
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"replicas must be an int >= 1, got {n!r}" if replicas is not None else
                             "this log names no replica yet (no Route, Health or replica-stamped event): give "
                             "replicas=N")
        self.log = log
        self.routes = RouteView(log, replicas=n, max_routes=max_routes, interval=interval)
        columns = max(1, COLUMNS // n)  # the trees share the width: fold each to its share of the columns
        self.trees = [ReplicaTreeView(log, replica=i, decode=decode, pair=pair, budget=budget, columns=columns,
                                      interval=interval) for i in range(n)]
        self._box = None

    @property
    def views(self) -> list[ReplayView]:
        return [self.routes, *self.trees]

    # -- live ------------------------------------------------------------------------------------------------------

    @classmethod
    def live(cls, log: EventLog, **kwargs) -> "ClusterView":
        """A view of everything already in `log` that keeps following it, throttled as every live view is."""
        view = cls(log, **kwargs)
        for v in view.views:
            v.attach(log)
        return view

    def flush(self) -> "ClusterView":
        for v in self.views:
            v.flush()
        return self

    def detach(self) -> "ClusterView":
        for v in self.views:
            v.detach()
        return self

    # -- showing it ------------------------------------------------------------------------------------------------

    def widget(self) -> Any:
        """The views as one ipywidgets box: the routes, then the trees side by side (teachspec.css)."""
        import ipywidgets  # here: the package imports without ipywidgets

        if self._box is None:
            trees = ipywidgets.HBox(list(self.trees))
            trees.add_class("ts-side-by-side")
            self._box = ipywidgets.VBox([self.routes, trees])
        return self._box

    def _repr_mimebundle_(self, **kwargs):
        """The box; the replay as HTML for pages with no widget manager; a still as SVG for pages that run nothing."""
        data = self.widget()._repr_mimebundle_(**kwargs)  # ipywidgets gives the data alone, no metadata
        self.flush()  # frames_json whole: a live view sends deltas between snapshots
        fragments = "\n".join(page.fragment(v) for v in self.views)
        bundle = {**data, "text/html": f'<div class="ts-side-by-side">\n{fragments}\n</div>',
                  "image/svg+xml": self.to_svg(),
                  "text/plain": f"ClusterView: {len(self.trees)} replicas, {len(self.routes.readouts.routes)} "
                                f"requests routed"}
        return bundle

    def to_html(self, path: str | Path, title: str = "teachspec cluster replay") -> Path:
        """The views as one self-contained HTML page that plays offline (page.py)."""
        self.flush()
        return page.write(self.views, path, title)

    def to_svg(self) -> str:
        """The newest state as one SVG picture: the routes and readouts above, each replica's tree below."""
        return cluster_svg(self.routes.snapshot().items, [t.snapshot() for t in self.trees],
                           [t.readout for t in self.trees])


# -- still pictures ------------------------------------------------------------------------------------------------

COLUMN_W, CHIP_H, HEAD_H = 240, 24, 46   # a replica's column, a route's chip and the readout above them, in px
ROWS = 8                                 # routes per column in a picture: the newest


def routes_svg(items: dict[str, dict], replicas: int, column: int) -> tuple[str, int]:
    """The readouts and the newest ROWS routes of each replica, as (an SVG document, its height)."""
    routes = sorted((i for i in items.values() if i["kind"] == "route"), key=lambda i: -i["order"])
    heads = {i["replica"]: i for i in items.values() if i["kind"] == "replica"}
    height = HEAD_H + ROWS * (CHIP_H + 4) + 8
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{replicas * column}" height="{height}" '
             f'font-family="Helvetica, Arial, sans-serif" font-size="13">']
    for r in range(replicas):
        x, head = r * column, heads.get(r, {"state": "up", "words": "nothing routed yet"})
        down = head["state"] == "down"
        parts.append(f'<g opacity="{0.45 if down else 1}"><rect x="{x + 4}" y="4" width="{column - 8}" '
                     f'height="{height - 8}" rx="8" fill="{"#f3f4f6" if down else "#ffffff"}" stroke="#d1d5db"/>'
                     f'<text x="{x + 14}" y="24" font-weight="600" font-size="15">replica {r}</text>'
                     f'<text x="{x + 14}" y="41" fill="#4b5563">{svg.escape(head["words"])}</text>')
        for row, chip in enumerate([c for c in routes if c["replica"] == r][:ROWS]):
            y = HEAD_H + 4 + row * (CHIP_H + 4)
            hit = "" if chip["hit"] is None else f" · {chip['hit']:.0%} cached"
            words = f"#{chip['request']} {chip['tenant']}".strip() + hit
            parts.append(f'<rect x="{x + 12}" y="{y}" width="{column - 24}" height="{CHIP_H}" rx="5" '
                         f'fill="{chip["color"]}" fill-opacity="0.18" stroke="{chip["color"]}"/>'
                         f'<text x="{x + 20}" y="{y + 16}">{svg.escape(words)}</text>')
        parts.append("</g>")
        if down:  # said in red, outside the faded group so it stays readable
            parts.append(f'<text x="{x + column - 16}" y="24" text-anchor="end" fill="#dc2626" font-weight="700" '
                         f'font-size="15">DOWN</text>')
    parts.append("</svg>")
    return "\n".join(parts), height


def cluster_svg(routes: dict[str, dict], trees: list, readouts: list[Readout]) -> str:
    """The routes strip over the replicas' trees, each tree in its replica's column (drawn by svg.plain_svg, the
    radix view's own layout), a dead replica's faded."""
    drawn = [svg.plain_svg(t) for t in trees]
    sizes = [_size(d) for d in drawn]
    column = max([COLUMN_W] + [w + 8 for w, _ in sizes])
    strip, top = routes_svg(routes, len(trees), column)
    height = top + 8 + max(h for _, h in sizes)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{column * len(trees)}" height="{height}">',
             strip.replace("<svg ", '<svg x="0" y="0" ', 1)]
    for i, (d, r) in enumerate(zip(drawn, readouts)):
        faded = ' opacity="0.45"' if r.state == "down" else ""
        parts.append(f'<g{faded}>' + d.replace("<svg ", f'<svg x="{i * column + 4}" y="{top + 8}" ', 1) + "</g>")
    parts.append("</svg>")
    return "\n".join(parts)


def _size(drawing: str) -> tuple[int, int]:
    """The width and height an SVG document of plain_svg says it has, in px."""
    head = drawing[:drawing.index(">")]
    return tuple(int(float(head.split(f'{name}="')[1].split('"')[0])) for name in ("width", "height"))


# -- the hit rate over requests ------------------------------------------------------------------------------------

def hit_rate_chart(log: EventLog, window: int = 20) -> Chart:
    """The cluster's prefix hit rate over the last `window` requests, request by request, with a dashed line where
    a replica went down; from Route and Match events, or, for a log with none (real servers watched without a
    record of their lookups), from the replicas' Counters, between one reading and the next."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an int >= 1 (requests averaged over), got {window!r}")
    fig = figure("Prefix hit rate over requests", "requests routed", "hit rate (prompt tokens found cached)")
    readouts, xs, ys, recent, downs, plotted = Readouts(), [], [], [], [], set()
    totals: dict[int, Counters] = {}
    counted = []  # (requests finished, hit rate since the previous reading) from Counters
    for e in log:
        readouts.add(e)
        if isinstance(e, (Route, Match)) and e.request not in plotted and readouts.hit(e.request) is not None:
            plotted.add(e.request)  # its route and its first lookup are both known now, in either order
            route = readouts.routes[e.request]
            recent.append((min(readouts.looked[route.replica, e.request], route.prompt_tokens), route.prompt_tokens))
            hits, tokens = map(sum, zip(*recent[-window:]))
            xs.append(len(readouts.routes))
            ys.append(hits / tokens)
        elif isinstance(e, Counters) and e.replica is not None:
            before = _sum(totals.values())
            totals[e.replica] = e
            after = _sum(totals.values())
            if after[1] > before[1]:
                counted.append((after[2], (after[0] - before[0]) / (after[1] - before[1])))
        elif isinstance(e, Health) and e.state == "down":
            downs.append((len(readouts.routes) if readouts.routes else _sum(totals.values())[2], e.replica))
    if not xs and counted:
        xs, ys = [x for x, _ in counted], [y for _, y in counted]
        fig.update_layout(xaxis_title="requests finished (the servers' counters)")
    if not xs:
        fig.add_annotation(text="no routed lookups in this log", showarrow=False, xref="paper", yref="paper",
                           x=0.5, y=0.5)
        return fig
    fig.add_scatter(x=xs, y=ys, mode="lines+markers", name=f"hit rate, last {window} requests",
                    line_color=COLORS["hit"])
    for x, replica in downs:
        fig.add_vline(x=x, line_dash="dash", line_color="#dc2626", annotation_text=f"replica {replica} down")
    fig.update_yaxes(range=[0, 1.05])
    return fig


def _sum(counters) -> tuple[int, int, int]:
    """(prefix hits, prefix queries, requests) summed over the replicas' newest Counters."""
    counters = list(counters)
    return (sum(c.prefix_hits for c in counters), sum(c.prefix_queries for c in counters),
            sum(c.requests for c in counters))

