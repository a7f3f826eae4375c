"""A static picture of the radix tree: Graphviz when its `dot` program is installed, plain SVG otherwise.

The widget animates; a picture is for a slide, a report, or a notebook saved without widget state. Graphviz
lays the tree out itself (well, but afresh each time, so two pictures of a growing tree do not line up). Without
`dot` (the Python package `graphviz` only drives the program), the fallback draws the view's own layout from
layout.py as boxes and lines: plainer, never an error.
"""

from __future__ import annotations

import shutil
from html import escape

from teachspec.widgets.frames import Snapshot

COLORS = {"matched": "#fde68a", "new": "#bbf7d0", "split": "#ddd6fe", "evicted": "#e5e7eb", "": "#ffffff"}
COLUMN, ROW, BOX_W, BOX_H = 120, 70, 108, 42   # the fallback's geometry, in pixels


def label(item: dict, width: int = 16) -> tuple[str, str]:
    """A node's two lines: its text (or token ids, or id), then its id, size and locks."""
    if item.get("stub"):
        return f"+{item['folded']} nodes", f"{item['tokens']} tok folded"
    if item["parent"] is None:
        return "root", ""
    if item.get("text") is not None:
        head = item["text"].replace("\n", "↵").replace("\t", "⇥").replace(" ", "␣") or "∅"
    else:
        head = " ".join(map(str, item["ids"])) if item.get("ids") else ""
    head = head if len(head) <= width else head[:width - 1] + "…"
    locks = f" · {item['locks']} lock{'s' * (item['locks'] != 1)}" if item["locks"] else ""
    if not head:  # nothing but the id to show: it heads the box alone
        return f"#{item['id']}", f"{item['tokens']} tok{locks}"
    return head, f"#{item['id']} · {item['tokens']} tok{locks}"


def fill(item: dict) -> str:
    if item.get("stub"):
        return "#f3f4f6"
    return COLORS[item.get("mark") or ("matched" if item.get("matched") else "")]


def tree_svg(snapshot: Snapshot) -> str:
    if snapshot.items and shutil.which("dot") is not None:
        import graphviz  # imported here: the fallback must work without the package as well as the program
        try:
            return graphviz_svg(snapshot)
        except graphviz.ExecutableNotFound:  # `dot` found on PATH but not runnable
            pass
    return plain_svg(snapshot)


def graphviz_svg(snapshot: Snapshot) -> str:
    import graphviz
    dot = graphviz.Digraph(graph_attr={"rankdir": "TB", "nodesep": "0.2", "ranksep": "0.35"},
                           node_attr={"shape": "box", "style": "rounded,filled", "fontname": "Helvetica",
                                      "fontsize": "14"},  # 14 pt: readable on a projector
                           edge_attr={"arrowhead": "none", "color": "#9ca3af"})
    for key, item in sorted(snapshot.items.items(), key=lambda kv: (kv[1]["y"], kv[1]["x"])):
        head, tail = label(item)
        style = "dashed,filled" if item.get("stub") or item.get("mark") == "evicted" else "rounded,filled"
        pen = "2" if item.get("locks") else "1"
        head = head.replace("\\", "\\\\")  # a backslash would start a DOT escape such as \n
        dot.node(key, f"{head}\\n{tail}" if tail else head, fillcolor=fill(item), style=style, penwidth=pen)
        if item["parent"] is not None:
            dot.edge(item["parent"], key)
    return dot.pipe(format="svg", encoding="utf-8")


def plain_svg(snapshot: Snapshot) -> str:
    """The view's own layout as SVG boxes and lines, with nothing but the standard library."""
    items = snapshot.items
    if not items:
        return '<svg xmlns="http://www.w3.org/2000/svg" width="240" height="40"><text x="8" y="24">' \
               'an empty tree</text></svg>'
    centre = {k: (10 + BOX_W / 2 + it["x"] * COLUMN, 10 + it["y"] * ROW) for k, it in items.items()}
    width = max(x for x, _ in centre.values()) + BOX_W / 2 + 10
    height = max(y for _, y in centre.values()) + BOX_H + 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
             f'font-family="Helvetica, Arial, sans-serif" font-size="11">']
    for key, item in items.items():
        if item["parent"] in centre:
            (x1, y1), (x2, y2) = centre[item["parent"]], centre[key]
            parts.append(f'<line x1="{x1:.1f}" y1="{y1 + BOX_H:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#9ca3af"/>')
    for key, item in items.items():
        x, y = centre[key]
        head, tail = label(item)
        dash = ' stroke-dasharray="4 3"' if item.get("stub") or item.get("mark") == "evicted" else ""
        stroke = 2 if item.get("locks") else 1
        parts.append(f'<g><rect x="{x - BOX_W / 2:.1f}" y="{y:.1f}" width="{BOX_W}" height="{BOX_H}" rx="6" '
                     f'fill="{fill(item)}" stroke="#374151" stroke-width="{stroke}"{dash}/>'
                     f'<text x="{x:.1f}" y="{y + 17:.1f}" text-anchor="middle">{escape(head)}</text>'
                     f'<text x="{x:.1f}" y="{y + 32:.1f}" text-anchor="middle" fill="#6b7280">{escape(tail)}</text>'
                     f'</g>')
    parts.append("</svg>")
    return "\n".join(parts)


# -- the speculation view's text as a picture ----------------------------------------------------------------------

# (fill, line) per kind of token, the colours of widgets/teachspec.css
TOKEN_COLORS = {"prompt": ("#f9fafb", "#9ca3af"), "drafted": ("#f5f3ff", "#8b5cf6"),
                "accepted": ("#dcfce7", "#16a34a"), "rejected": ("#fee2e2", "#dc2626"),
                "resampled": ("#ffedd5", "#ea580c"), "bonus": ("#dbeafe", "#2563eb"), "plain": ("#f3f4f6", "#6b7280")}
CHAR_W, LINE_H, TEXT_PX = 9.0, 30, 15   # a monospace character's width at TEXT_PX, and a row of chips


def visible(text: str | None, token: int | None) -> str:
    """A token's text with its whitespace drawn: a newline as a return glyph, a token of blanks as open boxes."""
    if text is None:
        return f"#{token}"
    if not text.strip():  # whitespace alone: draw every character of it
        return text.replace("\n", "↵").replace("\t", "⇥").replace(" ", "␣") or "∅"
    return text.replace("\n", "↵").replace("\t", "⇥").replace(" ", "\u00a0")  # a word keeps its spacing


def text_svg(snapshot: Snapshot, width: int = 960, max_tokens: int = 300) -> str:
    """The speculation view at one frame: every token a chip coloured by its verdict, a rejected guess struck
    through, a newline ending its row; a prompt is one chip, and a long text keeps its last `max_tokens` tokens."""
    tokens = sorted((it for it in snapshot.items.values() if it.get("kind") in TOKEN_COLORS),
                    key=lambda it: it.get("order", 0))
    earlier, tokens = tokens[:-max_tokens], tokens[-max_tokens:]
    chips = [("earlier", f"… {len(earlier)} earlier tokens", False)] if earlier else []
    for it in tokens:
        if it["kind"] == "prompt":
            tail = (it.get("text") or "").rstrip("\n").split("\n")[-1][-28:]
            label = f"prompt · {it.get('n', 0)} tokens" + (f" · …{tail}" if tail else "")
            chips.append(("prompt", label, True))
        else:
            chips.append((it["kind"], visible(it.get("text"), it.get("token")), "\n" in (it.get("text") or "")))
    kinds = [k for k in TOKEN_COLORS if any(kind == k for kind, _, _ in chips)]
    parts, x, y = [], 10.0, 46.0
    for kind, label, ends_row in chips:
        w = CHAR_W * len(label) + 8
        if x + w > width - 10 and x > 10:
            x, y = 10.0, y + LINE_H
        fill_, line = TOKEN_COLORS.get(kind, ("#ffffff", "#d1d5db"))
        parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{LINE_H - 6}" rx="4" fill="{fill_}" '
                     f'stroke="{line}"/><text x="{x + 4:.1f}" y="{y + 17:.1f}" fill="#111827">{escape(label)}</text>')
        if kind == "rejected":
            parts.append(f'<line x1="{x + 3:.1f}" y1="{y + 12:.1f}" x2="{x + w - 3:.1f}" y2="{y + 12:.1f}" '
                         f'stroke="{line}" stroke-width="2"/>')
        x += w + 3
        if ends_row:
            x, y = 10.0, y + LINE_H
    key, kx = [], 10.0
    for kind in kinds:
        fill_, line = TOKEN_COLORS[kind]
        key.append(f'<rect x="{kx:.1f}" y="10" width="16" height="16" rx="3" fill="{fill_}" stroke="{line}"/>'
                   f'<text x="{kx + 22:.1f}" y="23">{kind}</text>')
        kx += 22 + CHAR_W * len(kind) + 18
    height = y + LINE_H + (28 if snapshot.caption else 6)
    caption = (f'<text x="10" y="{height - 10:.1f}" fill="#374151" font-family="Helvetica, Arial, sans-serif">'
               f'{escape(snapshot.caption[:110])}</text>') if snapshot.caption else ""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height:.0f}" '
            f'font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" font-size="{TEXT_PX}" xml:space="preserve">'
            f'<rect width="{width}" height="{height:.0f}" fill="white"/>{"".join(key)}{"".join(parts)}{caption}</svg>')
