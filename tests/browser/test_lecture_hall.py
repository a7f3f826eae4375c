"""What a lecture hall sees at a projector's 1280 x 720, in JupyterLab with its file browser open (as it opens).

Headless Chromium runs the lectures' own cells in a real JupyterLab and measures the DOM (the views' hooks:
data-node-id, data-focus, data-scale):

- lecture 5's radix tree (its live demo, recorded as traces/radix_shared.jsonl, and its replay of
  traces/radix_eviction.jsonl): at every frame the tree fits its box, every node the caption names ("insert ... as
  node 13 under node 12", "path 0 -> 2 -> 5", "root") lies inside the box, and its labels are 14 px or more, also
  unfolded in a box too narrow for it (the box follows the caption's nodes) and zoomed out as far as it goes;
- lecture 7 (its cells, the benchmark left out): the tree and the text side by side, and while either plays, the
  text's focused token and the tree are both inside the notebook's visible area; the replay opens on its last
  token, inside its box; the note under a token's bars is true of an engine built with record_top=3; the labels of
  its charts do not overlap (plotly's drawing here, and the still pictures a notebook keeps);
- no text in any view is under 14 px.

Each test takes well under a minute: one JupyterLab, the bundled pair, no hub.
"""

from __future__ import annotations

import re
import shutil
import time

import nbformat
import pytest

from helpers.lab import CHROMIUM, ROOT, SHOWN, SMALL_TEXT, VIEWPORT, inside, offline_page, open_lab, sync_api, write
from teachspec.events import EventLog
from teachspec.widgets import charts

TRACES = ROOT / "notebooks" / "traces"
LECTURE_7 = ROOT / "notebooks" / "07_both_together.ipynb"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)"),
]

# -- measures, in the page (SMALL_TEXT and `inside` are in tests/helpers/lab.py) ----------------------------------

# Step a tree view through all its frames with its slider; at each, the nodes its caption names and where they lie.
TREE_FRAMES = """(view) => {
  const slider = view.querySelector('input.ts-slider'), wrap = view.querySelector('.ts-tree-wrap');
  const svg = view.querySelector('svg.ts-tree');
  const seen = [];
  for (let f = 0; f <= Number(slider.max); f++) {
    slider.value = String(f);
    slider.dispatchEvent(new Event('input'));
    const caption = view.querySelector('.ts-caption').textContent.replace(/: ['"].*$/s, '');  // not the quote
    const named = new Set([...caption.matchAll(/node (\\d+)/g)].map((m) => m[1]));
    for (const m of caption.matchAll(/path ([\\d >-]+)/g)) for (const id of m[1].split('->')) named.add(id.trim());
    if (/\\broot\\b/.test(caption)) named.add('0');
    const w = wrap.getBoundingClientRect();
    const left = w.left + wrap.clientLeft, top = w.top + wrap.clientTop;  // the box's inside, less scrollbars
    const outside = [...named].filter((id) => {
      const box = view.querySelector(`g[data-node-id="${id}"] > rect`);
      if (!box) return true;
      const r = box.getBoundingClientRect();
      return r.left < left - 1 || r.top < top - 1 || r.right > left + wrap.clientWidth + 1 ||
        r.bottom > top + wrap.clientHeight + 1;
    });
    const sizes = [...view.querySelectorAll('g[data-node-id] text')].filter((t) => t.textContent &&
      t.getBoundingClientRect().width).map((t) => parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a);
    seen.push({ frame: f, caption, named: [...named], outside, smallest: Math.min(...sizes),
                width: Number(svg.getAttribute('width')), room: wrap.clientWidth });
  }
  return seen;
}"""

# Where the focused token, the text's box, the tree's box and the notebook's visible area are, in px.
WHERE = """([text, tree, area]) => {
  const r = (e) => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
  const focus = text.querySelector('.ts-text [data-focus]');
  return { focus: focus && r(focus), box: r(text.querySelector('.ts-text')),
           tree: r(tree.querySelector('.ts-tree-wrap')), area: r(area), frame: text.dataset.frame,
           treeFrame: tree.dataset.frame };
}"""

# The chart's drawn texts (title, ticks, legend, annotations, bar labels) as [text, left, top, right, bottom],
# and its bars' boxes.
CHART_BOXES = """(svg) => {
  const box = (e) => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
  const texts = [...svg.querySelectorAll('text')].filter((t) => t.textContent.trim() && t.getBoundingClientRect().width)
    .map((t) => [t.textContent.trim(), ...box(t)]);
  const bars = [...svg.querySelectorAll('.bars path, rect.bar')].map(box).filter((b) => b[2] > b[0]);
  const labels = [...svg.querySelectorAll('.annotation-text, text.annotation')].map((t) => [t.textContent, ...box(t)]);
  return { texts, bars, labels };
}"""


def overlapping(boxes) -> list:
    """Pairs of labelled boxes [text, left, top, right, bottom] that overlap by more than a pixel each way."""
    found = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if min(a[3], b[3]) - max(a[1], b[1]) > 1 and min(a[4], b[4]) - max(a[2], b[2]) > 1:
                found.append((a[0], b[0]))
    return found


def check_chart(page, svg) -> None:
    found = page.evaluate(CHART_BOXES, svg.element_handle())
    assert len(found["texts"]) >= 5, found
    assert not overlapping(found["texts"]), overlapping(found["texts"])
    on_bars = [label[0] for label in found["labels"] for bar in found["bars"]
               if overlapping([label, ["bar", *bar]])]
    assert not on_bars, f"labels drawn on the bars: {on_bars}"


# -- lecture 5: a wide tree ----------------------------------------------------------------------------------------

def test_lecture_5s_tree_fits_and_keeps_the_nodes_its_caption_names_in_view(lab, tmp_path, shots):
    url, token = lab
    for name in ("radix_shared.jsonl", "radix_eviction.jsonl"):
        shutil.copy(TRACES / name, tmp_path / "lab")
    write(tmp_path / "lab" / "tree.ipynb", [
        "from teachspec import EventLog\nfrom teachspec.widgets import RadixTreeView",
        'RadixTreeView(EventLog.load("radix_shared.jsonl"), budget=8192)  # lecture 5\'s live demo, recorded',
        'RadixTreeView(EventLog.load("radix_eviction.jsonl"), budget=400)  # lecture 5\'s replay',
        # nothing folded: 8 leaves, wider than the box, which then follows the caption's nodes
        'RadixTreeView(EventLog.load("radix_shared.jsonl"), budget=8192, columns=None)'])
    with sync_api().sync_playwright() as p:
        browser, page, errors = open_lab(p, url, token, "tree.ipynb")
        views = page.locator(f"{SHOWN} .ts-radix")
        views.nth(2).locator("g[data-node-id]").first.wait_for(timeout=120_000)
        start = time.monotonic()
        page.add_style_tag(content=".ts-node, .ts-tree .edge { transition: none !important; }")  # final places
        for n, folded in enumerate((True, True, False)):
            view = views.nth(n)
            view.scroll_into_view_if_needed()
            frames = page.evaluate(TREE_FRAMES, view.element_handle())
            assert len(frames) > 40 and frames[0]["room"] > 800  # the output's width beside the file browser
            inserts = [f for f in frames if re.match(r"insert: \d+ new tokens as node \d+ under node", f["caption"])]
            assert inserts and all(len(f["named"]) == 2 for f in inserts)
            for f in frames:
                assert not f["outside"], f"view {n}, frame {f['frame']}: nodes {f['outside']} of {f['caption']!r} " \
                                         f"lie outside the tree's box"
                assert f["width"] <= f["room"] or not folded, f"view {n}, frame {f['frame']}: {f['width']} px wide"
                assert f["smallest"] >= 14 - 0.05, f"view {n}, frame {f['frame']}: a {f['smallest']:.2f} px label"
            assert folded or max(f["width"] for f in frames) > frames[0]["room"]  # it did have to follow
            assert not page.evaluate(SMALL_TEXT, [view.element_handle()])
        # zooming out stops at 14 px labels
        view = views.nth(0)
        view.scroll_into_view_if_needed()
        out = view.locator(".ts-zoom").first
        for _ in range(4):
            if out.is_enabled():
                out.click()
        assert out.is_disabled() and page.evaluate(TREE_FRAMES, view.element_handle())[-1]["smallest"] >= 14 - 0.05
        assert time.monotonic() - start < 30
        page.screenshot(path=str(shots / "lecture5_tree.png"))
        browser.close()
    assert not errors, errors


# -- lecture 7: both views, played ---------------------------------------------------------------------------------

def lecture_7_cells() -> list[str]:
    """Lecture 7's cells, found by what they do: the pair, the live views, the prediction its run reveals, the run,
    the charts, the replay."""
    cells = [c.source for c in nbformat.read(LECTURE_7, as_version=4).cells if c.cell_type == "code"]
    wanted = ("pick_pair(", "SpeculationView.live(", "hit_guess = Predict(", "engine.serve(requests", "charts.cache_over_time(",
              "charts.tokens_per_pass(", 'EventLog.load("traces/together.jsonl")')
    found = [next((c for c in cells if w in c), None) for w in wanted]
    assert all(found), f"lecture 7 no longer has the cells {[w for w, c in zip(wanted, found) if c is None]}"
    return found


def check_playing(page, text, tree, press, shot=None, seconds: float = 3.0) -> int:
    """Press `press` (a play button) and, while the views play, check that the focused token and the tree are
    inside the notebook's visible area; returns the number of frames seen."""
    area = page.locator(f"{SHOWN} .jp-WindowedPanel-outer")
    press.click()
    frames, deadline = set(), time.monotonic() + seconds
    while time.monotonic() < deadline:
        at = page.evaluate(WHERE, [text.element_handle(), tree.element_handle(), area.element_handle()])
        assert at["focus"], f"no focused token at frame {at['frame']}"
        assert inside(at["focus"], at["box"]), f"frame {at['frame']}: the focused token is outside the text's box"
        assert inside(at["focus"], at["area"]), f"frame {at['frame']}: the focused token is off the screen {at}"
        assert inside(at["tree"], at["area"]), f"frame {at['frame']}: the tree is off the screen {at}"
        frames.add((at["frame"], at["treeFrame"]))
        if shot is not None and len(frames) == 6:
            page.screenshot(path=str(shot))
        page.wait_for_timeout(120)
    press.click()  # pause
    return len(frames)


def test_lecture_7_plays_with_the_focus_and_the_tree_on_screen(lab, tmp_path, shots):
    url, token = lab
    shutil.copytree(TRACES, tmp_path / "lab" / "traces")
    write(tmp_path / "lab" / "lecture7.ipynb", lecture_7_cells())
    with sync_api().sync_playwright() as p:
        browser, page, errors = open_lab(p, url, token, "lecture7.ipynb")
        rows = page.locator(f"{SHOWN} .ts-side-by-side")
        rows.nth(1).locator(".ts-text [data-token-index]").first.wait_for(timeout=150_000)
        start = time.monotonic()

        # the replay opens on its last token, inside its box
        replay = rows.nth(1)
        replay.scroll_into_view_if_needed()
        text, tree = replay.locator(".ts-spec"), replay.locator(".ts-radix")
        at = page.evaluate(WHERE, [text.element_handle(), tree.element_handle(),
                                   page.locator(f"{SHOWN} .jp-WindowedPanel-outer").element_handle()])
        assert at["focus"] and inside(at["focus"], at["box"]), f"the replay opens with its focus hidden: {at}"

        # side by side, and while either plays the focus and the tree are on screen
        for row, which in ((rows.nth(0), ".ts-radix"), (replay, ".ts-spec")):
            text, tree = row.locator(".ts-spec"), row.locator(".ts-radix")
            row.evaluate("(e) => e.scrollIntoView({ block: 'start' })")
            a, b = text.bounding_box(), tree.bounding_box()
            assert abs(a["y"] - b["y"]) < 2 and a["x"] != b["x"], f"not side by side: {a} {b}"
            row.locator(f"{which} .ts-speed").select_option("2")
            shot = shots / f"lecture7_playing_{which[4:]}.png"
            assert check_playing(page, text, tree, row.locator(f"{which} .ts-play"), shot) >= 4

        # the live view: record_top=3 recorded alternatives, and the note under the bars says nothing false
        live = rows.nth(0).locator(".ts-spec")
        notes = page.evaluate("""(view) => {
            const slider = view.querySelector('input.ts-slider'), seen = new Set();
            for (let f = 0; f <= Number(slider.max); f++) {
                slider.value = String(f); slider.dispatchEvent(new Event('input'));
                seen.add(view.querySelector('.ts-note')?.textContent ?? '');  // none: no token to explain
            }
            return [...seen];
        }""", live.element_handle())
        assert not [n for n in notes if "recorded no alternatives" in n], notes
        assert any(n.startswith("Waiting for the target pass") for n in notes), notes
        live.locator(".ts-text .tok.accepted").first.click()
        assert live.locator(".ts-alternatives tr").count() >= 4  # a header and the top 3
        assert live.locator(".ts-note").inner_text() == ""

        # no text under 14 px in any view; the charts' labels apart
        views = page.locator(f"{SHOWN} .ts-view")
        for i in range(views.count()):
            views.nth(i).scroll_into_view_if_needed()
            assert not page.evaluate(SMALL_TEXT, [views.nth(i).element_handle()]), f"view {i}"
        plots = page.locator(f"{SHOWN} .js-plotly-plot")
        for i in range(2):
            plots.nth(i).scroll_into_view_if_needed()
            plots.nth(i).locator(".main-svg").first.wait_for()
            check_chart(page, plots.nth(i))
        assert time.monotonic() - start < 40
        browser.close()
    assert not errors, errors


def test_the_charts_keep_their_labels_apart_drawn_by_plotly_and_as_pictures(tmp_path):
    """Every chart of lecture 7's trace as plotly.js draws it at the width of a notebook's output (848 px at 1280 x
    720 beside JupyterLab's file browser), and as the still picture a notebook keeps of it (chartsvg.py)."""
    import plotly.offline

    log = EventLog.load(TRACES / "together.jsonl")
    figures = [chart(log) for chart in (charts.acceptance_by_position, charts.tokens_per_pass, charts.timeline,
                                        charts.cache_over_time)]
    (tmp_path / "plotly.min.js").write_text(plotly.offline.get_plotlyjs())
    with sync_api().sync_playwright() as p:
        browser, page, blocked, errors = offline_page(p)
        page.set_viewport_size(VIEWPORT)
        for n, fig in enumerate(figures):
            path = tmp_path / f"chart{n}.html"
            path.write_text(fig.to_html(include_plotlyjs="directory", default_width="848px"))
            page.goto(path.as_uri())
            page.locator(".js-plotly-plot .gtitle").first.wait_for(timeout=10_000)
            check_chart(page, page.locator(".js-plotly-plot"))
            page.set_content(f"<body style='margin: 0'>{fig.to_svg()}</body>")
            check_chart(page, page.locator("svg").first)
            assert not page.evaluate(SMALL_TEXT, [page.locator("svg").first.element_handle()])
        browser.close()
    assert not blocked and not errors, (blocked, errors)
