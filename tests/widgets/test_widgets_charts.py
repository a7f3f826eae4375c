"""Charts of a trace, and what following a generation live costs."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest

from helpers.views import PROMPTS, noisy_pair, record
from teachspec import theory
from teachspec.engine import Engine
from teachspec.events import EventLog, Verify
from teachspec.widgets import charts
from teachspec.widgets.measure import Running, steps


@pytest.fixture(scope="module")
def pair():
    return noisy_pair()


@pytest.fixture(scope="module")
def log(pair):
    return record(pair).events


def test_each_chart_draws_a_log(log):
    for chart in (charts.acceptance_by_position, charts.tokens_per_pass, charts.timeline, charts.cache_over_time):
        fig = chart(log)
        assert isinstance(fig, go.Figure) and fig.data, chart.__name__
        assert not fig.layout.annotations or "no " not in fig.layout.annotations[0].text


def test_each_chart_of_an_empty_log_says_there_is_nothing():
    for chart in (charts.acceptance_by_position, charts.tokens_per_pass, charts.timeline, charts.cache_over_time):
        fig = chart(EventLog())
        assert not fig.data and fig.layout.annotations[0].text.startswith("no "), chart.__name__


def test_the_charts_numbers_agree_with_the_engines_stats(pair):
    engine = Engine(pair, cache_tokens=0)
    out = engine.generate(PROMPTS[0], 40, temperature=1.0, k=3, seed=0)
    bars = charts.acceptance_by_position(engine.events).data[0]
    assert list(bars.y) == pytest.approx(out.stats.acceptance_per_position)
    counts = charts.tokens_per_pass(engine.events).data[0].x
    assert sum(counts) == len(out.tokens) and len(counts) == out.stats.target_passes
    running = Running()
    for e in engine.events:
        running.add(e)
    assert running.emitted == len(out.tokens) and running.accepted == out.stats.accepted
    assert running.predicted == pytest.approx(float(theory.speedup(running.alpha, 3, running.c)), abs=1e-4)
    assert sum(s.emitted for s in steps(engine.events)) == len(out.tokens)


def test_the_cache_chart_follows_the_trees_size_and_hit_rate(log):
    fig = charts.cache_over_time(log)
    cached, locked, hits = fig.data
    assert max(cached.y) <= 40 and min(locked.y) == 0
    assert all(0 <= h <= 1 for h in hits.y) and max(hits.y) > 0  # later prompts reuse earlier ones


def test_speedup_against_k_needs_the_plain_baseline(pair):
    runs = {}
    for k in (0, 1, 3):
        engine = Engine(pair, cache_tokens=0)
        engine.generate(PROMPTS[0], 16, temperature=1.0, speculate="model" if k else None, k=k, seed=0)
        runs[k] = engine.events
    fig = charts.speedup_vs_k(runs)
    measured, formula = fig.data
    assert list(measured.x) == [0, 1, 3] and measured.y[0] == 1
    assert list(formula.x) == list(range(6)) and formula.y[0] == 1
    with pytest.raises(ValueError, match="include k = 0"):
        charts.speedup_vs_k({1: runs[1]})



# -- one style, and a static picture of every chart -----------------------------------------------------------------

def _svg(fig):
    import xml.etree.ElementTree as ET
    text = fig.to_svg()
    return text, ET.fromstring(text)  # a well-formed SVG document, or this raises


def test_every_chart_is_one_style_and_carries_its_picture(log, monkeypatch):
    import plotly.io as pio

    monkeypatch.setattr(pio.renderers, "default", "plotly_mimetype")  # as in a Jupyter kernel
    for chart in (charts.acceptance_by_position, charts.tokens_per_pass, charts.timeline, charts.cache_over_time):
        fig = chart(log)
        assert isinstance(fig, charts.Chart), chart.__name__
        assert fig.layout.font.size >= 14 and fig.layout.title.font.size > fig.layout.font.size, chart.__name__
        assert fig.layout.legend.orientation == "h" and fig.layout.legend.y > 1, chart.__name__  # above the plot
        bundle = fig._repr_mimebundle_()
        assert "application/vnd.plotly.v1+json" in bundle and bundle["image/svg+xml"] == fig.to_svg()
        text, root = _svg(fig)
        assert fig.layout.title.text in text, chart.__name__
        for trace in fig.data:
            assert trace.name in text, (chart.__name__, trace.name)
        sizes = [float(e.get("font-size")) for e in root.iter() if e.get("font-size")]
        assert sizes and min(sizes) >= 14, (chart.__name__, sizes)


def test_the_same_thing_has_the_same_colour_in_every_chart(log):
    timeline = {t.name: t.marker.color for t in charts.timeline(log).data}
    cached, locked, hits = charts.cache_over_time(log).data
    assert timeline == {"draft": charts.COLORS["draft"], "target": charts.COLORS["target"]}
    assert charts.acceptance_by_position(log).data[0].marker.color == charts.COLORS["draft"]
    assert locked.line.color == charts.COLORS["in_use"] != charts.COLORS.get("rejected", "#dc2626")
    assert cached.line.color == charts.COLORS["target"] and hits.marker.color == charts.COLORS["hit"]


def test_the_picture_draws_the_figures_data():
    from teachspec.widgets.chartsvg import figure_svg

    fig = charts.figure("bars", "x", "y")
    fig.add_bar(x=[0, 1, 2], y=[0.5, 1.0, 0.25], name="b", marker_color="#123456")
    fig.add_scatter(x=[0, 1, 2], y=[1, 2, 3], name="s", mode="lines+markers", line=dict(color="#654321", dash="dash"),
                    yaxis="y2")
    fig.add_hline(y=0.75, line_color="#abcdef", annotation_text="a line")
    fig.update_layout(yaxis2=dict(overlaying="y", side="right", title="right"))
    text, root = _svg(fig)
    ns = "{http://www.w3.org/2000/svg}"
    bars = [r for r in root.iter(ns + "rect") if r.get("fill") == "#123456"]
    assert len(bars) == 3 + 1  # three bars and the legend's swatch
    heights = [float(r.get("height")) for r in bars[1:]]  # bars[0] is the swatch, drawn first
    assert heights[1] == pytest.approx(2 * heights[0], rel=0.02)
    assert heights[2] == pytest.approx(heights[0] / 2, rel=0.02)
    line, = [p for p in root.iter(ns + "polyline") if p.get("stroke") == "#654321"]
    assert len(line.get("points").split()) == 3 and line.get("stroke-dasharray")
    assert [e for e in root.iter(ns + "line") if e.get("stroke") == "#abcdef"] and "a line" in text and "right" in text
    hist = charts.figure("h", "x", "y")
    hist.add_histogram(x=[1, 2, 2, 3, 3, 3], xbins=dict(start=0.5, end=3.5, size=1), marker_color="#111111", name="n")
    drawn = [float(r.get("height")) for r in _svg(hist)[1].iter(ns + "rect") if r.get("fill") == "#111111"][1:]
    assert drawn == pytest.approx([drawn[0], 2 * drawn[0], 3 * drawn[0]], rel=0.02)
    pie = charts.figure("p", "", "")
    pie.add_pie(values=[1, 2])
    assert "does not draw" in figure_svg(pie)  # left out, and said so, rather than drawn wrong


def test_a_chart_shows_the_alpha_and_c_it_is_given(pair):
    runs = {}
    for k in (0, 2):
        engine = Engine(pair, cache_tokens=0)
        engine.generate(PROMPTS[0], 12, temperature=1.0, speculate="model" if k else None, k=k, seed=0)
        runs[k] = engine.events
    measured, formula = charts.speedup_vs_k(runs, alpha=0.5, c=0.25).data
    assert "alpha = 0.50, c = 0.250" in formula.name
    assert list(formula.y) == pytest.approx([float(theory.speedup(0.5, k, 0.25)) for k in formula.x])
    pooled = Running()
    for e in runs[2]:
        if getattr(e, "step", 0) > 0:  # the steps after the first, as the measured points count them
            pooled.add(e)
    # judged guesses, by default; c against plain decoding's own target pass
    plain = [e.ms for e in runs[0].of(Verify) if e.step > 0]
    c = (pooled.draft_ms / pooled.drafted) / (sum(plain) / len(plain))
    assert f"alpha = {pooled.alpha:.2f}, c = {c:.3f}" in charts.speedup_vs_k(runs).data[1].name


def test_speedup_against_k_counts_the_steps_after_the_first_as_stats_do(pair):
    runs, decoding = {}, {}
    for k in (0, 2):
        engine = Engine(pair, cache_tokens=0)
        decoding[k] = engine.generate(PROMPTS[0], 24, speculate="model" if k else None, k=k, seed=0).stats.decoding
        runs[k] = engine.events
    measured = charts.speedup_vs_k(runs).data[0]
    # the chart's first step ends at its last event, Stats' a moment later: the same steps, within timing noise
    assert measured.y[1] == pytest.approx(decoding[2].tokens_per_s / decoding[0].tokens_per_s, rel=0.1)


def test_speedup_against_k_of_interleaved_rounds_marks_the_median_and_the_spread():
    times = {0: [10.0, 12.0, 11.0], 1: [8.0, 8.0, 5.5], 4: [5.0, 4.0, 5.5]}  # ms per token, round by round
    fig = charts.speedup_vs_k(times, alpha=0.8, c=0.1)
    measured, spread_1, spread_4, formula = fig.data
    assert list(measured.x) == [0, 1, 4] and list(measured.y) == pytest.approx([1.0, 1.5, 2.0])  # per-round ratios
    assert list(spread_1.y) == pytest.approx([1.25, 2.0]) and list(spread_4.y) == pytest.approx([2.0, 3.0])
    assert spread_1.showlegend and not spread_4.showlegend  # one legend entry for the spread lines
    assert "3 rounds" in measured.name and "alpha = 0.80, c = 0.100" in formula.name
    assert "slowest to fastest round" in fig.to_svg()
    with pytest.raises(ValueError, match="give the alpha and c"):
        charts.speedup_vs_k(times)
    with pytest.raises(ValueError, match="not a mix"):
        charts.speedup_vs_k({0: EventLog(), 1: [1.0]}, alpha=0.8, c=0.1)


def test_the_speculation_views_still_shows_every_token_with_its_verdict(pair):
    import xml.etree.ElementTree as ET

    from teachspec.widgets import SpeculationView
    from teachspec.widgets.svg import TOKEN_COLORS, visible

    engine = Engine(pair, cache_tokens=0)
    engine.generate(PROMPTS[0], 24, temperature=1.0, k=3, seed=0)
    view = SpeculationView(engine.events, decode=pair)
    root = ET.fromstring(view.to_svg())
    ns = "{http://www.w3.org/2000/svg}"
    tokens = [it for it in view.snapshot().items.values() if it.get("kind") in TOKEN_COLORS]
    chips = [r for r in root.iter(ns + "rect") if r.get("height") == "24"]
    assert len(chips) == len(tokens)  # one chip per token, the prompt as one
    for kind in {it["kind"] for it in tokens}:
        drawn = sum(r.get("stroke") == TOKEN_COLORS[kind][1] for r in chips)
        assert drawn == sum(it["kind"] == kind for it in tokens), kind
    struck = [e for e in root.iter(ns + "line") if e.get("stroke") == TOKEN_COLORS["rejected"][1]]
    assert len(struck) == sum(it["kind"] == "rejected" for it in tokens)
    assert visible("\n", 1) == "↵" and visible("  ", 1) == "␣␣" and visible(None, 7) == "#7"
    assert ET.fromstring(view.to_svg(frame=0)) is not None
    with pytest.raises(ValueError, match="frame must be"):
        view.to_svg(frame=len(view.frames))
