"""Notebook views of the event log: watch speculative decoding and the radix cache, live or from a saved trace.

    from teachspec.widgets import SpeculationView, RadixTreeView, charts

    SpeculationView(engine.events, decode=pair)        the text growing step by step, with every verdict
    RadixTreeView(log, decode=pair, budget=4096)       the cache tree changing, with a memory bar
    SpeculationView.live(engine.events, decode=pair)   the same, following a generation while it runs
    charts.acceptance_by_position(log)                 plotly figures of a whole run (see charts.py)

A view reads nothing but events, so any trace saved with `EventLog.save` replays in it. Its frames are computed
once in Python and stepped through in the browser (play, pause, step, slider, speed), kernel or not.
"""

from teachspec.widgets import charts
from teachspec.widgets.export import export_html
from teachspec.widgets.radix import RadixTreeView
from teachspec.widgets.speculation import SpeculationView

__all__ = ["RadixTreeView", "SpeculationView", "charts", "export_html"]
