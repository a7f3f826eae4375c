"""Notebook views of the event log: watch speculative decoding and the radix cache, live or from a saved trace.

    from teachspec.widgets import SpeculationView, RadixTreeView, TokenTreeView, charts

    SpeculationView(engine.events, decode=pair)        the text growing step by step, with every verdict
    RadixTreeView(log, decode=pair, budget=4096)       the cache tree changing, with a memory bar
    ClusterView(log, decode=pair)                      many replicas behind a router: each request's route, each
                                                       replica's block tree and hit rate, side by side (cluster.py)
    TokenTreeView(log, decode=pair)                    each tree of guesses (tree=...): its verdicts, its accepted
                                                       path and the tree attention mask of its one target pass
    SpeculationView.live(engine.events, decode=pair)   the same, following a generation while it runs
    side_by_side(tree_view, spec_view)                 two views side by side where the width allows: the tree
                                                       and the text on screen together at 1280 x 720
    charts.acceptance_by_position(log)                 plotly figures of a whole run (see charts.py)
    Predict(question, choices, answer)                 the student commits to an answer before a cell shows it
    explore_speedup(alpha=0.8, c=0.05, k=4)            sliders the student drags: Theorem 3.8 against k, the
                                                       best k, and where speculation loses (see explore.py)
    explore_pass_cost(dict(zip(positions, ms)))        a slider over a measured pass-cost curve (lecture 1's)
    explore_batch(pass_ms, batches, alpha, c)          sliders over speculation's speedup against the batch size,
                                                       one curve per k, where each stops paying (lecture 13)
    batch_figure(alpha, c, pass_ms, batches)           the same as a still figure (see batch.py)
    view.to_svg(), chart.to_svg()                      still pictures, for pages that run no widget or plotly.js

A view reads nothing but events, so any trace saved with `EventLog.save` replays in it. Its frames are computed
once in Python and stepped through in the browser (play, pause, step, slider, speed), kernel or not:

    view.to_html("replay.html")                        ONE self-contained page that plays from file://, offline
    export_html("trace.jsonl", "replay.html")          the views of a saved trace, the same way
    voila lecture.ipynb                                the views as a web page, served from this machine
    jupyter nbconvert --to html lecture.ipynb          each view's text/html: the same player as to_html, shown
                                                       when the notebook holds no widget state (nbconvert's
                                                       widget output needs a CDN, so it fails offline)

`decode=` takes a tokenizer, a Pair, a function from ids to text or a pair's name ("tiny"); `pair=` names the pair
that recorded a trace. Views of one log are linked: stepping one moves the others to the same event.

Where things live, each module importing only those above it in this list:

    frames.py   the frame state machine (Recorder) and replaying frames     text.py    token text, decoders
    live.py     following a running log without slowing it                  page.py    a view as HTML
    base.py     ReplayView: a view's frames sent to the browser             layout.py  the tree's layout
    speculation.py, radix.py, token_tree.py   the views                     svg.py     tree and text as pictures
    cluster.py  the replicas' trees side by side, with the routes
    export.py   views of a trace, side_by_side, export_html                 measure.py, charts.py   numbers
                                                                            chartsvg.py  a chart as a picture
                                                                            explore.py, batch.py  sliders
"""

from teachspec.widgets import charts
from teachspec.widgets.batch import batch_figure, explore_batch
from teachspec.widgets.cluster import ClusterView
from teachspec.widgets.explore import explore_pass_cost, explore_speedup
from teachspec.widgets.export import export_html, side_by_side
from teachspec.widgets.predict import Predict
from teachspec.widgets.radix import RadixTreeView
from teachspec.widgets.speculation import SpeculationView
from teachspec.widgets.token_tree import TokenTreeView

__all__ = ["ClusterView", "Predict", "RadixTreeView", "SpeculationView", "TokenTreeView", "batch_figure", "charts",
           "explore_batch", "explore_pass_cost", "explore_speedup", "export_html", "side_by_side"]
