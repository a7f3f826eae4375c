"""RadixTreeView: the radix cache's tree as it changes, rebuilt from the cache's events alone.

The view never looks at a RadixCache. It replays Match, Insert, Split, Evict, Lock and Unlock into a tree of its
own, so a saved trace shows the same pictures as the live cache did:

    Match     the matched path is highlighted (until the next lookup), and a suffix tree's proposed branch
              below it (`proposed`) apart from it
    Insert    a new leaf appears, under the node where the cached prefix ended
    Split     a node is cut in two: the new node above it takes its first `at` tokens
    Evict     a leaf fades out and its tokens are freed
    Lock      every node on the path root -> node gains a lock: protected from eviction while a request runs
    Unlock    and loses it again

Events carry token counts, not token ids. A node's text is recovered when its insert belongs to a request the
log also recorded (RequestStart gives the prompt, Accept/Resample/Bonus the new tokens) and the path it
hangs from spells the start of that request's sequence, or when the Insert event carries the ids itself (an `ids`
field); otherwise the node shows its id and token count.

Each drawn node also says where its tokens sit in the text: `offset`, the tokens above it on its path, and
`requests`, the last few requests whose sequence runs through it (they matched it, or inserted it). The browser
uses them to link the views: hovering a node marks tokens offset .. offset + tokens of those requests in a
SpeculationView of the same log, and a token points back at the node that holds it.

Above the tree a line names the program step running (ProgramStep and ProgramSpan events, from
teachspec.program), so the tree is seen growing call by call.

Below the tree a memory bar splits a token `budget` into in use (locked), cached (evictable) and free. The layout
(layout.py) is computed here, in Python, and stays put as the tree grows; big trees fold into "+N" stubs, and so
do wide ones: at most `columns` leaves side by side, so that the tree fits its box with labels of 14 px or more.
The nodes the caption names are always drawn, and the browser scrolls the box to them if it is narrower still
(widgets/radix.js). `to_svg()` draws any frame as a static picture, with Graphviz when its `dot` program is
installed (svg.py).

Deep trees: a node deeper than `max_depth` is never drawn, and one row below that only counts in a "+N" stub, so
the view keeps subtree sizes, requests and recency for the nodes down to that row alone. Each node knows its `top`,
the node on its path where that bookkeeping stops, so an event deep in a chain of 16,000 nodes costs what it costs
at depth 16, and a chain replays in about the time of a bushy tree of as many nodes.

    view = RadixTreeView(log, decode=pair, budget=2048)
    view = RadixTreeView(log, decode=pair, columns=BESIDE)    beside a SpeculationView (export.side_by_side)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from teachspec.events import Accept, Bonus, Event, Evict, Insert, Lock, Match, ProgramSpan, ProgramStep, \
    RequestStart, Resample, Split, Unlock
from teachspec.widgets import assets, layout, svg
from teachspec.widgets.base import ReplayView
from teachspec.widgets.text import describe


@dataclass(slots=True, eq=False)
class ViewNode:
    id: int
    parent: int | None                  # None for the root
    tokens: int                         # the length of its token run
    ids: list[int] | None = None        # the run itself, when the view could recover it (see the docstring)
    locks: int = 0
    children: list[int] = field(default_factory=list)  # in creation order: what keeps the layout stable
    requests: list[int] = field(default_factory=list)  # the last few requests whose sequence runs through it
    depth: int = 0                      # the root's is 0
    size: int = 1                       # nodes in its subtree, itself included  } kept up to date here, so
    weight: int = 0                     # tokens in its subtree                   } folding never walks the tree
    top: int = 0                        # the deepest node on its path that is at most one row below what can be
                                        # drawn (itself, unless it is deeper): see "Deep trees" above


# Leaves side by side. At 1280 x 720 a notebook's output beside JupyterLab's file browser is about 845 px wide: 6
# columns of radix.js's boxes at 14 px labels; half of it, beside the text (export.side_by_side), holds 3.
COLUMNS, BESIDE = 6, 3


class RadixTreeView(ReplayView):
    _esm = assets.module("helpers.js", "player.js", "radix.js")
    _css = assets.stylesheet("teachspec.css")

    nothing = "No radix cache events in this log yet: give the RadixCache this log as its events."

    def __init__(self, log=None, decode=None, budget: int | None = None, max_nodes: int = 150,
                 max_depth: int = 16, interval: float = 0.05, pair=None, columns: int | None = COLUMNS):
        if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool) or budget < 0):
            raise ValueError(f"budget must be a number of tokens >= 0, or None for no memory bar, got {budget!r}")
        if not isinstance(max_nodes, int) or max_nodes < 2:
            raise ValueError(f"max_nodes must be an int >= 2 (the root and one '+N' stub), got {max_nodes!r}")
        if not isinstance(max_depth, int) or max_depth < 1:
            raise ValueError(f"max_depth must be an int >= 1, got {max_depth!r}")
        if columns is not None and (not isinstance(columns, int) or isinstance(columns, bool) or columns < 1):
            raise ValueError(f"columns must be an int >= 1 (leaves side by side), or None for no limit, "
                             f"got {columns!r}")
        self.budget, self.max_nodes, self.max_depth, self.columns = budget, max_nodes, max_depth, columns
        self.nodes: dict[int, ViewNode] = {0: ViewNode(0, None, 0, [])}
        self._recency: dict[int, None] = {}            # node ids, least recently touched first (folding keeps
        self._touched: set[int] = set()                # the recent ones); and those the current event touched
        self._focus: list[int] = []                    # the nodes the current event's caption names: always drawn
        self.total = self.protected = 0                # tokens cached, and locked among them
        self._sequences: dict[int, list[int]] = {}     # request -> its prompt and new tokens so far
        self._gone: dict[int, int] = {}                # evicted node id -> the event that evicted it
        self._matched: list[int] = []                  # the last lookup's path
        self._proposed: list[int] = []                 # the branch a suffix tree's last lookup proposed
        self._match_length = 0
        self._marks: dict[int, str] = {}               # this event's news: "new", "split" or "evicted"
        self._fading: int | None = None                # evicted by the last event: drawn once more, fading
        self._running = ""                             # the program step started last, and the line shown:
        self._program = ""                             # that step, with its result once it is done
        super().__init__(log, decode, interval, pair)

    # -- rebuilding the tree from events -------------------------------------------------------------------------

    def _step(self, e: Event, index: int) -> str | None:
        if isinstance(e, RequestStart):
            self._sequences[e.request] = list(e.prompt)
        elif isinstance(e, (Accept, Resample, Bonus)) and e.request in self._sequences:
            self._sequences[e.request].append(e.token)
        elif isinstance(e, (ProgramStep, ProgramSpan)) and e.call != "text":  # text alone never touches the tree
            return self._program_step(e)
        if not isinstance(e, (Match, Insert, Split, Evict, Lock, Unlock)):
            return None
        if self._fading is not None:  # its one frame of fading is over
            self._remove(self._fading)
            self._fading = None
        self._marks = {}
        caption = self._rebuild(e, index)
        for node_id in sorted(self._touched, reverse=True):  # the newest last; among them, the smallest id
            self._recency.pop(node_id, None)
            if self.nodes[node_id].depth <= self.max_depth:  # folding never keeps a deeper one
                self._recency[node_id] = None
        self._focus = sorted(self._touched)
        self._touched.clear()
        self._replace(self._drawn())
        return caption

    def _rebuild(self, e: Event, index: int) -> str:
        """Apply one cache event to the view's own tree; return what happened, in words."""

        def node(node_id: int) -> ViewNode:  # every lookup names the event if it fails
            return self._node(node_id, e, index)

        if isinstance(e, Match):
            path = [node(i) for i in e.path]
            self._matched, self._match_length = e.path, e.length
            self._proposed = [node(i).id for i in e.proposed or ()]
            self._touch(path + [self.nodes[i] for i in self._proposed])
            self._hold(path, e.request)
            said = f"lookup: {e.length} tokens cached, path {' -> '.join(map(str, e.path))}"
            return said + (f", proposing {len(self._proposed)} guesses below it" if self._proposed else "")
        if isinstance(e, Insert):
            parent = node(e.parent)
            self._touch([parent])
            if e.node == -1:
                return f"insert: all {e.cached} tokens were cached already, nothing new to store"
            self._new_id(e.node, e, index)
            ids = getattr(e, "ids", None) or self._recover(e, parent)
            self.nodes[e.node] = leaf = ViewNode(e.node, e.parent, e.tokens, ids, depth=parent.depth + 1,
                                             weight=e.tokens)
            leaf.top = self._top(leaf)
            self._hold(self._drawable_path(leaf), e.request)
            parent.children.append(e.node)
            self._grow(parent, 1, e.tokens)
            self._touch([leaf])
            self.total += e.tokens
            self._marks[e.node] = "new"
            return (f"insert: {e.tokens} new tokens as node {e.node} under node {e.parent} "
                    f"({e.cached} already cached){self._quote(leaf)}")
        if isinstance(e, Split):
            cut, parent = node(e.node), node(e.parent)
            if cut.parent != e.parent:
                raise ValueError(f"{describe(e, index)}: node {e.node} hangs under node {cut.parent}, not {e.parent}")
            if not 0 < e.at < cut.tokens:
                raise ValueError(f"{describe(e, index)}: at={e.at} must cut inside node {e.node}'s "
                                 f"{cut.tokens} tokens (0 < at < {cut.tokens})")
            self._new_id(e.new, e, index)
            head = ViewNode(e.new, e.parent, e.at, ids=cut.ids[:e.at] if cut.ids else None, locks=cut.locks,
                        children=[e.node], requests=list(cut.requests), depth=cut.depth, size=cut.size + 1,
                        weight=cut.weight)
            parent.children[parent.children.index(e.node)] = e.new  # the head takes the cut node's place
            cut.parent, cut.tokens, cut.weight = e.new, cut.tokens - e.at, cut.weight - e.at
            cut.ids = cut.ids[e.at:] if cut.ids else None
            self.nodes[e.new] = head
            self._grow(parent, 1, 0)
            head.top = self._top(head)
            for n in self._subtree(cut):  # the cut subtree hangs one row lower now (parents before children)
                n.depth += 1
                n.top = self._top(n)
                if n.depth > self.max_depth:  # never drawn again: splits only push nodes down
                    self._recency.pop(n.id, None)
            self._touch([head, cut])
            self._marks[e.new] = self._marks[e.node] = "split"
            return f"split: node {e.node} is cut after {e.at} tokens; new node {e.new} holds them{self._quote(head)}"
        if isinstance(e, Evict):
            gone = node(e.node)
            if gone.parent != e.parent or gone.children or gone.locks:
                raise ValueError(f"{describe(e, index)}: only an unlocked leaf under node {e.parent} can be "
                                 f"evicted; node {e.node} hangs under {gone.parent}, has {len(gone.children)} "
                                 f"children and {gone.locks} locks")
            self.total -= gone.tokens
            self._touch([gone, node(e.parent)])  # the caption names both: they are drawn, the leaf fading
            self._fading, self._gone[e.node] = e.node, index
            self._marks[e.node] = "evicted"
            return f"evict: node {e.node} is dropped, freeing {gone.tokens} tokens"
        # Lock or Unlock: one lock more or less on every node of the path root -> node
        step = 1 if isinstance(e, Lock) else -1
        path, n = [], node(e.node)
        while n.parent is not None:
            path.append(n)
            n = self.nodes[n.parent]
        for n in path:
            n.locks += step
        if path and path[0].locks != e.locks:
            raise ValueError(f"{describe(e, index)}: the event says node {e.node} has {e.locks} locks, but the "
                             f"view counted {path[0].locks}; did it miss events from the start of the log?")
        self.protected = e.protected
        self._touch(path)
        verb = "lock" if step == 1 else "unlock"
        if not path:
            return f"{verb}: the lookup matched nothing, so there is no path to protect"
        return f"{verb} the path root -> node {e.node}: {e.protected} tokens now protected from eviction"

    def _program_step(self, e: ProgramStep | ProgramSpan) -> str:
        if isinstance(e, ProgramStep):
            call = "fork" if e.call == "fork" else f"{e.call}({e.name!r})"
            self._program = self._running = f"{e.program}: {call} at line {e.line}"
            return f"program {e.program}, branch {e.branch}: {call} at line {e.line} starts at token {e.position}"
        done = f" = {e.text[:40]!r}" if e.call != "fork" else ""
        self._program = self._running + done
        return f"{e.call} {e.name} done: tokens {e.start}..{e.stop} of branch {e.branch}{done}"

    def _node(self, node_id: int, e: Event, index: int) -> ViewNode:
        if node_id in self.nodes:
            return self.nodes[node_id]
        why = (f"it was evicted by event {self._gone[node_id]}" if node_id in self._gone
               else "no event inserted it")
        raise ValueError(f"{describe(e, index)} names node {node_id}, which is not in the tree this view rebuilt: "
                         f"{why}. A RadixTreeView must see the cache's events from its very first one.")

    def _new_id(self, node_id: int, e: Event, index: int) -> None:
        if node_id in self.nodes or node_id in self._gone:
            raise ValueError(f"{describe(e, index)}: node {node_id} already existed; node ids are never reused")

    def _remove(self, node_id: int) -> None:
        gone = self.nodes.pop(node_id)
        self._recency.pop(node_id, None)
        parent = self.nodes[gone.parent]
        parent.children.remove(node_id)
        self._grow(parent, -1, -gone.tokens)

    def _top(self, n: ViewNode) -> int:
        """`n.top` for a node whose parent's is right: itself down to one row below the drawable ones, else the
        parent's."""
        return n.id if n.depth <= self.max_depth + 1 else self.nodes[n.parent].top

    def _drawable_path(self, n: ViewNode) -> list[ViewNode]:
        """The nodes on `n`'s path that can be drawn (depth <= max_depth), bottom up, the root excluded: at most
        max_depth of them, however deep `n` is."""
        path, n = [], self.nodes[n.top]
        while n.parent is not None:
            if n.depth <= self.max_depth:
                path.append(n)
            n = self.nodes[n.parent]
        return path

    def _hold(self, nodes: list[ViewNode], request: int) -> None:
        if request < 0:
            return
        for n in nodes:
            if n.parent is not None and request not in n.requests:
                n.requests = [*n.requests[-5:], request]  # a new list: frames may hold the old one

    def _touch(self, nodes: list[ViewNode]) -> None:
        self._touched.update(n.id for n in nodes)

    def _grow(self, node: ViewNode, size: int, weight: int) -> None:
        """Add to the subtree sizes of `node` and of every node above it, from its `top` up: the sizes below the
        tops are never read."""
        node = self.nodes[node.top]
        while True:
            node.size, node.weight = node.size + size, node.weight + weight
            if node.parent is None:
                return
            node = self.nodes[node.parent]

    def _subtree(self, node: ViewNode) -> list[ViewNode]:
        out, stack = [], [node]
        while stack:  # an explicit stack: a long chain of nodes must not hit Python's recursion limit
            n = stack.pop()
            out.append(n)
            stack.extend(self.nodes[c] for c in n.children)
        return out

    def _recover(self, e: Insert, parent: ViewNode) -> list[int] | None:
        """The new leaf's token ids: its request's tokens after the `cached` ones, if the path agrees."""
        sequence = self._sequences.get(e.request)
        if sequence is None or len(sequence) < e.cached + e.tokens:
            return None
        runs, n = [], parent  # the path's token runs, bottom up: one pass, however deep
        while n.parent is not None:
            runs.append(n.ids or [-1] * n.tokens)  # unknown ids never match a token
            n = self.nodes[n.parent]
        if [t for run in reversed(runs) for t in run] != sequence[:e.cached]:
            return None
        return sequence[e.cached:e.cached + e.tokens]

    def _quote(self, node: ViewNode) -> str:
        text = self.text.many(node.ids) if node.ids else None
        return "" if text is None else f": {text[:40]!r}"

    # -- what the browser draws ----------------------------------------------------------------------------------

    def _drawn(self) -> dict[str, dict]:
        """The items to draw: the kept nodes where the layout puts them, and the "+N" stubs."""
        folded = layout.fold(self.nodes, reversed(self._recency), self.max_nodes, self.max_depth,
                             max_columns=self.columns, focus=self._focus)
        spots, stubs = layout.place(self.nodes, folded)
        matched, proposed = set(self._matched), set(self._proposed)
        items = {}
        offsets = {0: 0}
        for n in sorted((self.nodes[i] for i in spots), key=lambda n: n.depth):  # parents before children
            if n.parent is not None:
                offsets[n.id] = offsets[n.parent] + self.nodes[n.parent].tokens
        for n in (self.nodes[i] for i in spots):
            spot, text = spots[n.id], self.text.many(n.ids) if n.ids else None
            item = {"key": f"n{n.id}", "id": n.id, "parent": None if n.parent is None else f"n{n.parent}",
                    "x": spot.x, "y": spot.y, "tokens": n.tokens, "locks": n.locks,
                    "text": None if text is None else text[:80], "mark": self._marks.get(n.id, ""),
                    "matched": n.id in matched, "proposed": n.id in proposed, "offset": offsets[n.id],
                    "requests": n.requests}
            if text is None and n.ids:
                item["ids"] = n.ids[:12]
            items[item["key"]] = item
        for parent, spot in stubs.items():
            count, tokens = folded.stubs[parent]
            key = f"s{parent}"
            items[key] = {"key": key, "stub": True, "parent": f"n{parent}", "x": spot.x, "y": spot.y,
                          "folded": count, "tokens": tokens}
        return items

    def _meta(self) -> dict:
        cached = self.total - self.protected
        return {"nodes": len(self.nodes) - 1 - (self._fading is not None), "total": self.total,
                "in_use": self.protected, "cached": cached, "budget": self.budget,
                "free": None if self.budget is None else self.budget - self.total,
                "match": self._match_length, "program": self._program,
                "focus": [f"n{i}" for i in self._focus]}  # what the browser keeps in view (radix.js)

    # -- a static picture ----------------------------------------------------------------------------------------

    def to_svg(self, frame: int | None = None) -> str:
        """Frame `frame` (the newest when None) as SVG: Graphviz's drawing if `dot` is installed, else ours."""
        return svg.tree_svg(self.snapshot(frame))
