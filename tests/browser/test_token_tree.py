"""The token tree view at a projector's 1280 x 720, in the page `export_html` writes and in a real JupyterLab.

A sampled tree run of the bundled pair (`tree=(2, 2)`, temperature 1) is saved as a trace and replayed; headless
Chromium then checks, through the view's DOM hooks (data-node, data-row, data-col, data-tree-step):

- the first frame draws the first step's tree: one box per node, one mask row per node, and a filled cell where
  the row's node may attend (every context column, then its ancestors and itself: depth + 1 nodes);
- the tree-step buttons go to the end of a step and back, and the verdicts drawn then are the step's events';
- the player's own back and forward buttons step one frame;
- everything fits: the view inside 1280 x 720, every node inside the tree's panel, every label 14 px or more (less
  0.05 px: the drawing's size is rounded to whole pixels), and so is every other text of the view.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from helpers.lab import CHROMIUM, FLAGS, SMALL_TEXT, offline_page, run_all_cells, write_notebook
from teachspec.engine import Engine
from teachspec.events import Accept, EventLog, Reject, TreeDraft
from teachspec.models import load_pair
from teachspec.widgets import TokenTreeView, export_html
from teachspec.widgets.token_tree import CONTEXT

VIEWPORT = {"width": 1280, "height": 720}

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)"),
]

FITS = """([view, wrap]) => {
  const v = view.getBoundingClientRect(), w = wrap.getBoundingClientRect();
  const boxes = [...wrap.querySelectorAll('g[data-node] rect')].map((r) => r.getBoundingClientRect());
  const outside = boxes.filter((b) => b.left < w.left - 1 || b.right > w.right + 1 || b.top < w.top - 1 ||
    b.bottom > w.bottom + 1).length;
  const sizes = [...wrap.querySelectorAll('g[data-node] text')].filter((t) => t.textContent)
    .map((t) => parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a);  // as drawn, scaled
  return { width: v.width, height: v.height, right: v.right, boxes: boxes.length, outside,
           smallest: Math.min(...sizes) };
}"""


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    engine = Engine(load_pair("tiny"))
    engine.generate("def read(path):\n    with open(path) as", 16, tree=(2, 2), temperature=1, seed=1)
    return engine.events.save(tmp_path_factory.mktemp("trace") / "tree.jsonl")


def sync_api():
    return pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")


def judged_in(log: EventLog, draft: TreeDraft) -> tuple[set[int], set[int]]:
    """The nodes accepted and rejected in `draft`'s step."""
    mine = [e for e in log.of(Accept, Reject) if (e.request, e.step) == (draft.request, draft.step)]
    return {e.i for e in mine if isinstance(e, Accept)}, {e.i for e in mine if isinstance(e, Reject)}


def fit_of(page, view) -> dict:
    """The view's size and right edge, its node boxes (and how many lie outside the tree's panel), and its smallest
    label in px."""
    return page.evaluate(FITS, [view.element_handle(), view.locator(".ts-tt-wrap").element_handle()])


def check_view(page, view, log: EventLog) -> None:
    drafts = log.of(TreeDraft)
    counter = view.locator(".ts-counter")
    assert view.get_attribute("data-tree-steps") == str(len(drafts))

    # the first frame: the first tree, drafted, and its mask
    view.locator("input.ts-slider[type=range]").fill("0")
    first = drafts[0]
    n = len(first.parents)
    assert view.get_attribute("data-tree-step") == "1"
    assert view.locator("g[data-node]").count() == n
    assert view.locator("g[data-node].drafted").count() == n - 1
    assert view.locator("tr[data-row]").count() == n
    assert view.locator("tr[data-row] td[data-col]").count() == n * (CONTEXT + n)
    depth = [0] * n
    for i in range(1, n):
        depth[i] = depth[first.parents[i]] + 1
    assert view.locator("tr[data-row] td.on").count() == n * CONTEXT + sum(d + 1 for d in depth)
    for i in range(n):  # row i: the context, then exactly its ancestors and itself
        seen, j = set(), i
        while j >= 0:
            seen.add(j)
            j = first.parents[j]
        on = view.locator(f"tr[data-row='{i}'] td.on")
        cols = {int(on.nth(c).get_attribute("data-col")) for c in range(on.count())}
        assert cols == set(range(CONTEXT)) | {CONTEXT + s for s in seen}, f"mask row {i}"

    # the tree-step buttons: to the end of step 1, of step 2, and back
    view.locator(".ts-tree-next").click()
    assert view.get_attribute("data-tree-step") == "1"
    accepted, rejected = judged_in(log, first)
    assert {int(view.locator("g.accepted").nth(i).get_attribute("data-node"))
            for i in range(view.locator("g.accepted").count())} == accepted
    assert {int(view.locator("g.rejected").nth(i).get_attribute("data-node"))
            for i in range(view.locator("g.rejected").count())} == rejected
    for i in rejected:
        assert "≥ p/q" in view.locator(f"g[data-node='{i}']").text_content()
    assert view.locator("g[data-node='final']").count() == 1
    end_of_first = counter.inner_text()
    view.locator(".ts-tree-next").click()
    assert view.get_attribute("data-tree-step") == "2"
    assert view.locator("g[data-node]").count() == len(drafts[1].parents) + 1  # the nodes and the final token
    view.locator(".ts-tree-prev").click()
    assert view.get_attribute("data-tree-step") == "1" and counter.inner_text() == end_of_first

    # the player's own buttons: one frame at a time
    shown = int(end_of_first.split("/")[0])
    view.locator(".ts-back").click()
    assert int(counter.inner_text().split("/")[0]) == shown - 1
    view.locator(".ts-forward").click()
    view.locator(".ts-forward").click()
    assert int(counter.inner_text().split("/")[0]) == shown + 1
    assert view.get_attribute("data-tree-step") == "2"

    # it fits the screen and reads from the back of the room, at every step's end; the last one disables "next"
    ends = 0
    while view.locator(".ts-tree-next").is_enabled():
        view.locator(".ts-tree-next").click()
        ends += 1
        fit = fit_of(page, view)
        assert fit["boxes"] >= 3 and fit["outside"] == 0, fit
        assert fit["right"] <= VIEWPORT["width"] and fit["height"] <= VIEWPORT["height"] - 100, fit
        assert fit["smallest"] >= 14 - 0.05, fit
    assert ends == len(drafts) - 1 and view.get_attribute("data-tree-step") == str(len(drafts))


def test_the_exported_page_draws_each_tree_and_steps_through_them(trace, tmp_path, shots):
    log = EventLog.load(trace)
    path = export_html(TokenTreeView(log, pair="tiny"), tmp_path / "tree.html", title="Trees of guesses")
    with sync_api().sync_playwright() as p:
        browser, page, blocked, errors = offline_page(p)
        page.set_viewport_size(VIEWPORT)
        page.goto(path.as_uri())
        view = page.locator(".ts-token-tree")
        view.locator("g[data-node]").first.wait_for(timeout=10_000)
        check_view(page, view, log)
        view.locator(".ts-tree-prev").click()
        view.locator("g[data-node='1']").hover()  # a node marks its mask row and the nodes that row sees
        assert view.locator("tr[data-row='1'][data-highlight]").count() == 1
        assert view.locator("g[data-node='0'][data-highlight]").count() == 1
        assert not page.evaluate(SMALL_TEXT, [view.element_handle()])  # every text 14 px or more
        view.screenshot(path=str(shots / "token_tree.png"))
        browser.close()
    assert not blocked and not errors, (blocked, errors)


def test_in_jupyterlab_the_view_renders_and_its_step_buttons_work(trace, lab, tmp_path, shots):
    url, token = lab
    write_notebook(tmp_path / "lab" / "trees.ipynb",
                   "from teachspec.events import EventLog\n"
                   "from teachspec.widgets import TokenTreeView\n"
                   f"TokenTreeView(EventLog.load({str(trace)!r}), pair='tiny')")
    with sync_api().sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        page = browser.new_page(viewport=VIEWPORT)
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        run_all_cells(page, f"{url}/lab/tree/trees.ipynb?reset&token={token}")  # reset: no restored workspace
        view = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .ts-token-tree").first
        view.locator("g[data-node]").first.wait_for(timeout=180_000)
        start = time.monotonic()
        view.scroll_into_view_if_needed()
        # beside the file browser, as JupyterLab opens: the newest tree fits whole and reads
        fit = fit_of(page, view)
        assert fit["outside"] == 0 and fit["right"] <= VIEWPORT["width"] and fit["smallest"] >= 14 - 0.05, fit
        page.screenshot(path=str(shots / "token_tree_lab_sidebar.png"))
        # a lecturer hides the sidebar: the whole check, every step
        page.evaluate("() => window.jupyterapp.commands.execute('application:toggle-left-area')")
        page.wait_for_timeout(500)
        check_view(page, view, EventLog.load(trace))
        assert time.monotonic() - start < 120
        view.screenshot(path=str(shots / "token_tree_lab.png"))
        browser.close()
    assert not errors, errors
