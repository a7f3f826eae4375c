"""Charts of a trace, as plotly figures: the numbers behind the views, over a whole run.

    acceptance_by_position(log)   how often guess i survives, against alpha^(i+1) from independent guesses
    tokens_per_pass(log)          histogram of tokens per target pass, against Eq. (1)'s mean
                                  (both also read a serving engine's counters: a log of teachspec.serving.Watcher
                                  holds Counters events, not steps, and their totals give both charts exactly)
    timeline(log)                 draft and target passes on a time axis: where the wall time goes
    cache_over_time(log)          cached and locked tokens, and the hit rate of each lookup
    speedup_vs_k({k: log, ...})   measured speedup for several k, against theory.speedup; or, from an
                                  interleaved measurement, {k: [time per token of each round], ...}

Each takes an EventLog and returns a `Chart`: a `plotly.graph_objects.Figure` that a notebook shows as it is (no
widget and no network needed) and that carries its own static picture. A log with nothing to plot gives a figure
that says so. Every chart of the course, these and the ones the notebooks draw themselves, starts from `figure`:

    fig = figure("Hit rate against cache size", "cache budget (tokens)", "hit rate")
    fig.add_scatter(x=..., y=..., name="lpm", line_color=COLORS["lpm"])

so they share one style: 16 px text (readable at 1280 x 720), the legend in a row above the plot where no axis
can collide with it, and the same colour for the same thing in every chart (COLORS). A Chart's display bundle
holds plotly's JSON and an SVG drawing of the same figure (chartsvg.py): JupyterLab draws the interactive chart,
while a page without plotly.js (a code-hosting site, nbviewer, `jupyter nbconvert --to html`) shows the SVG.

alpha is the same number everywhere: accepted / judged guesses (a guess after the first rejection of its step is
never judged), as `Stats.alpha` and measure.Running count it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from teachspec import theory
from teachspec.events import Accept, Bonus, Counters, Draft, EventLog, Evict, Finish, Insert, Lock, Match, Resample, \
    RequestStart, Unlock, Verify
from teachspec.stats import Stats
from teachspec.widgets.chartsvg import FONT, figure_svg
from teachspec.widgets.measure import Running, steps

COLORS = {                     # one colour per thing, in every chart and in the views (widgets/teachspec.css)
    "draft": "#8b5cf6",        # the draft model, its passes and its guesses
    "target": "#2563eb",       # the target model, its passes; measured values
    "formula": "#ea580c",      # a prediction: Eq. (1), Theorem 3.8, alpha^(i+1)
    "plain": "#6b7280",        # plain decoding, the baseline
    "in_use": "#0d9488",       # tokens locked by a running request (a state, not an error: never red)
    "hit": "#16a34a",          # cache hits
    "emitted": "#16a34a",      # what speculative decoding emitted (the views' accepted green)
    "fcfs": "#6b7280", "lpm": "#db2777", "dfs": "#0891b2",  # the schedules of notebook 6
}
DRAFT, TARGET = COLORS["draft"], COLORS["target"]


class Chart(go.Figure):
    """A plotly Figure that also carries its static picture, for the pages that cannot run plotly.js."""

    def to_svg(self) -> str:
        return figure_svg(self)

    def _repr_mimebundle_(self, include=None, exclude=None, validate=True, **kwargs):
        bundle = super()._repr_mimebundle_(include, exclude, validate, **kwargs)
        return {**bundle, "image/svg+xml": self.to_svg()}

    def _ipython_display_(self):
        from IPython.display import display  # here: the package imports without IPython
        display(self._repr_mimebundle_(), raw=True)


def figure(title: str, x: str, y: str, height: int = 400) -> Chart:
    """An empty chart in the course's one style; add traces with the colours of COLORS."""
    fig = Chart()
    fig.update_layout(title=dict(text=title, font_size=FONT + 4), xaxis_title=x, yaxis_title=y,
                      template="plotly_white", font=dict(size=FONT), height=height,
                      margin=dict(l=80, r=80, t=110, b=60),
                      legend=dict(orientation="h", x=0, xanchor="left", y=1.02, yanchor="bottom"))
    return fig


def _nothing(fig: go.Figure, what: str) -> Chart:
    fig.add_annotation(text=f"no {what} in this log", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return fig


def _running(log: EventLog) -> Running:
    running = Running()
    for e in log:
        running.add(e)
    return running


def _counted(log: EventLog) -> Stats | None:
    """A serving engine's speculation steps, from the newest Counters event of the log (None if it has none, or
    the server has not guessed yet)."""
    c = next((e for e in reversed(log.events) if isinstance(e, Counters)), None)
    if c is None or not c.drafts:
        return None
    return Stats.from_counters(c.drafts, c.accepted, c.accepted_per_position, c.draft_tokens)


def acceptance_by_position(log: EventLog) -> Chart:
    """Share of drafts whose guess i was accepted; guess i survives only if guesses 0 .. i-1 did too."""
    fig = figure("Acceptance by draft position", "position in the draft (i)", "accepted")
    drafted, accepted = [], []
    for s in steps(log):
        for i, ok in enumerate(s.accepted_at):
            if i == len(drafted):
                drafted.append(0)
                accepted.append(0)
            drafted[i] += 1
            accepted[i] += ok
    server = _counted(log) if not drafted else None
    if server is not None:
        drafted, accepted = server.drafted_per_position, server.accepted_per_position
    if not drafted:
        return _nothing(fig, "drafts")
    rates = [a / d for a, d in zip(accepted, drafted)]
    fig.add_bar(x=list(range(len(rates))), y=rates, name="measured" + (" (the server's counters)" if server else ""),
                marker_color=DRAFT, text=[f"{a}/{d}" for a, d in zip(accepted, drafted)], textposition="outside")
    alpha = server.alpha if server is not None else _running(log).alpha
    if alpha is not None:
        fig.add_scatter(x=list(range(len(rates))), y=[alpha ** (i + 1) for i in range(len(rates))],
                        name=f"alpha^(i+1), alpha = {alpha:.2f} (accepted / judged guesses)",
                        mode="lines+markers", line=dict(dash="dash", color=COLORS["formula"]))
    fig.update_yaxes(range=[0, 1.1])
    fig.update_xaxes(dtick=1)
    return fig


def tokens_per_pass(log: EventLog) -> Chart:
    """How many tokens each target pass yielded: 1 .. k + 1."""
    fig = figure("Tokens per target pass", "tokens emitted by one pass", "passes")
    counts = [s.emitted for s in steps(log) if s.emitted]
    server = _counted(log) if not counts else None
    if server is not None:  # passes that kept exactly j guesses: those that accepted guess j - 1 but not guess j
        kept = [server.drafts, *server.accepted_per_position, 0]
        counts = [j + 1 for j in range(len(kept) - 1) for _ in range(kept[j] - kept[j + 1])]
    if not counts:
        return _nothing(fig, "target passes")
    fig.add_histogram(x=counts, xbins=dict(start=0.5, end=max(counts) + 0.5, size=1), marker_color=TARGET,
                      name="passes" + (" (the server's counters)" if server else ""))
    # the two means as vertical lines named in the legend, not labelled on the plot: two close means would put
    # their labels on each other and on the bars
    tallest = max(counts.count(n) for n in set(counts))
    mean = sum(counts) / len(counts)
    _vertical(fig, mean, tallest, f"measured mean {mean:.2f}", dict(color=COLORS["target"], width=3))
    running = _running(log)
    alpha, k = (server.alpha, len(server.accepted_per_position)) if server else (running.alpha, running.k)
    if alpha is not None:
        k = max(1, round(k))
        predicted = float(theory.expected_tokens(alpha, k))
        _vertical(fig, predicted, tallest, f"Eq. (1): {predicted:.2f}",
                  dict(color=COLORS["formula"], width=3, dash="dash"))
    fig.update_xaxes(dtick=1)
    return fig


def _vertical(fig: go.Figure, x: float, height: float, name: str, line: dict) -> None:
    """A vertical line at x from 0 to `height`, as a trace the legend names."""
    fig.add_scatter(x=[x, x], y=[0, height], mode="lines", name=name, line=line, hoverinfo="name")


def timeline(log: EventLog) -> Chart:
    """Every draft and target pass as a bar from its start to its end, in ms since the first one began."""
    fig = figure("Where the time goes", "ms since the first pass began", "")
    passes = [(e, "draft" if isinstance(e, Draft) else "target") for e in log if isinstance(e, (Draft, Verify))]
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


def cache_over_time(log: EventLog) -> Chart:
    """Tokens cached and locked after every cache event, and each lookup's hit rate (matched / prompt tokens)."""
    fig = figure("Radix cache over time", "cache event", "tokens")
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
    fig.add_scatter(x=xs, y=locked, name="locked (in use)", line_shape="hv", line_color=COLORS["in_use"])
    if hits:
        fig.add_scatter(x=[x for x, _ in hits], y=[h for _, h in hits], name="hit rate of a lookup",
                        mode="markers", yaxis="y2", marker=dict(color=COLORS["hit"], size=9))
        fig.update_layout(yaxis2=dict(title="hit rate", overlaying="y", side="right", range=[0, 1.05]))
    return fig


def speedup_vs_k(runs: Mapping[int, EventLog | Sequence[float]], k_max: int | None = None,
                 alpha: float | None = None, c: float | None = None) -> Chart:
    """Measured speedup of each draft length k over runs[0] (plain decoding, k = 0) against theory.speedup.

    Both sides count the steps Theorem 3.8 describes: those after each request's first (the first also reads the
    prompt, both models' prefill, which the formula leaves out; `Stats.decoding` counts the same steps). runs maps
    each k to one of

        an EventLog     one engine's generations; its speedup is tokens per second over runs[0]'s, both over the
                        steps after each request's first
        a list of times the time per token (any unit, the same for every k) of each round of an interleaved
                        measurement: round i ran every setting once, close together, so a slower moment of the
                        machine slows them all. Round i's speedup is runs[0][i] / runs[k][i]; the chart marks the
                        median over the rounds, and a line from the slowest round's speedup to the fastest's

    The curve uses `alpha` and `c` when given (a notebook passes the numbers it printed, so a chart never shows
    another). From logs, it can work them out itself: alpha pooled over the steps after the first of every run
    that speculates (accepted / judged guesses, as everywhere), c their mean draft pass over runs[0]'s mean target
    pass, the pass of plain decoding that Theorem 3.8 counts as 1. One engine (so one log) per k:

        runs = {}
        for k in (0, 1, 2, 4, 8):
            engine = Engine(pair)
            engine.generate(prompt, 64, speculate="model" if k else None, k=k)
            runs[k] = engine.events
    """
    if not isinstance(runs, Mapping) or 0 not in runs:
        got = sorted(runs) if isinstance(runs, Mapping) else type(runs).__name__
        raise ValueError(f"runs must map draft lengths k to EventLogs or lists of times per token and include k = 0, "
                         f"the plain-decoding baseline every speedup is measured against; got {got}")
    logs = [isinstance(run, EventLog) for run in runs.values()]
    if any(logs) and not all(logs):
        raise ValueError("runs must be all EventLogs or all lists of times per token, not a mix: a speedup divides "
                         "two measurements of the same kind")
    fig = figure("Speedup against k", "draft length k", "speedup over plain decoding")
    if all(logs):
        rate = {k: _decoding(log)[0] for k, log in runs.items()}
        if not rate[0]:
            return _nothing(fig, "finished requests in the k = 0 run")
        ks = sorted(k for k in runs if rate[k])
        rounds = {k: [rate[k] / rate[0]] for k in ks}
        if alpha is None or c is None:
            pooled, plain_pass = Running(), _decoding(runs[0])[1]
            for k in ks:
                if k:
                    for e in _after_first(runs[k]):
                        pooled.add(e)
            alpha = pooled.alpha if alpha is None else alpha
            if c is None and pooled.drafted and plain_pass:
                c = (pooled.draft_ms / pooled.drafted) / plain_pass
    else:
        rounds = _rounds(runs)
        if not rounds:
            return _nothing(fig, "rounds with a time for every k")
        ks = sorted(rounds)
        if alpha is None or c is None:
            raise ValueError("with times per token, give the alpha and c of the same runs (the curve needs them): "
                             "the times alone do not say how often a guess was accepted")
    median = {k: statistics.median(rounds[k]) for k in ks}
    fig.add_scatter(x=ks, y=[median[k] for k in ks], mode="markers",
                    name="measured" + (f" (median of {len(rounds[ks[0]])} rounds)" if len(rounds[ks[0]]) > 1 else ""),
                    marker=dict(size=12, color=COLORS["target"]))
    for i, k in enumerate(k for k in ks if k and len(rounds[k]) > 1):  # k = 0 is 1 in every round
        fig.add_scatter(x=[k, k], y=[min(rounds[k]), max(rounds[k])], mode="lines", name="slowest to fastest round",
                        showlegend=i == 0, line=dict(color=COLORS["target"], width=2))
    if alpha is not None and c is not None:
        grid = list(range(0, (k_max if k_max is not None else max(ks) + 2) + 1))
        fig.add_scatter(x=grid, y=[float(theory.speedup(alpha, k, c)) for k in grid], mode="lines",
                        name=f"Theorem 3.8: alpha = {alpha:.2f}, c = {c:.3f}",
                        line=dict(dash="dash", color=COLORS["formula"]))
    fig.add_hline(y=1, line_color=COLORS["plain"])
    return fig


def _rounds(times: Mapping[int, Sequence[float]]) -> dict[int, list[float]]:
    """Each k's speedup in every round that timed both it and k = 0: times[0][i] / times[k][i]."""
    plain = list(times[0])
    out = {}
    for k, mine in times.items():
        pairs = [(t0, t) for t0, t in zip(plain, mine) if t0 > 0 and t > 0]
        if pairs:
            out[k] = [t0 / t for t0, t in pairs]
    return out if 0 in out else {}


def _after_first(log: EventLog) -> list:
    """The log's speculation events of every request's steps after its first (step 0 also read the prompt)."""
    return [e for e in log if getattr(e, "step", 0) > 0]


def _decoding(log: EventLog) -> tuple[float | None, float | None]:
    """Tokens per second over the steps after each finished request's first, and the mean target pass of those
    steps in ms: what Stats.decoding counts. A request's first step ends with its last event of step 0."""
    first_end: dict[int, float] = {}
    first_tokens: dict[int, int] = {}
    passes, pass_ms = 0, 0.0
    for e in log:
        step = getattr(e, "step", None)
        if step == 0:
            first_end[e.request] = e.t
            first_tokens[e.request] = first_tokens.get(e.request, 0) + isinstance(e, (Accept, Resample, Bonus))
        elif isinstance(e, Verify):
            passes, pass_ms = passes + 1, pass_ms + e.ms
    tokens, seconds = 0, 0.0
    for e in log.of(Finish):
        if e.request in first_end:
            tokens += e.new_tokens - first_tokens[e.request]
            seconds += e.t - first_end[e.request]
    rate = tokens / seconds if seconds > 0 and tokens > 0 else None
    return rate, (pass_ms / passes if passes else None)
