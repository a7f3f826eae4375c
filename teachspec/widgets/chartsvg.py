"""A plotly figure as a static SVG picture, drawn with nothing but the standard library.

A plotly figure is JSON that plotly.js draws in the browser. A page without plotly.js shows nothing of it: a
notebook on a code-hosting site or nbviewer, `jupyter nbconvert --to html`. Plotly's own static export (kaleido)
drives a headless Chrome, which a Binder image or a student's laptop need not have. The charts of this package use
a handful of plotly's features, so this module draws those itself, from the same figure:

    scatter     lines, markers or both; dash, dot; step lines (line_shape "hv"); a second y axis on the right
    bar         vertical, or horizontal with a `base` (a timeline), with text labels
    histogram   binned by its `xbins`
    shapes      horizontal and vertical lines (add_hline, add_vline) and the annotations that label them

It is a picture for reading, not a replica of plotly's drawing: same data, colours, titles, legend and ranges.
Anything it does not know (a pie, a heatmap) is left out rather than drawn wrong, and the picture says so.
"""

from __future__ import annotations

import math
from html import escape

WIDTH = 960                 # px: at 1280 x 720 a notebook's output area is about this wide, so no scaling
FONT = 16                   # px: ticks, legend, labels; the title is larger
FALLBACK = ["#2563eb", "#ea580c", "#16a34a", "#8b5cf6", "#db2777", "#0891b2"]
DASHES = {"dash": "9 5", "dot": "2 4", "dashdot": "9 4 2 4", "longdash": "14 6"}


def _get(d, *path, default=None):
    for key in path:
        if not isinstance(d, dict) or d.get(key) is None:
            return default
        d = d[key]
    return d


def _ticks(lo: float, hi: float, n: int = 6, dtick: float | None = None) -> list[float]:
    """Round tick values covering [lo, hi]: steps of 1, 2 or 5 times a power of ten."""
    if hi <= lo:
        return [lo]
    step = dtick or 0.0
    if not step:
        raw = (hi - lo) / n
        power = 10 ** math.floor(math.log10(raw))
        step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1e-9) + 1)]


def _label(v: float) -> str:
    return f"{v:.6g}" if abs(v) < 1e5 else f"{v:.3g}"


class _Axis:
    """Data values to pixels along one axis: linear, or categories (a horizontal bar chart's rows)."""

    def __init__(self, values: list, fixed: list | None, start: float, end: float, pad: bool, dtick=None):
        self.categories = [v for i, v in enumerate(values) if isinstance(v, str) and v not in values[:i]]
        numbers = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
        if self.categories:
            lo, hi = -0.5, len(self.categories) - 0.5
        elif fixed:
            lo, hi = map(float, fixed)
        elif numbers:
            lo, hi = min(numbers), max(numbers)
            span = (hi - lo) or abs(hi) or 1.0
            lo, hi = (lo - 0.05 * span, hi + 0.05 * span) if pad else (lo, hi)
        else:
            lo, hi = 0.0, 1.0
        self.lo, self.hi, self.start, self.end, self.dtick = lo, hi, start, end, dtick

    def __call__(self, v) -> float:
        if self.categories and isinstance(v, str):
            v = self.categories.index(v)
        return self.start + (float(v) - self.lo) / ((self.hi - self.lo) or 1.0) * (self.end - self.start)

    def ticks(self) -> list[tuple[float, str]]:
        if self.categories:
            return [(self(c), c) for c in self.categories]
        return [(self(v), _label(v)) for v in _ticks(self.lo, self.hi, dtick=self.dtick) if self.lo <= v <= self.hi]


def _bars(trace: dict) -> dict:
    """A histogram as the bar trace it draws: counts per bin of `xbins` (width 1 from the data if unset)."""
    if trace.get("type") != "histogram":
        return trace
    xs = [x for x in trace.get("x") or [] if x is not None]
    size = _get(trace, "xbins", "size", default=1) or 1
    start = _get(trace, "xbins", "start", default=min(xs, default=0) - size / 2)
    counts: dict[int, int] = {}
    for x in xs:
        counts[math.floor((x - start) / size)] = counts.get(math.floor((x - start) / size), 0) + 1
    bins = sorted(counts)
    return {**trace, "type": "bar", "x": [start + (b + 0.5) * size for b in bins], "y": [counts[b] for b in bins],
            "width": size}


def figure_svg(fig) -> str:
    """`fig` (a plotly Figure or its dict) as one SVG document."""
    spec = fig.to_plotly_json() if hasattr(fig, "to_plotly_json") else fig
    layout = spec.get("layout") or {}
    traces = [_bars(t) for t in spec.get("data") or [] if t.get("visible", True) is True]
    shown = [t for t in traces if t.get("type", "scatter") in ("scatter", "bar")]
    height = int(layout.get("height") or 400)
    title = _get(layout, "title", "text", default="")
    right_axis = any(t.get("yaxis") == "y2" for t in shown)

    # the legend: one row of entries under the title, wrapped at the width
    named = [(t.get("name"), _color(t, i), t) for i, t in enumerate(shown)
             if t.get("name") and t.get("showlegend", True) is not False]
    legend, x, row = [], 70, 0
    for name, color, t in named:
        w = 44 + 0.62 * FONT * len(name)  # a wide sans (DejaVu) is ~0.6 em a character: entries never touch
        if x + w > WIDTH - 10 and x > 70:
            x, row = 70, row + 1
        legend.append((x, row, name, color, t))
        x += w + 18
    top = 16 + (34 if title else 0) + (row + 1) * 28 * bool(named) + 12
    left, right, bottom = 82, WIDTH - (78 if right_axis else 28), height - 64
    if bottom - top < 120:
        height, bottom = top + 120 + 64, top + 120

    horizontal = any(t.get("type") == "bar" and t.get("orientation") == "h" for t in shown)
    xs, ys, y2s = [], [], []
    for t in shown:
        tx, ty = list(t.get("x") or []), list(t.get("y") or [])
        if t.get("type") == "bar":
            base = t.get("base")
            bases = base if isinstance(base, list) else [base or 0] * len(tx or ty)
            values, where = (tx, xs) if t.get("orientation") == "h" else (ty, y2s if t.get("yaxis") == "y2" else ys)
            where += [b + v for b, v in zip(bases, values) if v is not None] + [b for b in bases if b is not None]
            (ys if t.get("orientation") == "h" else xs).extend(ty if t.get("orientation") == "h" else tx)
            numbers = sorted({v for v in tx if isinstance(v, (int, float))})
            half = (t.get("width") or min((b - a for a, b in zip(numbers, numbers[1:])), default=1.0)) / 2
            if t.get("orientation") != "h":  # a bar's whole width inside the plot, as plotly does
                xs += [v - half for v in numbers] + [v + half for v in numbers]
        else:
            xs += tx
            (y2s if t.get("yaxis") == "y2" else ys).extend(ty)
    for s in layout.get("shapes") or []:
        if not str(s.get("xref", "x")).endswith(("domain", "paper")):
            xs += [s.get("x0"), s.get("x1")]
        if not str(s.get("yref", "y")).endswith(("domain", "paper")):
            ys += [s.get("y0"), s.get("y1")]
    bars = any(t.get("type") == "bar" for t in shown)
    ax = _Axis(xs, _get(layout, "xaxis", "range"), left, right, pad=True, dtick=_get(layout, "xaxis", "dtick"))
    ay = _Axis(ys + ([0] if bars and not horizontal else []), _get(layout, "yaxis", "range"), bottom, top,
               pad=not horizontal)
    ay2 = _Axis(y2s, _get(layout, "yaxis2", "range"), bottom, top, pad=True) if right_axis else None

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" font-family="Helvetica, Arial, sans-serif" font-size="{FONT}">',
           f'<rect width="{WIDTH}" height="{height}" fill="white"/>']
    if title:
        out.append(f'<text x="{left}" y="36" font-size="{FONT + 5}" font-weight="bold">{escape(str(title))}</text>')
    for x, row, name, color, t in legend:
        y = 16 + (34 if title else 0) + row * 28 + 14
        out.append(_key(x, y, color, t) + f'<text x="{x + 38}" y="{y + 5}">{escape(str(name))}</text>')

    # grid, ticks and axis titles
    for px, text in ax.ticks():
        out.append(f'<line x1="{px:.1f}" y1="{top}" x2="{px:.1f}" y2="{bottom}" stroke="#e5e7eb"/>'
                   f'<text x="{px:.1f}" y="{bottom + 22}" text-anchor="middle" fill="#374151">{escape(text)}</text>')
    for py, text in ay.ticks():
        out.append(f'<line x1="{left}" y1="{py:.1f}" x2="{right}" y2="{py:.1f}" stroke="#e5e7eb"/>'
                   f'<text x="{left - 8}" y="{py + 5:.1f}" text-anchor="end" fill="#374151">{escape(text)}</text>')
    if ay2 is not None:
        for py, text in ay2.ticks():
            out.append(f'<text x="{right + 8}" y="{py + 5:.1f}" fill="#374151">{escape(text)}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="none" '
               f'stroke="#9ca3af"/>')
    for text, x, y, rotate in ((_get(layout, "xaxis", "title", "text"), (left + right) / 2, height - 16, False),
                               (_get(layout, "yaxis", "title", "text"), 20, (top + bottom) / 2, True),
                               (_get(layout, "yaxis2", "title", "text"), WIDTH - 12, (top + bottom) / 2, True)):
        if text and (x != WIDTH - 12 or ay2 is not None):
            turn = f' transform="rotate(-90 {x:.1f} {y:.1f})"' if rotate else ""
            out.append(f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="middle"{turn}>{escape(str(text))}</text>')

    # the data, clipped to the plot area
    out.append(f'<clipPath id="plot"><rect x="{left}" y="{top}" width="{right - left}" '
               f'height="{bottom - top}"/></clipPath><g clip-path="url(#plot)">')
    bar_traces = [t for t in shown if t.get("type") == "bar"]
    for i, t in enumerate(shown):
        color = _color(t, i)
        if t.get("type") == "bar":
            out += _draw_bars(t, color, ax, ay, len(bar_traces), bar_traces.index(t))
        else:
            out += _draw_scatter(t, color, ax, ay2 if t.get("yaxis") == "y2" and ay2 else ay)
    for s in layout.get("shapes") or []:
        if s.get("type", "line") == "line":
            x0, x1 = (_place(s.get(k), s.get("xref", "x"), ax) for k in ("x0", "x1"))
            y0, y1 = (_place(s.get(k), s.get("yref", "y"), ay) for k in ("y0", "y1"))
            out.append(f'<line x1="{x0:.1f}" y1="{y0:.1f}" x2="{x1:.1f}" y2="{y1:.1f}" '
                       f'stroke="{_get(s, "line", "color", default="#374151")}" stroke-width="2"'
                       f'{_dash(_get(s, "line", "dash"))}/>')
    out.append("</g>")
    for a in layout.get("annotations") or []:
        x, y = _place(a.get("x", 0.5), a.get("xref", "x"), ax), _place(a.get("y", 0.5), a.get("yref", "y"), ay)
        anchor = {"left": "start", "right": "end"}.get(a.get("xanchor"), "middle")
        x += {"start": 6, "end": -6}.get(anchor, 0)  # clear of the line it labels
        dy = {"bottom": -6, "top": FONT + 2}.get(a.get("yanchor"), 5)
        out.append(f'<text class="annotation" x="{x:.1f}" y="{y + dy:.1f}" text-anchor="{anchor}" fill="#111827">'
                   f'{escape(str(a.get("text", "")))}</text>')
    skipped = len(traces) - len(shown)
    if skipped:
        out.append(f'<text x="{right}" y="{height - 4}" text-anchor="end" font-size="14" fill="#6b7280">'
                   f'{skipped} trace(s) of a kind this picture does not draw; run the cell for the chart</text>')
    out.append("</svg>")
    return "\n".join(out)


def _color(t: dict, i: int) -> str:
    color = _get(t, "marker", "color") if t.get("type") == "bar" else (_get(t, "line", "color")
                                                                        or _get(t, "marker", "color"))
    return color if isinstance(color, str) else FALLBACK[i % len(FALLBACK)]


def _dash(dash) -> str:
    return f' stroke-dasharray="{DASHES[dash]}"' if dash in DASHES else ""


def _place(v, ref: str, axis: _Axis) -> float:
    """A shape's or annotation's coordinate: data, or a fraction of the plot area ('x domain', 'paper')."""
    if str(ref).endswith(("domain", "paper")):
        return axis.start + float(v) * (axis.end - axis.start)
    return axis(v)


def _marker(x: float, y: float, color: str, size: float, symbol: str | None) -> str:
    """A marker: circle, square, diamond or triangle, filled or (a symbol ending in "-open") hollow."""
    r, symbol = size / 2, symbol or "circle"
    paint = (f'fill="white" fill-opacity="0" stroke="{color}" stroke-width="2.5"' if symbol.endswith("-open")
             else f'fill="{color}" stroke="{color}"')
    if symbol.startswith("square"):
        return f'<rect x="{x - r:.1f}" y="{y - r:.1f}" width="{size:.1f}" height="{size:.1f}" {paint}/>'
    if symbol.startswith("diamond"):
        return (f'<polygon points="{x:.1f},{y - r * 1.3:.1f} {x + r * 1.3:.1f},{y:.1f} {x:.1f},{y + r * 1.3:.1f} '
                f'{x - r * 1.3:.1f},{y:.1f}" {paint}/>')
    if symbol.startswith("triangle"):
        return (f'<polygon points="{x:.1f},{y - r * 1.3:.1f} {x + r * 1.2:.1f},{y + r:.1f} '
                f'{x - r * 1.2:.1f},{y + r:.1f}" {paint}/>')
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}" {paint}/>'


def _key(x: float, y: float, color: str, t: dict) -> str:
    """The legend's sample of a trace: a swatch for bars, the line (and marker) for a scatter."""
    if t.get("type") == "bar":
        return f'<rect x="{x + 6}" y="{y - 7}" width="22" height="14" fill="{color}"/>'
    mode = t.get("mode") or "lines"
    part = ""
    if "lines" in mode:
        part += (f'<line x1="{x}" y1="{y}" x2="{x + 32}" y2="{y}" stroke="{color}" stroke-width="3"'
                 f'{_dash(_get(t, "line", "dash"))}/>')
    if "markers" in mode:
        part += _marker(x + 16, y, color, 10, _get(t, "marker", "symbol"))
    return part


def _draw_scatter(t: dict, color: str, ax: _Axis, ay: _Axis) -> list[str]:
    points = [(ax(x), ay(y)) for x, y in zip(t.get("x") or [], t.get("y") or []) if x is not None and y is not None]
    mode, out = t.get("mode") or "lines", []
    if "lines" in mode and len(points) > 1:
        path = [points[0]]
        for p in points[1:]:
            if _get(t, "line", "shape") == "hv":
                path.append((p[0], path[-1][1]))
            path.append(p)
        width = _get(t, "line", "width", default=3)
        out.append(f'<polyline points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in path)}" fill="none" '
                   f'stroke="{color}" stroke-width="{width}"{_dash(_get(t, "line", "dash"))}/>')
    if "markers" in mode:
        size = _get(t, "marker", "size", default=8)
        size = size if isinstance(size, (int, float)) else 8
        out += [_marker(x, y, color, size, _get(t, "marker", "symbol")) for x, y in points]
    return out


def _draw_bars(t: dict, color: str, ax: _Axis, ay: _Axis, groups: int, group: int) -> list[str]:
    """Bars side by side when several bar traces share positions (plotly's 'group' mode)."""
    horizontal = t.get("orientation") == "h"
    along, across = (t.get("y") or [], t.get("x") or []) if horizontal else (t.get("x") or [], t.get("y") or [])
    pos_axis, val_axis = (ay, ax) if horizontal else (ax, ay)
    base = t.get("base")
    bases = base if isinstance(base, list) else [base or 0] * len(along)
    texts = t.get("text") if isinstance(t.get("text"), list) else [None] * len(along)
    if pos_axis.categories:
        slot = abs(pos_axis.end - pos_axis.start) / len(pos_axis.categories)
    else:
        numbers = sorted({float(v) for v in along if v is not None})
        gap = min((b - a for a, b in zip(numbers, numbers[1:])), default=1.0)
        slot = abs(pos_axis(numbers[0] + (t.get("width") or gap)) - pos_axis(numbers[0])) if numbers else 10
    if horizontal:
        groups, group = 1, 0  # a timeline's bars of one row overlap in position, never in time
    thick = slot * (1.0 if t.get("width") else 0.8) / groups
    out = []
    for p, v, b, text in zip(along, across, bases, texts):
        if p is None or v is None:
            continue
        mid = pos_axis(p) + (group - (groups - 1) / 2) * thick * (-1 if horizontal else 1)
        v0, v1 = sorted((val_axis(b), val_axis(b + v)))
        if horizontal:
            out.append(f'<rect class="bar" x="{v0:.1f}" y="{mid - thick / 2:.1f}" width="{max(v1 - v0, 1):.1f}" '
                       f'height="{thick:.1f}" fill="{color}" stroke="white" stroke-width="0.5"/>')
        else:
            out.append(f'<rect class="bar" x="{mid - thick / 2 + 1:.1f}" y="{v0:.1f}" width="{max(thick - 2, 1):.1f}" '
                       f'height="{max(v1 - v0, 0.5):.1f}" fill="{color}"/>')
            if text is not None:
                out.append(f'<text x="{mid:.1f}" y="{v0 - 6:.1f}" text-anchor="middle">{escape(str(text))}</text>')
    return out
