"""Still pictures of the views, for a slide, a report, or a notebook saved without widget state.

    tree_svg         RadixTreeView: Graphviz when its `dot` program is installed, plain SVG otherwise
    text_svg         SpeculationView: the text, every token a chip coloured by its verdict
    token_tree_svg   TokenTreeView: one tree step, its verdicts and its tree attention mask

The widgets animate; a picture is one frame. Graphviz lays the radix tree out itself (well, but afresh each time,
so two pictures of a growing tree do not line up). Without `dot` (the Python package `graphviz` only drives the
program), the fallback draws the view's own layout from layout.py as boxes and lines: plainer, never an error. The
token tree is always drawn from the view's own layout, with the widget's geometry and colours (token_tree.js,
teachspec.css), so the still and the widget look alike.
"""

from __future__ import annotations

import html
import re
import shutil

from teachspec.widgets.frames import Snapshot

CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # not allowed in XML 1.0, even escaped


def pictured(text: str) -> str:
    """`text` with each control character a token may hold (which no XML document may contain, escaped or not, and
    which Graphviz refuses) shown as its Unicode control picture: NUL as ␀, \\x02 as ␂, DEL as ␡. A picture, not
    U+FFFD, so that two different tokens never look alike."""
    return CONTROL.sub(lambda m: "\u2421" if m[0] == "\x7f" else chr(0x2400 + ord(m[0])), text)


def escape(text: str) -> str:
    """`text` as SVG character data: markup escaped, control characters `pictured`."""
    return html.escape(pictured(text))


COLORS = {"matched": "#fde68a", "proposed": "#bfdbfe", "new": "#bbf7d0", "split": "#ddd6fe", "evicted": "#e5e7eb", "": "#ffffff"}
COLUMN, ROW, BOX_W, BOX_H = 120, 70, 108, 42   # the fallback's geometry, in pixels


def label(item: dict, width: int = 16) -> tuple[str, str]:
    """A node's two lines: its text (or token ids, or id), then its id, size and locks."""
    if item.get("stub"):
        return f"+{item['folded']} nodes", f"{item['tokens']} tok folded"
    if item["parent"] is None:
        return "root", ""
    if item.get("text") is not None:
        head = pictured(item["text"].replace("\n", "↵").replace("\t", "⇥").replace(" ", "␣")) or "∅"
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
    return COLORS[item.get("mark") or ("matched" if item.get("matched") else "proposed" if item.get("proposed")
                                       else "")]


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


def refused(mark: dict) -> list[tuple[int, str | None]]:
    """The (token, text) pairs of a tree step's rejected mark (speculation.py), each token once, in the order
    tried: two siblings drawn independently may hold the same token, and both be refused."""
    seen: dict[int, str | None] = {}
    for sibling in mark["siblings"]:
        seen.setdefault(sibling["token"], sibling.get("text"))
    return list(seen.items())


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
        elif "siblings" in it:  # a tree step's rejected mark: each refused token once, and never a line break
            chips.append((it["kind"], " | ".join(visible(text, token) for token, text in refused(it)), False))
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


# -- a tree step of the token tree view as a picture ---------------------------------------------------------------

TT_COLUMN, TT_ROW, TT_W, TT_H, TT_PAD = 136, 74, 118, 64, 8  # token_tree.js's TOKEN_TREE: the widget's geometry
PITCH, CELL, ROW_LABEL = 30, 24, 84   # the mask: a column's width, a cell's side, the query labels' column
NODE_COLORS = {"root": ("#f3f4f6", "#374151"), "untried": ("#ffffff", "#9ca3af"),
               **{kind: TOKEN_COLORS[kind] for kind in ("drafted", "accepted", "rejected", "resampled", "bonus")}}
EDGES = {"drafted": ("#9ca3af", 1.5, ""), "accepted": ("#16a34a", 4, ""), "rejected": ("#dc2626", 2, "6 4"),
         "untried": ("#d1d5db", 1.5, "2 4"), "resampled": ("#ea580c", 3, ""), "bonus": ("#2563eb", 3, "")}
MASK_ON, MASK_OFF = "#2563eb", "#f3f4f6"  # a cell where the row's node may attend, and one where it may not
SANS, MONO = "Helvetica, Arial, sans-serif", "DejaVu Sans Mono, Menlo, Consolas, monospace"


def token_label(text: str | None, token: int, width: int = 8) -> str:
    """A token on its own, as token_tree.js writes it: whitespace drawn, an id when there is no text."""
    label = f"#{token}" if text is None else text.replace("\n", "↵").replace("\t", "⇥").replace(" ", "␣") or "∅"
    return label if len(label) <= width else label[:width - 1] + "…"


def box_lines(item: dict) -> tuple[str, str]:
    """The two lines under a node's token (token_tree.js boxLines): its verdict, or what it is."""
    if item["key"] == "final":
        return item["kind"], f"p {item['p']:.3g}"
    if item.get("verdict"):
        return tuple(item["verdict"])
    return {"root": ("root", "committed"), "drafted": ("waiting", ""), "untried": ("not tried", "")}.get(
        item["state"], ("", ""))


def token_tree_svg(snapshot: Snapshot) -> str:
    """One tree step of TokenTreeView: the tree read left to right (a node's column is its depth), each node
    coloured by its verdict with its p/q ratio and u, the resampled or bonus token hung under its node, and beside
    it the tree attention mask, a row per node and a filled cell per key that row may attend to."""
    items = snapshot.items
    step = items.get("step")
    if step is None:
        return ('<svg xmlns="http://www.w3.org/2000/svg" width="360" height="40"><text x="8" y="24" '
                f'font-family="{SANS}" font-size="15">no tree of guesses in this log yet</text></svg>')
    boxes = sorted((it for it in items.values() if it.get("kind") == "node"), key=lambda it: it["i"])
    boxes += [items["final"]] if "final" in items else []
    top, left = 62, 10  # below the heading and the legend
    spot = {it["key"]: (left + TT_PAD + it["x"] * TT_COLUMN, top + TT_PAD + it["y"] * TT_ROW) for it in boxes}
    tree_w = 2 * TT_PAD + max(it["x"] for it in boxes) * TT_COLUMN + TT_W
    tree_h = 2 * TT_PAD + max(it["y"] for it in boxes) * TT_ROW + TT_H
    parts = [f'<rect x="{left}" y="{top}" width="{tree_w}" height="{tree_h}" rx="6" fill="white" stroke="#e5e7eb"/>']
    parts += [_edge(it, spot) for it in boxes]  # the edges first, so the boxes cover their ends
    parts += [_box(it, items, *spot[it["key"]]) for it in boxes]
    mask_x = left + tree_w + 28
    mask_w, mask_h = _mask_svg(parts, items["mask"], items, mask_x, top)

    meta, body = snapshot.meta, top + max(tree_h, mask_h)
    totals = (f"finished tree steps: {meta['steps']} · {meta['emitted']} tokens from {meta['steps']} target passes "
              f"({meta['emitted'] / meta['steps']:.2f} a pass) · {meta['accepted']} guesses accepted"
              if meta.get("steps") else "")
    lines = [line[:129] + "…" if len(line) > 130 else line for line in (totals, snapshot.caption) if line]
    for n, line in enumerate(lines):
        italic = ' font-style="italic"' if n == len(lines) - 1 and snapshot.caption else ""  # as the widget has it
        parts.append(f'<text x="{left}" y="{body + 28 + 22 * n}" fill="#374151"{italic}>{escape(line)}</text>')
    target = "" if step.get("verify_ms") is None else f" · target pass {step['verify_ms']:.1f} ms"
    heading = (f"tree step {step['index'] + 1} · request {step['request']}, step {step['step']} · root at position "
               f"{step['position']} · {step['drafter']} drafter · {step['nodes'] - 1} guesses · draft "
               f"{step['draft_ms']:.1f} ms{target}")
    key, key_w = _tree_key(left, 32)
    # wide enough for the words too (about 7.6 px a character of 15 px text, 7.2 of 14 px)
    width = max(mask_x + mask_w, left + key_w, left + 7.6 * len(heading), *(left + 7.2 * len(x) for x in lines)) + 10
    height = body + 12 + 22 * len(lines)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'font-family="{SANS}" font-size="14"><rect width="{width:.0f}" height="{height:.0f}" fill="white"/>'
            f'<text x="{left}" y="20" font-size="15" fill="#111827">{escape(heading)}</text>{key}{"".join(parts)}'
            f'</svg>')


def _edge(item: dict, spot: dict) -> str:
    """The line from a node's parent (the final token's node) to it: right side to left side, as token_tree.js."""
    final = item["key"] == "final"
    parent = f"n{item['at']}" if final else f"n{item['parent']}"
    if parent not in spot:  # the root
        return ""
    (ax, ay), (bx, by) = spot[parent], spot[item["key"]]
    x1, y1, x2, y2 = ax + TT_W, ay + TT_H / 2, bx, by + TT_H / 2
    stroke, width, dash = EDGES[item["kind"] if final else item["state"]]
    dashes = f' stroke-dasharray="{dash}"' if dash else ""
    return (f'<path d="M {x1} {y1} C {(x1 + x2) / 2} {y1}, {(x1 + x2) / 2} {y2}, {x2} {y2}" fill="none" '
            f'stroke="{stroke}" stroke-width="{width}"{dashes}/>')


def _box(item: dict, items: dict, x: float, y: float) -> str:
    """A node's box at (x, y): its number, its token (struck through when refused), its two lines, its tooltip."""
    final = item["key"] == "final"
    state = item["kind"] if final else item["state"]
    fill_, line = NODE_COLORS[state]
    dash = {"drafted": ' stroke-dasharray="5 3"', "untried": ' stroke-dasharray="2 3"'}.get(state, "")
    pen = 1 if state in ("root", "untried", "drafted") else 2.5
    label, (head, tail) = token_label(item.get("text"), item["token"]), box_lines(item)
    middle = x + TT_W / 2
    strike = ""
    if state == "rejected":  # as the text view strikes a rejected guess (17 px monospace: ~10 px a character)
        half = 4.9 * len(label)
        strike = (f'<line x1="{middle + 6 - half:.1f}" y1="{y + 15}" x2="{middle + 6 + half:.1f}" y2="{y + 15}" '
                  f'stroke="{line}" stroke-width="1.5"/>')
    number = "" if final else f'<text x="{x + 7}" y="{y + 20}" fill="#6b7280">{item["i"]}</text>'
    faint = ' opacity="0.45"' if state == "untried" else ""
    return (f'<g data-node="{"final" if final else item["i"]}" data-state="{state}"{faint}>'
            f'<title>{escape(_why(item, items))}</title>'
            f'<rect x="{x}" y="{y}" width="{TT_W}" height="{TT_H}" rx="8" fill="{fill_}" stroke="{line}" '
            f'stroke-width="{pen}"{dash}/>{number}'
            f'<text x="{middle + 6}" y="{y + 20}" text-anchor="middle" font-size="17" '
            f'fill="{"#dc2626" if state == "rejected" else "#111827"}" font-family="{MONO}" xml:space="preserve">'
            f'{escape(label)}</text>{strike}'
            f'<text x="{middle}" y="{y + 39}" text-anchor="middle" fill="#374151">{escape(head)}</text>'
            f'<text x="{middle}" y="{y + 57}" text-anchor="middle" fill="#374151">{escape(tail)}</text></g>')


def _tree_key(x: float, y: float) -> tuple[str, float]:
    """The legend: a swatch and a word per state, then the mask's filled cell; returns it and its width."""
    parts, kx = [], x
    for state in ("root", "accepted", "rejected", "untried", "resampled", "bonus", "drafted"):
        fill_, line = NODE_COLORS[state]
        word = "not tried" if state == "untried" else state
        parts.append(f'<rect x="{kx:.1f}" y="{y}" width="18" height="14" rx="3" fill="{fill_}" stroke="{line}"/>'
                     f'<text x="{kx + 24:.1f}" y="{y + 12}">{word}</text>')
        kx += 24 + 8.2 * len(word) + 16
    parts.append(f'<rect x="{kx:.1f}" y="{y}" width="14" height="14" rx="3" fill="{MASK_ON}"/>'
                 f'<text x="{kx + 20:.1f}" y="{y + 12}">may attend (mask)</text>')
    return "".join(parts), kx + 160 - x


def _mask_svg(parts: list[str], mask: dict, items: dict, x0: float, y0: float) -> tuple[float, float]:
    """The mask's grid into `parts`, from (x0, y0): a title, the keys (context tokens, then node numbers), then a
    row per node; returns its width and height."""
    context, rows = mask["context"], mask["cells"]
    keys = [token_label(text, token, 3) if token is not None else "…" for token, text in context] + \
        [str(j) for j in range(len(rows))]
    grid_x = x0 + ROW_LABEL
    parts.append(f'<text x="{x0}" y="{y0 + 14}" font-weight="bold" fill="#111827">tree attention mask</text>')
    for name, start, count in (("context", 0, len(context)), ("tree nodes", len(context), len(rows))):
        if count:
            a, b = grid_x + start * PITCH, grid_x + (start + count) * PITCH - (PITCH - CELL)
            parts.append(f'<text x="{(a + b) / 2:.1f}" y="{y0 + 34}" text-anchor="middle" fill="#4b5563">{name}'
                         f'</text><line x1="{a}" y1="{y0 + 38}" x2="{b}" y2="{y0 + 38}" stroke="#d1d5db"/>')
    for j, key in enumerate(keys):
        mono = f' font-family="{MONO}"' if j < len(context) else ""
        parts.append(f'<text x="{grid_x + j * PITCH + CELL / 2}" y="{y0 + 56}" text-anchor="middle" fill="#4b5563"'
                     f'{mono} xml:space="preserve">{escape(key)}</text>')
    top = y0 + 64
    for i, cells in enumerate(rows):
        node = items.get(f"n{i}", {})
        state = node.get("state", "")
        ink = {"accepted": "#16a34a", "rejected": "#dc2626"}.get(state, "#374151")
        y = top + i * PITCH
        label = f"{i} {token_label(node.get('text'), node.get('token'), 5)}"
        faint = ' opacity="0.5"' if state == "untried" else ""
        parts.append(f'<text x="{x0}" y="{y + 17}" fill="{ink}" data-row-label="{i}"{faint} '
                     f'font-family="{MONO}" xml:space="preserve">{escape(label)}</text>')
        for j, cell in enumerate(cells):
            parts.append(f'<rect x="{grid_x + j * PITCH}" y="{y}" width="{CELL}" height="{CELL}" rx="3" '
                         f'fill="{MASK_ON if cell == "1" else MASK_OFF}" data-row="{i}" data-col="{j}"/>')
    return ROW_LABEL + len(keys) * PITCH, 64 + len(rows) * PITCH


def _why(item: dict, items: dict) -> str:
    """A node's tooltip: what it is and, once judged, its numbers (p and q after any rejected siblings)."""
    def word(i: int) -> str:
        node = items.get(f"n{i}", {})
        return f"node {i} {token_label(node.get('text'), node.get('token'), 16)}"
    if item["key"] == "final":
        return (f"bonus: {word(item['at'])} is a leaf, so p after it gives one more token free" if item["kind"] ==
                "bonus" else f"resampled: every child of {word(item['at'])} was refused; drawn from the last residual")
    where = "the root" if item["parent"] < 0 else f"depth {item['depth']}, child of {word(item['parent'])}"
    numbers = f": p' = {item['p']:.3g}, q' = {item['q']:.3g}, u = {item['u']:.3g}" if item.get("verdict") else ""
    return f"{word(item['i'])} ({where}), {item['state']}{numbers}"
