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
                                      "fontsize": "10"},
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
