"""Views of a trace, `side_by_side`, and `export_html`: one page holding several views, for a room with no kernel.

A saved trace (or an EventLog) becomes the views that read it: a SpeculationView beside a RadixTreeView, and a
TokenTreeView under them when the trace drafted trees of guesses (it holds TreeDraft events). All are built from
the same log, so they are linked and one timeline drives them (base.py). Then page.py writes them as one
self-contained HTML file:

    export_html("trace.jsonl", "replay.html", pair="tiny")         the views of a saved trace
    export_html([spec_view, tree_view], "replay.html")             views built already
    views_of("trace.jsonl", pair="tiny")                           the views, for a notebook cell
    side_by_side(tree_view, spec_view)                             views in a notebook, side by side

Side by side, because one above the other they do not fit a projector's 1280 x 720: while a replay plays, the
text's focused token would be below the screen under the tree. Each view gets half of the width where that is
380 px or more (at 1280 x 720 even beside JupyterLab's file browser), and the tree folds to `radix.BESIDE`
columns so that half holds it at 14 px labels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from teachspec.events import EventLog, TreeDraft
from teachspec.widgets import page
from teachspec.widgets.base import ReplayView
from teachspec.widgets.radix import BESIDE, RadixTreeView
from teachspec.widgets.speculation import SpeculationView
from teachspec.widgets.token_tree import TokenTreeView


def views_of(trace: EventLog | str | Path, decode: Any = None, pair: Any = None,
             budget: int | None = None) -> list[ReplayView]:
    """A SpeculationView and a RadixTreeView of `trace` (an EventLog or a trace file), linked, the tree narrow
    enough to stand beside the text; then a TokenTreeView if the trace drafted trees."""
    log = EventLog.load(trace) if isinstance(trace, (str, Path)) else trace
    if not isinstance(log, EventLog):
        raise TypeError(f"trace must be an EventLog or the path of a saved trace, got {type(trace).__name__}")
    views = [SpeculationView(log, decode=decode, pair=pair),
             RadixTreeView(log, decode=decode, pair=pair, budget=budget, columns=BESIDE)]
    if any(isinstance(e, TreeDraft) for e in log):
        views.append(TokenTreeView(log, decode=decode, pair=pair))
    return views


def side_by_side(*views: ReplayView) -> Any:
    """`views` side by side where the output is wide enough, one under the other where it is not: an ipywidgets
    box that a notebook cell shows (its layout is teachspec.css's, the same as an exported page's)."""
    import ipywidgets  # here: the package imports without ipywidgets

    if not views or not all(isinstance(v, ReplayView) for v in views):
        raise TypeError(f"side_by_side takes views (SpeculationView, RadixTreeView, ...), got {views!r:.80}")
    box = ipywidgets.HBox(list(views))
    box.add_class("ts-side-by-side")
    return box


def export_html(views: Any, path: str | Path, title: str = "teachspec replay", decode: Any = None,
                pair: Any = None) -> Path:
    """Write `views` (a view, a list of views, an EventLog or a trace file) as one HTML page; return its path.

    An EventLog or a trace path becomes its linked views (`views_of`), decoded with `decode` or `pair`.
    """
    if isinstance(views, (str, Path, EventLog)):
        views = views_of(views, decode=decode, pair=pair)
    if isinstance(views, ReplayView):
        views = [views]
    if not (isinstance(views, (list, tuple)) and views and all(isinstance(v, ReplayView) for v in views)):
        raise TypeError(f"views must be a view, a non-empty list of views, an EventLog or a trace path, "
                        f"got {views!r:.80}")
    return page.write(list(views), path, title)
