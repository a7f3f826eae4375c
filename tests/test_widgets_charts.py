"""Charts of a trace, and what following a generation live costs."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest

from test_widgets import PROMPTS, make_pair, record
from teachspec import theory
from teachspec.engine import Engine
from teachspec.events import EventLog
from teachspec.widgets import charts
from teachspec.widgets.measure import Running, steps


@pytest.fixture(scope="module")
def pair():
    return make_pair()


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

