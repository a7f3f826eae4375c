"""The sliders (teachspec/widgets/explore.py): what they show is what theory.py says, the region where speculation
loses is shaded and said exactly where it is, and a bad argument is refused with its name, its value and what is
allowed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from teachspec import theory
from teachspec.widgets import explore
from teachspec.widgets.explore import pass_cost_reading, speedup_figure, speedup_reading

pytest.importorskip("ipywidgets")

MEASURED = {1: 2.0, 2: 2.1, 4: 2.2, 8: 2.4, 16: 3.9, 32: 7.0}  # ms of one pass over n positions


def numbers_in(html: str) -> list[float]:
    return [float(x) for x in re.findall(r"<b>(\d+(?:\.\d+)?)[^<]*</b>", html)]


# -- explore_speedup -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("alpha, c, k", [(0.8, 0.05, 4), (0.825, 0.13, 6), (0.6, 0.3, 2), (0.2, 0.4, 3),
                                         (1.0, 0.0, 16), (0.0, 0.0, 0), (0.5, 0.5, 1)])
def test_the_numbers_shown_are_theorys_at_every_slider_position(alpha, c, k):
    e = explore.explore_speedup()  # moved from the defaults, as a student drags
    e.sliders["alpha"].value, e.sliders["c"].value, e.sliders["k"].value = alpha, c, k
    r = e.reading
    assert (r.alpha, r.c, r.k) == (alpha, c, k)
    assert r.tokens == pytest.approx(theory.expected_tokens(alpha, k))
    assert r.speedup == pytest.approx(theory.speedup(alpha, k, c))
    assert r.best_k == theory.optimal_k(alpha, c, 16)
    assert r.best_speedup == pytest.approx(theory.speedup(alpha, r.best_k, c))
    shown = numbers_in(e.readout.value)  # tokens, speedup, best k, best speedup, as the readout prints them
    assert shown == [round(r.tokens, 2), round(r.speedup, 2), r.best_k, round(r.best_speedup, 2)]
    # the chart: the curve, this k and the best k, redrawn in place
    curve, here, best = e.figure.data
    assert list(curve.y) == pytest.approx([theory.speedup(alpha, j, c) for j in range(17)])
    assert (here.x[0], here.y[0]) == (k, pytest.approx(r.speedup))
    assert (best.x[0], best.y[0]) == (r.best_k, pytest.approx(r.best_speedup))
    assert f"alpha = {alpha:.2f}, c = {c:.2f}" in e.figure.layout.title.text


def test_the_paper_example_reads_as_theory_py_states_it():
    r = speedup_reading(0.8, 0.05, 4)
    assert (round(r.tokens, 4), round(r.speedup, 2), r.best_k, round(r.best_speedup, 2)) == (3.3616, 2.8, 8, 3.09)
    assert not r.loses and not r.never_wins


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.25, 0.4, 0.55, 0.7, 0.85, 1.0])
@pytest.mark.parametrize("c", [0.0, 0.05, 0.3, 0.55, 0.8, 1.0])
def test_no_k_wins_exactly_where_alpha_is_at_most_c(alpha, c):
    r = speedup_reading(alpha, c, 1)
    wins = [j for j in range(1, 17) if r.curve[j] > 1 + 1e-12]
    assert r.never_wins == (alpha <= c) == (not wins), (alpha, c, wins)
    if r.never_wins:
        assert r.best_k == 0 and r.best_speedup == 1
        assert "no k beats plain decoding" in r.html()
    else:
        assert r.curve[1] > 1  # the corollary: k = 1 already wins


def test_a_losing_k_is_said_and_the_losing_band_is_shaded():
    r = speedup_reading(0.6, 0.3, 12)  # alpha > c, so some k wins, but not a draft this long
    assert r.speedup < 1 and r.loses and not r.never_wins
    assert "At k = 12 speculation loses" in r.html()
    fig = speedup_figure(r)
    band, = [s for s in fig.layout.shapes if s.type == "rect"]
    assert (band.y0, band.y1) == (0, 1)
    assert any("loses" in a.text for a in fig.layout.annotations)
    winning = speedup_reading(0.6, 0.3, 2)
    assert not winning.loses and "loses" not in winning.html()
    never = speedup_figure(speedup_reading(0.2, 0.4, 3))
    assert any("alpha ≤ c" in a.text for a in never.layout.annotations)


def test_the_figure_keeps_its_traces_as_the_sliders_move():
    e = explore.explore_speedup(alpha=0.9, c=0.02, k=8)
    traces = [id(t) for t in e.figure.data]
    e.sliders["c"].value = 0.95
    assert [id(t) for t in e.figure.data] == traces  # updated in place: the browser restyles, it does not redraw
    assert e.figure.layout.annotations[0].text.startswith("alpha ≤ c")
    assert e.figure.layout.yaxis.range[1] == pytest.approx(1.5)


@pytest.mark.parametrize("kwargs, name, allowed", [
    ({"alpha": 1.5}, "alpha", "[0, 1]"), ({"alpha": -0.1}, "alpha", "[0, 1]"), ({"alpha": "high"}, "alpha", "[0, 1]"),
    ({"alpha": True}, "alpha", "[0, 1]"), ({"c": 1.2}, "c", "[0, 1]"), ({"c": -0.01}, "c", "[0, 1]"),
    ({"k": 17}, "k", "[0, 16]"), ({"k": -1}, "k", "[0, 16]"), ({"k": 2.5}, "k", "[0, 16]"),
    ({"k_max": 0}, "k_max", "[1, 64]"), ({"k_max": 65}, "k_max", "[1, 64]"), ({"k": 9, "k_max": 8}, "k", "[0, 8]")])
def test_a_bad_argument_is_refused_naming_it_its_value_and_what_is_allowed(kwargs, name, allowed):
    (key, value), = [(k, v) for k, v in kwargs.items() if k == name]
    with pytest.raises(ValueError) as refused:
        explore.explore_speedup(**kwargs)
    message = str(refused.value)
    assert message.startswith(f"{name} must be") and repr(value) in message and allowed in message, message


# -- explore_pass_cost ---------------------------------------------------------------------------------------------

def test_the_pass_cost_shown_is_the_measured_curves():
    e = explore.explore_pass_cost(MEASURED)
    assert list(e.sliders["n"].options) == sorted(MEASURED)
    assert e.reading.n == 8  # starts at 8 positions, where it was measured
    for n in MEASURED:
        e.sliders["n"].value = n
        cost = MEASURED[n] / MEASURED[1]
        assert e.reading.cost == pytest.approx(cost)
        assert numbers_in(e.readout.value) == [n, MEASURED[n], round(cost, 2), round(n / cost, 1)]
        assert f"{n * MEASURED[1]:.2f} ms" in e.readout.value
        marker = e.figure.data[2]
        assert (marker.x[0], marker.y[0]) == (n, MEASURED[n])
    assert list(e.figure.data[1].y) == [n * MEASURED[1] for n in sorted(MEASURED)]  # the line it does not follow


def test_the_pass_cost_slider_starts_in_the_middle_without_8():
    e = explore.explore_pass_cost({1: 1.0, 2: 1.1, 3: 1.3})
    assert e.reading.n == 2


@pytest.mark.parametrize("measured, words", [
    ({}, "measured must map positions"), ([1.0, 2.0], "measured must map positions"),
    ({2: 1.0, 4: 1.1}, "must include 1 position"), ({1: 1.0, 0: 1.0}, "positions must be ints >= 1, got 0"),
    ({1: 1.0, 2.5: 1.0}, "positions must be ints >= 1, got 2.5"),
    ({1: 1.0, 2: -3.0}, "measured[2] must be a time > 0, got -3.0"),
    ({1: float("nan")}, "measured[1] must be a time > 0, got nan")])
def test_a_bad_curve_is_refused(measured, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        explore.explore_pass_cost(measured)


def test_a_position_that_was_not_measured_is_refused():
    words = "n must be one of the measured positions [1, 2, 4, 8, 16, 32], got 3"
    with pytest.raises(ValueError, match=re.escape(words)):
        pass_cost_reading(MEASURED, 3)
    with pytest.raises(ValueError, match="got 5"):
        explore.explore_pass_cost(MEASURED, n=5)


# -- the package ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("module", ["explore.py", "predict.py"])
def test_ipywidgets_is_imported_only_inside_functions(module):
    """So the module imports without ipywidgets, and its plain functions (the readings, the figures) work."""
    tree = ast.parse((Path(explore.__file__).parent / module).read_text())
    top = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    names = [a.name for node in top for a in node.names] + [node.module or "" for node in top
                                                           if isinstance(node, ast.ImportFrom)]
    assert not [n for n in names if n.startswith("ipywidgets")], names


def test_the_sliders_text_is_readable_at_a_projector():
    e = explore.explore_speedup()
    style = e.widget.children[0]
    assert "teachspec-explore" in e.widget._dom_classes and "--jp-widgets-font-size: 16px" in style.value


def test_a_page_that_runs_nothing_shows_the_chart_where_the_sliders_start():
    """A kept output (teachspec/course/pin.py) has no slider to move, but it has the chart they start from."""
    import xml.etree.ElementTree as ET

    from teachspec.widgets import explore_speedup

    bundle = explore_speedup(alpha=0.8, c=0.05, k=4)._repr_mimebundle_()
    svg = bundle["image/svg+xml"]
    ET.fromstring(svg)
    assert "alpha = 0.80" in svg and bundle["text/plain"].startswith("Explorer: alpha = 0.8")
