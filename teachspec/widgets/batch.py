"""Speculation as the batch grows: theory.batch_speedup against the batch size b, one curve per draft length k.

    batch_figure(alpha, c, pass_cost, batches)            the curves, where each k stops paying, the best k's
                                                          envelope, and measured points when given
    explore_batch(pass_cost, batches, alpha=0.8, c=0.1)   the same with sliders for alpha and c

With b requests in every pass, a step of draft length k verifies b (k + 1) positions, so (lecture 13)

    speedup(b, k) = E[tokens](alpha, k) / (k c_b + cost(b (k + 1)) / cost(b)).

While the pass is flat the curves sit at Theorem 3.8's value; past the knee every guess costs real arithmetic and
the longer drafts fall first. Choosing k per batch, as SmartSpec does (arXiv:2406.14066, goodput: accepted plus
bonus tokens per second), follows the top curve: the best k falls as b grows, to 0 where no k pays. A marker on
the line at 1 shows where each k stops paying (`theory.batch_crossover`).

pass_cost is a measured curve {positions in one pass: time} (lecture 13's, or `teachspec bench batch`'s
"pass_cost") or a function of the positions; draft_cost likewise for the draft, which makes c its ratio at b = 1
(`theory.batch_c`); without it c is the same at every b. measured: {b: speedup} measured on a server at some k,
drawn as points. A bench result draws as

    explore_batch(dict(r["pass_cost"]), [row["b"] for row in r["rows"]], r["alpha"], r["c"],
                  draft_cost=dict(r["draft_cost"]), measured={row["b"]: row["measured"] for row in r["rows"]
                                                              if "measured" in row})

The figure is a plotly Chart: a saved notebook shows it with no kernel (and an SVG where plotly.js cannot run).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from teachspec import theory
from teachspec.widgets.charts import COLORS, Chart, figure
from teachspec.widgets.explore import LOSES, Explorer, _curve, _unit

DASHES = ("dot", "dash", "longdash", "dashdot", "solid")  # one per k, in order; then they repeat
Cost = Mapping[int, float] | Callable[[int], float]


@dataclass(frozen=True, slots=True)
class BatchReading:
    """What theory.py says at one position of the sliders, at every batch."""

    alpha: float
    c: float
    batches: tuple[int, ...]
    ks: tuple[int, ...]
    curves: dict[int, list[float]]      # k -> speedup at each batch
    stops: dict[int, int | None]        # k -> the first batch at which it loses (None: it pays at every one)
    best_k: list[int]                   # the best k in 0 .. max(ks) at each batch (ties to the shorter draft)
    best: list[float]                   # its speedup (1.0 where the best k is 0)
    best_stops: int | None              # the first batch at which no k of ks pays

    def html(self) -> str:
        said = ", ".join(f"k = {k} at b = <b>{b}</b>" if b is not None else f"k = {k} pays at every b"
                         for k, b in self.stops.items())
        lines = [f"Where speculation stops paying: {said}",
                 f"The best k (SmartSpec's goodput choice): <b>{self.best_k[0]}</b> at b = {self.batches[0]}, "
                 f"<b>{self.best_k[-1]}</b> at b = {self.batches[-1]}"]
        if self.best_stops is not None:
            lines.append(f"<b style='color: {LOSES}'>From b = {self.best_stops} no k pays</b>: the batch has used up "
                         f"the spare room in every pass.")
        return "<br>".join(lines)


def batch_reading(alpha: float, c: float, pass_cost: Cost, batches: Sequence[int], ks: Sequence[int] = (1, 2, 3),
                  draft_cost: Cost | None = None) -> BatchReading:
    """theory.batch_speedup for every k in ks at every batch, and where each stops paying; arguments checked."""
    alpha, c = _unit("alpha", alpha), _unit("c", c)
    batches, ks = _ints("batches", batches), _ints("ks", ks)
    cost = _cost("pass_cost", pass_cost, [b * (k + 1) for b in batches for k in (0, *ks)])
    draft = None if draft_cost is None else _cost("draft_cost", draft_cost, [1, *batches])
    curves = {k: [theory.batch_speedup(alpha, k, c, cost, b, draft) for b in batches] for k in ks}
    stops = {k: theory.batch_crossover(alpha, c, cost, k=k, batches=batches, draft_cost=draft) for k in ks}
    best = [max((0, *ks), key=lambda k: (1.0 if k == 0 else curves[k][i], -k)) for i in range(len(batches))]
    # batch_crossover's k=None tries every k in 1 .. k_max; ks may skip some, so the curves are read directly
    best_stops = next((b for i, b in enumerate(batches) if all(curves[k][i] < 1 for k in ks)), None)
    return BatchReading(alpha, c, batches, ks, curves, stops, best,
                        [1.0 if k == 0 else curves[k][i] for i, k in enumerate(best)], best_stops)


def reading_figure(r: BatchReading, measured: Mapping[int, float] | None = None,
                   measured_name: str = "measured") -> Chart:
    """The curves of a reading: one per k, the best k's envelope, measured points if any, and a marker on the
    line at 1 where each k stops paying. Always the same traces in the same order, so a FigureWidget can take a
    new reading in place."""
    fig = figure(f"Speculation as the batch grows, alpha = {r.alpha:.2f}, c = {r.c:.2f}", "requests in one pass (b)",
                 "speedup over plain decoding")
    for i, k in enumerate(r.ks):
        fig.add_scatter(x=list(r.batches), y=r.curves[k], mode="lines+markers", name=f"k = {k}",
                        line=dict(color=COLORS["formula"], dash=DASHES[i % len(DASHES)]))
    fig.add_scatter(x=list(r.batches), y=r.best, mode="lines", name="best k at each b (SmartSpec)",
                    line=dict(color=COLORS["emitted"], width=5), opacity=0.35)
    if measured is not None:
        points = sorted(_measured(measured).items())
        fig.add_scatter(x=[b for b, _ in points], y=[s for _, s in points], mode="markers", name=measured_name,
                        marker=dict(size=12, color=COLORS["target"]))
    for k, b in r.stops.items():  # one trace per k, empty while k pays at every batch: the traces never change
        fig.add_scatter(x=[] if b is None else [b], y=[] if b is None else [1.0], mode="markers", showlegend=False,
                        name=f"k = {k} stops paying", marker=dict(size=14, symbol="x", color=LOSES))
    fig.add_hline(y=1, line_color=COLORS["plain"])
    fig.update_xaxes(type="log", tickvals=list(r.batches), ticktext=[str(b) for b in r.batches])
    fig.update_yaxes(rangemode="tozero")
    return fig


def batch_figure(alpha: float, c: float, pass_cost: Cost, batches: Sequence[int], ks: Sequence[int] = (1, 2, 3),
                 draft_cost: Cost | None = None, measured: Mapping[int, float] | None = None,
                 measured_name: str = "measured") -> Chart:
    """The figure of `batch_reading` at this alpha and c (no sliders: for a page, a test, a report)."""
    return reading_figure(batch_reading(alpha, c, pass_cost, batches, ks, draft_cost), measured, measured_name)


def explore_batch(pass_cost: Cost, batches: Sequence[int], alpha: float = 0.8, c: float = 0.1,
                  ks: Sequence[int] = (1, 2, 3), draft_cost: Cost | None = None,
                  measured: Mapping[int, float] | None = None, measured_name: str = "measured") -> Explorer:
    """Sliders for alpha (0 .. 1) and c (0 .. 1) over `batch_figure`, starting where the arguments say."""
    import ipywidgets as w  # here: the package imports without ipywidgets

    batch_reading(alpha, c, pass_cost, batches, ks, draft_cost)  # every argument checked before a widget is made
    if measured is not None:
        _measured(measured)
    style, layout = {"description_width": "14em"}, w.Layout(width="44em")
    sliders = {"alpha": w.FloatSlider(value=alpha, min=0, max=1, step=0.01, description="alpha (acceptance)",
                                      style=style, layout=layout),
               "c": w.FloatSlider(value=c, min=0, max=1, step=0.01, description="c (draft / target pass, b = 1)"
                                  if draft_cost is not None else "c (draft / target pass)", style=style,
                                  layout=layout)}
    return Explorer(sliders, lambda alpha, c: batch_reading(alpha, c, pass_cost, batches, ks, draft_cost),
                    lambda r: reading_figure(r, measured, measured_name))


# -- checks --------------------------------------------------------------------------------------------------------

def _ints(name: str, xs: Sequence[int]) -> tuple[int, ...]:
    """Increasing ints >= 1: batch sizes, or draft lengths."""
    if isinstance(xs, (str, bytes)) or not isinstance(xs, Sequence) or not xs or any(
            isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < 1 for x in xs) or list(xs) != sorted(
            set(xs)):
        raise ValueError(f"{name} must be increasing ints >= 1, got {xs!r}")
    return tuple(int(x) for x in xs)


def _cost(name: str, cost: Cost, needed: list[int]) -> Callable[[int], float]:
    """A function of the positions in a pass: `cost` itself, or a measured curve looked up, which must hold every
    position the curves need."""
    if callable(cost):
        return cost
    curve = _curve(cost)
    missing = sorted(set(needed) - set(curve))
    if missing:
        raise ValueError(f"{name} has no time for {missing[0]} positions in one pass, which these batches and k need "
                         f"(every b (k + 1), and b itself); it has {sorted(curve)}")
    return curve.__getitem__


def _measured(measured: Mapping[int, float]) -> dict[int, float]:
    if not isinstance(measured, Mapping) or any(
            isinstance(b, bool) or not isinstance(b, numbers.Integral) or b < 1 or isinstance(s, bool)
            or not isinstance(s, numbers.Real) or not s >= 0 for b, s in measured.items()):
        raise ValueError(f"measured must map batch sizes (ints >= 1) to measured speedups (numbers >= 0), got "
                         f"{measured!r:.120}")
    return {int(b): float(s) for b, s in measured.items()}


__all__ = ["BatchReading", "batch_figure", "batch_reading", "explore_batch", "reading_figure"]
