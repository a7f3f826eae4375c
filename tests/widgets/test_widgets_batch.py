"""Speculation against the batch size (teachspec/widgets/batch.py): every curve drawn is theory.batch_speedup, each
k's marker sits where theory.batch_crossover says, measured points are drawn as given, the sliders redraw in place,
and a bad argument is refused with its name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from teachspec import theory
from teachspec.widgets import batch, batch_figure, explore_batch
from teachspec.widgets.batch import batch_reading

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
# ms of one target pass over n positions, measured on two CPU cores (lecture 13's curve, rounded): flat, then rising
MEASURED = {1: 4.0, 2: 4.1, 3: 4.2, 4: 4.3, 6: 4.6, 8: 4.8, 12: 5.6, 16: 6.4, 24: 8.4, 32: 10.0, 48: 14.0, 64: 18.0,
            96: 26.0, 128: 34.0, 192: 50.0, 256: 66.0, 384: 98.0, 512: 130.0}
DRAFT = {1: 0.8, 2: 0.8, 4: 0.85, 8: 0.9, 16: 1.0, 32: 1.3, 64: 1.9, 128: 3.1}


def knee(n):
    return max(1.0, n / 64)


@pytest.mark.parametrize("alpha, c", [(0.8, 0.05), (0.6, 0.2), (0.3, 0.4), (0.95, 0.0)])
def test_every_curve_is_theorys(alpha, c):
    fig = batch_figure(alpha, c, knee, BATCHES, ks=(1, 2, 4))
    names = [t.name for t in fig.data]
    assert names == ["k = 1", "k = 2", "k = 4", "best k at each b (SmartSpec)", "k = 1 stops paying",
                     "k = 2 stops paying", "k = 4 stops paying"]
    for trace, k in zip(fig.data, (1, 2, 4)):
        assert list(trace.x) == list(BATCHES)
        assert list(trace.y) == pytest.approx([theory.batch_speedup(alpha, k, c, knee, b) for b in BATCHES])
    envelope = fig.data[3]
    assert list(envelope.y) == pytest.approx([max(1.0, *(theory.batch_speedup(alpha, k, c, knee, b)
                                                         for k in (1, 2, 4))) for b in BATCHES])
    for trace, k in zip(fig.data[4:], (1, 2, 4)):
        stop = theory.batch_crossover(alpha, c, knee, k=k, batches=BATCHES)
        assert list(trace.x) == ([] if stop is None else [stop])


def test_a_measured_curve_and_measured_points():
    r = batch_reading(0.8, 0.1, MEASURED, BATCHES, draft_cost=DRAFT)
    for k in (1, 2, 3):  # the curve is looked up, c scaled by both curves at every b
        assert r.curves[k] == pytest.approx([theory.batch_speedup(0.8, k, 0.1, MEASURED.get, b, DRAFT.get)
                                             for b in BATCHES])
        assert r.stops[k] == theory.batch_crossover(0.8, 0.1, MEASURED.get, k=k, batches=BATCHES,
                                                    draft_cost=DRAFT.get)
    assert r.best_k == [theory.batch_optimal_k(0.8, 0.1, MEASURED.get, b, 3, DRAFT.get) for b in BATCHES]
    assert r.best_k[0] > r.best_k[-1]  # the best k falls as the batch grows
    assert r.best_stops == theory.batch_crossover(0.8, 0.1, MEASURED.get, batches=BATCHES, k_max=3,
                                                  draft_cost=DRAFT.get)
    fig = batch_figure(0.8, 0.1, MEASURED, BATCHES, draft_cost=DRAFT, measured={1: 1.7, 8: 1.2, 32: 0.9},
                       measured_name="vLLM, k = 3")
    points, = [t for t in fig.data if t.name == "vLLM, k = 3"]
    assert (list(points.x), list(points.y)) == ([1, 8, 32], [1.7, 1.2, 0.9])
    assert fig.layout.xaxis.type == "log" and list(fig.layout.xaxis.tickvals) == list(BATCHES)
    assert "<svg" in fig.to_svg()  # a page with no plotly.js shows the picture


def test_the_readout_says_where_each_k_stops():
    r = batch_reading(0.8, 0.05, knee, BATCHES)
    assert r.stops == {1: 64, 2: 64, 3: 64} and r.best_stops == 64
    assert "k = 3 at b = <b>64</b>" in r.html() and "From b = 64 no k pays" in r.html()
    never = batch_reading(0.8, 0.05, lambda n: 1.0, BATCHES)  # a flat pass: Theorem 3.8 at every b
    assert never.stops == {1: None, 2: None, 3: None} and "k = 3 pays at every b" in never.html()


def test_the_sliders_redraw_in_place():
    pytest.importorskip("ipywidgets")
    e = explore_batch(knee, BATCHES, alpha=0.8, c=0.05, measured={4: 1.5})
    traces = len(e.figure.data)
    e.sliders["alpha"].value, e.sliders["c"].value = 0.5, 0.3
    assert (e.reading.alpha, e.reading.c) == (0.5, 0.3)
    assert len(e.figure.data) == traces
    assert list(e.figure.data[2].y) == pytest.approx([theory.batch_speedup(0.5, 3, 0.3, knee, b) for b in BATCHES])
    stop = theory.batch_crossover(0.5, 0.3, knee, k=3, batches=BATCHES)
    assert list(e.figure.data[-1].x) == ([] if stop is None else [stop])
    assert "alpha = 0.50, c = 0.30" in e.figure.layout.title.text


@pytest.mark.parametrize("call, match", [
    (lambda: batch_reading(1.2, 0.1, knee, BATCHES), "alpha must be a number in"),
    (lambda: batch_reading(0.8, 2.0, knee, BATCHES), "c must be a number in"),
    (lambda: batch_reading(0.8, 0.1, knee, (4, 2)), "batches must be increasing ints >= 1"),
    (lambda: batch_reading(0.8, 0.1, knee, ()), "batches must be increasing ints >= 1"),
    (lambda: batch_reading(0.8, 0.1, knee, BATCHES, ks=(0, 1)), "ks must be increasing ints >= 1"),
    (lambda: batch_reading(0.8, 0.1, {1: 1.0, 2: 1.0}, (1, 2)), "pass_cost has no time for 3 positions"),
    (lambda: batch_reading(0.8, 0.1, knee, (1, 2), draft_cost={1: 1.0}), "draft_cost has no time for 2 positions"),
    (lambda: batch_reading(0.8, 0.1, {2: 1.0}, (1,)), "measured must include 1 position"),
    (lambda: batch_figure(0.8, 0.1, knee, BATCHES, measured={0: 1.0}), "measured must map batch sizes"),
    (lambda: explore_batch(knee, BATCHES, measured=[1.0]), "measured must map batch sizes"),
])
def test_bad_arguments_are_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_the_widget_does_not_reach_into_the_engine():
    """The layers allow a widget to import the engine; a figure of theory has no reason to."""
    tree = ast.parse(Path(batch.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not {m for m in imported if m.startswith(("teachspec.engine", "teachspec.bench", "teachspec.serving"))}
