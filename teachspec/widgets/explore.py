"""Numbers worth feeling: sliders the student drags, and what the formulas say at every position.

    explore_speedup(alpha=0.8, c=0.05, k=4)     alpha, c and k: Eq. (1)'s tokens per target pass, Theorem 3.8's
                                                speedup, the speedup against k with the best k marked, and where
                                                speculation loses (speedup < 1), shaded and said
    explore_pass_cost(dict(zip(positions, ms))) n, the positions in one pass, over a measured pass-cost curve
                                                (lecture 1's): one pass over n against n passes over one

Each returns an `Explorer`: ipywidgets sliders, a readout and a plotly chart (a FigureWidget, updated in place),
redrawn whenever a slider moves. The numbers come from plain functions (`speedup_reading`, `pass_cost_reading`) and
the charts from `speedup_figure` and `pass_cost_figure`, so a test or a page with no widgets can call them.

Where speculation loses (Leviathan et al. 2023, Theorem 3.8 and its corollary). A step of draft length k costs
1 + k c target passes and emits 1 + alpha + ... + alpha^k tokens on average, so

    speedup(k) = (1 + alpha + ... + alpha^k) / (1 + k c).

Each alpha^i <= alpha, so the numerator is at most 1 + k alpha: when alpha <= c no k >= 1 beats plain decoding,
and the best k is 0. When alpha > c, k = 1 already wins, (1 + alpha) / (1 + c) > 1, and the best k balances what
one more guess adds (alpha^k, less and less) against what it costs (c, every time). Past the best k the speedup
falls, and far enough past it speculation loses even where alpha > c.

The sliders show their text at 16 px (the course's size at a projector's 1280 x 720), not ipywidgets' 13 px.
"""

from __future__ import annotations

import html
import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from teachspec import theory
from teachspec.widgets.charts import COLORS, Chart, figure
from teachspec.widgets.chartsvg import figure_svg
from teachspec.widgets.predict import readable

LOSES = "#b91c1c"   # the band and the words where speculation is slower than plain decoding
K_MAX = 64          # the longest draft a slider offers: past that every curve here is flat or falling


# -- the numbers ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SpeedupReading:
    """What theory.py says at one position of the sliders."""

    alpha: float
    c: float
    k: int
    k_max: int
    tokens: float         # Eq. (1): expected tokens per target pass at k
    speedup: float        # Theorem 3.8 at k
    best_k: int           # theory.optimal_k over 0 .. k_max (ties to the shorter draft)
    best_speedup: float
    curve: list[float]    # speedup at k = 0 .. k_max

    @property
    def never_wins(self) -> bool:
        """alpha <= c: no k >= 1 beats plain decoding (the module docstring)."""
        return self.alpha <= self.c

    @property
    def loses(self) -> bool:
        """Speculating with this k is slower than plain decoding."""
        return self.speedup < 1

    def html(self) -> str:
        lines = [f"Eq. 1: <b>{self.tokens:.2f}</b> tokens per target pass at k = {self.k}",
                 f"Theorem 3.8: <b>{self.speedup:.2f}x</b> the speed of plain decoding "
                 f"(a step costs 1 + k c = {1 + self.k * self.c:.2f} target passes)",
                 f"Best k for this alpha and c: <b>{self.best_k}</b>, at <b>{self.best_speedup:.2f}x</b>"]
        if self.never_wins:
            lines.append(f"<b style='color: {LOSES}'>alpha &le; c: no k beats plain decoding.</b> A guess is accepted "
                         f"with probability {self.alpha:.2f} but always costs {self.c:.2f} of a target pass.")
        elif self.loses:
            lines.append(f"<b style='color: {LOSES}'>At k = {self.k} speculation loses</b>: its last guesses rarely "
                         f"survive, yet each costs c.")
        return "<br>".join(lines)


def speedup_reading(alpha: float, c: float, k: int, k_max: int = 16) -> SpeedupReading:
    """Eq. (1), Theorem 3.8 and the best k at one position of the sliders; every argument is checked."""
    k_max = _int("k_max", k_max, 1, K_MAX)
    alpha, c, k = _unit("alpha", alpha), _unit("c", c), _int("k", k, 0, k_max)
    curve = [theory.speedup(alpha, j, c) for j in range(k_max + 1)]
    best = theory.optimal_k(alpha, c, k_max)
    return SpeedupReading(alpha, c, k, k_max, theory.expected_tokens(alpha, k), curve[k], best, curve[best], curve)


@dataclass(frozen=True, slots=True)
class PassCostReading:
    """One point of a measured pass-cost curve: a pass over n positions against one over a single position."""

    n: int
    ms: float             # one pass over n positions
    one_ms: float         # one pass over a single position
    unit: str = "ms"

    @property
    def cost(self) -> float:
        """The pass over n in passes over one: what Theorem 3.8 takes to be 1."""
        return self.ms / self.one_ms

    def html(self) -> str:
        u = html.escape(self.unit)
        return "<br>".join([
            f"One pass over <b>{self.n}</b> positions: <b>{self.ms:.2f} {u}</b>, <b>{self.cost:.2f}x</b> a pass over "
            f"one ({self.one_ms:.2f} {u})",
            f"{self.n} passes over one position, one token at a time: {self.n * self.one_ms:.2f} {u}",
            f"So checking {self.n} guesses in one pass costs {self.cost:.2f} passes instead of {self.n}: "
            f"<b>{self.n / self.cost:.1f}x</b> cheaper, when the guesses are right"])


def pass_cost_reading(measured: Mapping[int, float], n: int, unit: str = "ms") -> PassCostReading:
    """The measured curve at n positions (one of its keys)."""
    curve = _curve(measured)
    if isinstance(n, bool) or n not in curve:
        raise ValueError(f"n must be one of the measured positions {sorted(curve)}, got {n!r}")
    return PassCostReading(n, curve[n], curve[1], unit)


# -- the charts ----------------------------------------------------------------------------------------------------

def speedup_figure(r: SpeedupReading) -> Chart:
    """Theorem 3.8 against k for this alpha and c: this k and the best k marked, the band where speculation
    loses (below 1) shaded. Always the same three traces, so a FigureWidget can take a new reading in place."""
    ks = list(range(r.k_max + 1))
    fig = figure(f"Theorem 3.8 at alpha = {r.alpha:.2f}, c = {r.c:.2f}", "draft length k",
                 "speedup over plain decoding", height=340)
    fig.add_scatter(x=ks, y=r.curve, mode="lines+markers", name="speedup(k)", line_color=COLORS["formula"])
    fig.add_scatter(x=[r.k], y=[r.speedup], mode="markers", name=f"k = {r.k}: {r.speedup:.2f}x",
                    marker=dict(size=16, color=COLORS["target"]))
    fig.add_scatter(x=[r.best_k], y=[r.best_speedup], mode="markers", name=f"best k = {r.best_k}: "
                    f"{r.best_speedup:.2f}x", marker=dict(size=18, symbol="star", color=COLORS["emitted"]))
    top = max(1.5, 1.15 * r.best_speedup)
    fig.add_hrect(y0=0, y1=1, fillcolor=LOSES, opacity=0.12, line_width=0)
    fig.add_hline(y=1, line_color=COLORS["plain"])
    fig.add_annotation(x=r.k_max / 2, y=0.5, showarrow=False, font_color=LOSES, bgcolor="rgba(255, 255, 255, 0.8)",
                       text="alpha ≤ c: no k > 0 beats plain decoding" if r.never_wins
                       else "below 1: speculation loses")
    fig.update_yaxes(range=[0, top])
    fig.update_xaxes(range=[-0.5, r.k_max + 0.5])
    return fig


def pass_cost_figure(measured: Mapping[int, float], r: PassCostReading) -> Chart:
    """The measured curve, the line it would follow if a pass cost grew with its positions, and n marked."""
    curve = _curve(measured)
    ns = sorted(curve)
    fig = figure("One pass over n positions", "positions in one pass (n)", r.unit, height=340)
    fig.add_scatter(x=ns, y=[curve[n] for n in ns], mode="lines+markers", name="measured",
                    line_color=COLORS["target"])
    fig.add_scatter(x=ns, y=[n * curve[1] for n in ns], mode="lines", name="if cost grew with positions",
                    line=dict(dash="dot", color=COLORS["plain"]))
    fig.add_scatter(x=[r.n], y=[r.ms], mode="markers", name=f"n = {r.n}: {r.cost:.2f}x",
                    marker=dict(size=16, color=COLORS["formula"]))
    fig.update_yaxes(range=[0, 4 * max(curve.values())])
    return fig


# -- the widgets ---------------------------------------------------------------------------------------------------

class Explorer:
    """Sliders, a readout and a chart, redrawn whenever a slider moves.

    sliders  name -> ipywidgets slider; set `explorer.sliders["alpha"].value = 0.3` to move one from Python
    reading  what the readout shows now (a SpeedupReading or a PassCostReading)
    figure   the chart, a plotly FigureWidget
    widget   the whole form, what the notebook shows"""

    def __init__(self, sliders: dict, read: Callable, draw: Callable):
        import ipywidgets as w  # here: the package imports without ipywidgets
        import plotly.graph_objects as go

        self.sliders, self._read, self._draw = sliders, read, draw
        self.reading = read(**self.values)
        self.readout = w.HTML(self.reading.html())
        self.figure = go.FigureWidget(draw(self.reading))
        for slider in sliders.values():
            slider.observe(self._moved, names="value")
        self.widget = readable(w.VBox([*sliders.values(), self.readout, self.figure]), "teachspec-explore")

    @property
    def values(self) -> dict:
        return {name: slider.value for name, slider in self.sliders.items()}

    def _moved(self, _change) -> None:
        self.reading = self._read(**self.values)
        self.readout.value = self.reading.html()
        fresh = self._draw(self.reading)
        with self.figure.batch_update():  # one message to the browser, the same traces with new numbers
            for old, new in zip(self.figure.data, fresh.data):
                old.update(x=new.x, y=new.y, name=new.name)
            self.figure.layout.update(title=fresh.layout.title, yaxis=fresh.layout.yaxis,
                                      annotations=fresh.layout.annotations)

    def _repr_mimebundle_(self, include=None, exclude=None):
        """The sliders; and for a page that runs nothing, the chart where they start, as SVG (chartsvg.py)."""
        text = "Explorer: " + ", ".join(f"{k} = {v}" for k, v in self.values.items())
        return {**self.widget._repr_mimebundle_(include=include, exclude=exclude), "text/plain": text,
                "image/svg+xml": figure_svg(self._draw(self.reading))}


def explore_speedup(alpha: float = 0.8, c: float = 0.05, k: int = 4, k_max: int = 16) -> Explorer:
    """Sliders for alpha (0 .. 1), c (0 .. 1) and k (0 .. k_max), starting where the arguments say: Eq. (1),
    Theorem 3.8, the best k and the speedup curve at each position; where speculation loses, shaded and said."""
    import ipywidgets as w

    speedup_reading(alpha, c, k, k_max)  # every argument checked before any widget is made
    style, layout = {"description_width": "14em"}, w.Layout(width="44em")

    def slider(kind, value, description, **range_):
        return kind(value=value, description=description, style=style, layout=layout, continuous_update=True,
                    **range_)

    sliders = {"alpha": slider(w.FloatSlider, alpha, "alpha (acceptance)", min=0, max=1, step=0.01),
               "c": slider(w.FloatSlider, c, "c (draft / target pass)", min=0, max=1, step=0.01),
               "k": slider(w.IntSlider, k, "k (draft length)", min=0, max=k_max)}
    return Explorer(sliders, lambda alpha, c, k: speedup_reading(alpha, c, k, k_max), speedup_figure)


def explore_pass_cost(measured: Mapping[int, float], n: int | None = None, unit: str = "ms") -> Explorer:
    """A slider over the measured positions of a pass-cost curve, {positions: time of one pass}, which must
    include 1 (the pass of plain decoding); n starts at 8 when it was measured, else at the middle position."""
    import ipywidgets as w

    curve = _curve(measured)
    ns = sorted(curve)
    n = n if n is not None else (8 if 8 in curve else ns[len(ns) // 2])
    pass_cost_reading(curve, n, unit)  # n checked
    sliders = {"n": w.SelectionSlider(options=ns, value=n, description="positions in one pass",
                                      style={"description_width": "14em"}, layout=w.Layout(width="44em"))}
    return Explorer(sliders, lambda n: pass_cost_reading(curve, n, unit),
                    lambda r: pass_cost_figure(curve, r))


# -- checks --------------------------------------------------------------------------------------------------------

def _unit(name: str, x) -> float:
    if isinstance(x, bool) or not isinstance(x, numbers.Real) or not 0 <= x <= 1:
        allowed = "(draft pass time / target pass time, the slider's range)" if name == "c" else "(a probability)"
        raise ValueError(f"{name} must be a number in [0, 1] {allowed}, got {x!r}")
    return float(x)


def _int(name: str, x, low: int, high: int) -> int:
    if isinstance(x, bool) or not isinstance(x, numbers.Integral) or not low <= x <= high:
        raise ValueError(f"{name} must be an int in [{low}, {high}], got {x!r}")
    return int(x)


def _curve(measured: Mapping[int, float]) -> dict[int, float]:
    """{positions: time} checked: int positions >= 1 including 1, finite times > 0."""
    if not isinstance(measured, Mapping) or not measured:
        raise ValueError(f"measured must map positions in one pass to the time of that pass, e.g. "
                         f"dict(zip(positions, ms)), got {type(measured).__name__} {measured!r:.80}")
    for n, t in measured.items():
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
            raise ValueError(f"measured's positions must be ints >= 1, got {n!r}")
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or not math.isfinite(t) or t <= 0:
            raise ValueError(f"measured[{n}] must be a time > 0, got {t!r}")
    if 1 not in measured:
        raise ValueError(f"measured must include 1 position (plain decoding's pass, what the others are compared "
                         f"with), got positions {sorted(measured)}")
    return {int(n): float(t) for n, t in measured.items()}


__all__ = ["Explorer", "explore_pass_cost", "explore_speedup", "pass_cost_figure", "pass_cost_reading",
           "speedup_figure", "speedup_reading"]
