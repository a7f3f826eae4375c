"""Charts of a trace, as plotly figures: the numbers behind the views, over a whole run.

    acceptance_by_position(log)   how often guess i survives, against alpha^(i+1) from independent guesses
    tokens_per_pass(log)          histogram of tokens per target pass, against Eq. (1)'s mean
    timeline(log)                 draft and target passes on a time axis: where the wall time goes
    cache_over_time(log)          cached and locked tokens, and the hit rate of each lookup
    speedup_vs_k({k: log, ...})   measured speedup for several k, against theory.speedup

Each takes an EventLog and returns a `plotly.graph_objects.Figure`, which a notebook shows as it is (no widget
and no network needed). A log with nothing to plot gives a figure that says so.
"""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go

from teachspec import theory
from teachspec.events import Draft, EventLog, Evict, Finish, Insert, Lock, Match, Plain, RequestStart, Unlock, \
    Verify
from teachspec.widgets.measure import Running, steps

DRAFT, TARGET = "#8b5cf6", "#2563eb"


def _figure(title: str, x: str, y: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, template="plotly_white",
                      margin=dict(l=60, r=30, t=60, b=50), height=360)
    return fig


def _nothing(fig: go.Figure, what: str) -> go.Figure:
    fig.add_annotation(text=f"no {what} in this log", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return fig


def _running(log: EventLog) -> Running:
    running = Running()
    for e in log:
        running.add(e)
    return running


def acceptance_by_position(log: EventLog) -> go.Figure:
    """Share of drafts whose guess i was accepted; guess i survives only if guesses 0 .. i-1 did too."""
    fig = _figure("Acceptance by draft position", "position in the draft (i)", "accepted")
    drafted, accepted = [], []
    for s in steps(log):
        for i, ok in enumerate(s.accepted_at):
            if i == len(drafted):
                drafted.append(0)
                accepted.append(0)
            drafted[i] += 1
            accepted[i] += ok
    if not drafted:
        return _nothing(fig, "drafts")
    rates = [a / d for a, d in zip(accepted, drafted)]
    fig.add_bar(x=list(range(len(rates))), y=rates, name="measured", marker_color=DRAFT,
                text=[f"{a}/{d}" for a, d in zip(accepted, drafted)], textposition="outside")
    alpha = _running(log).alpha
    if alpha is not None:
        fig.add_scatter(x=list(range(len(rates))), y=[alpha ** (i + 1) for i in range(len(rates))],
                        name=f"alpha^(i+1), alpha = {alpha:.2f}", mode="lines+markers", line_dash="dash")
    fig.update_yaxes(range=[0, 1.1])
    return fig


def tokens_per_pass(log: EventLog) -> go.Figure:
    """How many tokens each target pass yielded: 1 .. k + 1."""
    fig = _figure("Tokens per target pass", "tokens emitted by one pass", "passes")
    counts = [s.emitted for s in steps(log) if s.emitted]
    if not counts:
        return _nothing(fig, "target passes")
    fig.add_histogram(x=counts, xbins=dict(start=0.5, end=max(counts) + 0.5, size=1), marker_color=TARGET,
                      name="passes")
    mean = sum(counts) / len(counts)
    fig.add_vline(x=mean, line_dash="solid", annotation_text=f"measured mean {mean:.2f}")
    running = _running(log)
    if running.alpha is not None:
        k = max(1, round(running.k))
        predicted = float(theory.expected_tokens(running.alpha, k))
        fig.add_vline(x=predicted, line_dash="dash", annotation_text=f"Eq. (1): {predicted:.2f}",
                      annotation_position="bottom right")
    fig.update_xaxes(dtick=1)
    return fig


def timeline(log: EventLog) -> go.Figure:
    """Every draft and target pass as a bar from its start to its end, in ms since the first one began."""
    fig = _figure("Where the time goes", "ms since the first pass began", "")
    passes = [(e, "draft" if isinstance(e, Draft) else "target") for e in log if isinstance(e, (Draft, Verify, Plain))]
    if not passes:
        return _nothing(fig, "draft or target passes")
    t0 = min(1e3 * e.t - e.ms for e, _ in passes)  # events are stamped when a pass ends
    for row, color in (("draft", DRAFT), ("target", TARGET)):
        mine = [e for e, r in passes if r == row]
        if mine:
            fig.add_bar(y=[row] * len(mine), x=[e.ms for e in mine], base=[1e3 * e.t - e.ms - t0 for e in mine],
                        orientation="h", name=row, marker_color=color,
                        customdata=[[e.request, e.step] for e in mine],
                        hovertemplate="request %{customdata[0]} step %{customdata[1]}: %{x:.2f} ms<extra></extra>")
    return fig


def cache_over_time(log: EventLog) -> go.Figure:
    """Tokens cached and locked after every cache event, and each lookup's hit rate (matched / prompt tokens)."""
    fig = _figure("Radix cache over time", "cache event", "tokens")
    prompts = {e.request: e.prompt_tokens for e in log if isinstance(e, RequestStart)}
    total = protected = 0
    xs, totals, locked, hits = [], [], [], []
    for e in log:
        if not isinstance(e, (Match, Insert, Evict, Lock, Unlock)):
            continue
        if isinstance(e, Insert) and e.node != -1:
            total += e.tokens
        elif isinstance(e, Evict):
            total -= e.tokens
        elif isinstance(e, (Lock, Unlock)):
            protected = e.protected
        elif isinstance(e, Match) and prompts.get(e.request):
            hits.append((len(xs), e.length / prompts[e.request]))
        xs.append(len(xs))
        totals.append(total)
        locked.append(protected)
    if not xs:
        return _nothing(fig, "radix cache events")
    fig.add_scatter(x=xs, y=totals, name="cached tokens", line_shape="hv", line_color=TARGET)
    fig.add_scatter(x=xs, y=locked, name="locked (in use)", line_shape="hv", line_color="#dc2626")
    if hits:
        fig.add_scatter(x=[x for x, _ in hits], y=[h for _, h in hits], name="hit rate of a lookup",
                        mode="markers", yaxis="y2", marker=dict(color="#16a34a", size=9))
        fig.update_layout(yaxis2=dict(title="hit rate", overlaying="y", side="right", range=[0, 1.05]))
    return fig


def speedup_vs_k(runs: Mapping[int, EventLog], k_max: int | None = None) -> go.Figure:
    """Measured speedup of each run over runs[0] (plain decoding, k = 0) against theory.speedup.

    The curve uses alpha and c pooled over the runs that speculate. One engine (so one log) per k:

        runs = {}
        for k in (0, 1, 2, 4, 8):
            engine = Engine(pair)
            engine.generate(prompt, 64, speculate="model" if k else None, k=k)
            runs[k] = engine.events
    """
    if not isinstance(runs, Mapping) or 0 not in runs:
        got = sorted(runs) if isinstance(runs, Mapping) else type(runs).__name__
        raise ValueError(f"runs must map draft lengths k to EventLogs and include k = 0, the plain-decoding "
                         f"baseline every speedup is measured against; got {got}")
    fig = _figure("Speedup against k", "draft length k", "speedup over plain decoding")
    rate = {k: _tokens_per_s(log) for k, log in runs.items()}
    if not rate[0]:
        return _nothing(fig, "finished requests in the k = 0 run")
    ks = sorted(k for k in runs if rate[k])
    fig.add_scatter(x=ks, y=[rate[k] / rate[0] for k in ks], mode="markers", name="measured",
                    marker=dict(size=11, color=TARGET))
    pooled = Running()
    for k, log in runs.items():
        if k:
            for e in log:
                pooled.add(e)
    if pooled.alpha is not None and pooled.c is not None:
        grid = list(range(0, (k_max if k_max is not None else max(ks) + 2) + 1))
        fig.add_scatter(x=grid, y=[float(theory.speedup(pooled.alpha, k, pooled.c)) for k in grid], mode="lines",
                        name=f"Theorem 3.8: alpha = {pooled.alpha:.2f}, c = {pooled.c:.3f}", line_dash="dash")
    fig.add_hline(y=1, line_color="#9ca3af")
    return fig


def _tokens_per_s(log: EventLog) -> float | None:
    finished = log.of(Finish)
    ms = sum(e.ms for e in finished)
    return sum(e.new_tokens for e in finished) / (ms / 1e3) if ms > 0 else None
