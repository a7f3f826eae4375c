"""What a lecture hall sees, at a projector's 1280 x 720: the focus on screen, linked views, a readable tree.

The notebook 7 trace (notebooks/traces/together.jsonl) is replayed as its two linked views, in the page
`export_html` writes (opened from file://, every other request refused) and in a real JupyterLab, and the DOM is
measured through the hooks the views carry (data-token-index, data-focus, data-highlight, data-node-id,
data-legend, data-step, data-event):

- at every tenth frame of the text, the focused token's box lies inside the text box's visible area;
- at every frame of the tree, every node's box lies inside the tree view, with labels of 14 px or more;
- every token is a chip with a box (whitespace included), and every legend entry is there;
- hovering a tree node marks at least one token, and hovering a token marks its node;
- stepping one player moves every view of the page to the same event.

Reference screenshots of each view live in tests/browser/reference/; a test fails when a view's picture drifts far
from its reference (compared in the browser, on a coarse grid of mean colours, so antialiasing and fonts do not
matter but a moved or resized panel does). TEACHSPEC_UPDATE_REFERENCES=1 writes new references instead.
"""

from __future__ import annotations

import base64
import os
import time
from pathlib import Path

import pytest

from helpers.lab import CHROMIUM, FLAGS, ROOT, offline_page, run_all_cells, write_notebook
from teachspec.widgets.export import export_html

TRACE = ROOT / "notebooks" / "traces" / "together.jsonl"
REFERENCE = Path(__file__).parent / "reference"
VIEWPORT = {"width": 1280, "height": 720}
DRIFT = 0.05  # share of the coarse grid's cells whose colour changed, above which a view has drifted

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)"),
]

INSIDE = """([inner, outer]) => {
  const a = inner.getBoundingClientRect(), b = outer.getBoundingClientRect();
  return a.width > 0 && a.height > 0 && a.left >= b.left - 1 && a.right <= b.right + 1 && a.top >= b.top - 1 &&
    a.bottom <= b.bottom + 1;
}"""


@pytest.fixture(scope="module")
def page_file(tmp_path_factory) -> Path:
    return export_html(TRACE, tmp_path_factory.mktemp("page") / "together.html", pair="tiny",
                       title="Notebook 7: both together")


def sync_api():
    return pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")


def frames_of(view) -> int:
    return int(view.locator(".ts-counter").inner_text().split("/")[1])


def go_to(view, n: int) -> None:
    """Move a view's player to frame n (zero-based) the way a user does: with its slider."""
    view.locator("input.ts-slider[type=range]").fill(str(n))


def inside(page, inner, outer) -> bool:
    return page.evaluate(INSIDE, [inner.element_handle(), outer.element_handle()])


# -- the checks, the same in any page -----------------------------------------------------------------------------

def check_focus_stays_in_view(page, spec) -> list[int]:
    spec.scroll_into_view_if_needed()
    text = spec.locator(".ts-text")
    checked = []
    for n in range(0, frames_of(spec), 10):
        go_to(spec, n)
        focus = spec.locator(".ts-text [data-focus]")
        assert focus.count() == 1, f"frame {n}: {focus.count()} focused tokens"
        assert inside(page, focus, text), f"frame {n}: the focused token is outside the text's visible area"
        checked.append(n)
    return checked


def check_tree_fits_and_reads(page, tree) -> None:
    tree.scroll_into_view_if_needed()
    wrap = tree.locator(".ts-tree-wrap")
    for n in range(frames_of(tree)):
        go_to(tree, n)
        page.wait_for_timeout(450)  # nodes glide to their places (a 400 ms transition)
        nodes = tree.locator("g[data-node-id]")
        assert nodes.count() >= 1
        for i in range(nodes.count()):  # each node's box (its own rect, not its lock badge's)
            assert inside(page, nodes.nth(i).locator(":scope > rect"), wrap), \
                f"tree frame {n}: node {nodes.nth(i).get_attribute('data-node-id')} lies outside the tree view"
        sizes = page.evaluate("""(el) => [...el.querySelectorAll('g[data-node-id] text')].filter(t => t.textContent)
            .map(t => parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a)""", tree.element_handle())
        assert sizes and min(sizes) >= 14 - 0.05, f"tree frame {n}: labels of {min(sizes):.2f} px"  # as drawn
    legend = {tree.locator("[data-legend]").nth(i).get_attribute("data-legend")
              for i in range(tree.locator("[data-legend]").count())}
    assert legend >= {"matched", "new", "split", "locked", "evicted", "stub"}, legend


def check_every_token_is_a_chip(page, spec) -> None:
    go_to(spec, frames_of(spec) - 1)
    boxes = page.evaluate("""(el) => [...el.querySelectorAll('.ts-text [data-token-index]')].map(c => {
        const r = c.getBoundingClientRect(); return [c.dataset.tokenIndex, r.width, r.height, c.textContent]; })""",
                          spec.element_handle())
    assert len(boxes) > 50
    assert [int(b[0]) for b in boxes] == list(range(len(boxes)))
    empty = [b for b in boxes if not (b[1] > 2 and b[2] > 8 and b[3].strip())]
    assert not empty, f"tokens without a visible box: {empty[:5]}"
    assert any("↵" in b[3] for b in boxes), "no newline shown as a return glyph"
    assert spec.locator(".ts-text [data-step]").count() > 10
    kinds = {spec.locator("[data-legend]").nth(i).get_attribute("data-legend")
             for i in range(spec.locator("[data-legend]").count())}
    assert kinds >= {"drafted", "accepted", "rejected", "resampled", "bonus", "plain", "step"}, kinds
    prompt = spec.locator(".ts-text .prompt-chip").first
    assert prompt.inner_text().startswith("prompt · 133 tokens · …")
    before = spec.locator(".ts-prompt-full").count()
    prompt.click()
    assert spec.locator(".ts-prompt-full").count() == before + 1  # the folded prompt opens
    spec.locator(".ts-text .prompt-chip").first.click()
    assert spec.locator(".ts-prompt-full").count() == before


def check_hover_links_tree_and_text(page, spec, tree) -> None:
    go_to(spec, frames_of(spec) - 1)
    tree.scroll_into_view_if_needed()
    marked = 0
    nodes = tree.locator("g[data-node-id]:not(.root):not(.stub)")
    for i in range(nodes.count()):
        nodes.nth(i).hover()
        marked = max(marked, spec.locator(".ts-text [data-highlight]").count())
    assert marked >= 1, "hovering the tree's nodes marked no token in the text"
    page.mouse.move(0, 0)
    spec.scroll_into_view_if_needed()
    spec.locator(".ts-text .tok.accepted").last.hover()
    assert tree.locator("g[data-node-id][data-highlight]").count() >= 1, "a token does not point at its node"


def check_one_timeline(page, spec, tree) -> None:
    views = page.locator(f".ts-view[data-link='{spec.get_attribute('data-link')}']")
    assert views.count() == 2
    spec.scroll_into_view_if_needed()
    for n in (5, 40, 100):
        go_to(spec, n)
        events = {views.nth(i).get_attribute("data-event") for i in range(views.count())}
        assert len(events) == 1, f"after moving the text to frame {n} the views show events {events}"
    tree.scroll_into_view_if_needed()
    tree.locator(".ts-forward").click()
    events = {views.nth(i).get_attribute("data-event") for i in range(views.count())}
    assert len(events) == 1, f"stepping the tree left the views at events {events}"


def drift(page, shot: bytes, reference: Path) -> float:
    """The share of a 64 x 36 grid's cells whose mean colour differs by more than 24/255 in a channel between the two
    pictures (0: the same layout; 1 when their sizes differ by more than a fifth)."""
    urls = ["data:image/png;base64," + base64.b64encode(b).decode() for b in (shot, reference.read_bytes())]
    return page.evaluate("""async (urls) => {
        const load = (u) => new Promise((ok) => { const i = new Image(); i.onload = () => ok(i); i.src = u; });
        const [a, b] = await Promise.all(urls.map(load));
        if (Math.abs(a.height - b.height) > 0.2 * b.height || Math.abs(a.width - b.width) > 0.2 * b.width) return 1;
        const grid = (img) => { const c = document.createElement('canvas'); c.width = 64; c.height = 36;
            const g = c.getContext('2d'); g.drawImage(img, 0, 0, 64, 36); return g.getImageData(0, 0, 64, 36).data; };
        const x = grid(a), y = grid(b);
        let changed = 0;
        for (let i = 0; i < x.length; i += 4) {
            if (Math.max(Math.abs(x[i] - y[i]), Math.abs(x[i + 1] - y[i + 1]), Math.abs(x[i + 2] - y[i + 2])) > 24) changed++;
        }
        return changed / (x.length / 4);
    }""", urls)


# -- in the exported page -----------------------------------------------------------------------------------------

def open_page(p, page_file):
    browser, page, blocked, errors = offline_page(p)
    page.set_viewport_size(VIEWPORT)
    page.goto(page_file.as_uri())
    spec, tree = page.locator(".ts-spec"), page.locator(".ts-radix")
    spec.locator(".ts-text [data-token-index]").first.wait_for(timeout=10_000)
    return browser, page, blocked, errors, spec, tree


def test_the_focused_token_stays_in_view_at_every_tenth_frame(page_file):
    with sync_api().sync_playwright() as p:
        browser, page, blocked, errors, spec, tree = open_page(p, page_file)
        assert len(check_focus_stays_in_view(page, spec)) >= 15
        check_every_token_is_a_chip(page, spec)
        browser.close()
    assert not blocked and not errors, (blocked, errors)


def test_the_tree_fits_its_view_and_reads_at_14_px(page_file):
    with sync_api().sync_playwright() as p:
        browser, page, blocked, errors, spec, tree = open_page(p, page_file)
        check_tree_fits_and_reads(page, tree)
        browser.close()
    assert not blocked and not errors, (blocked, errors)


def test_linked_views_one_timeline_and_hover(page_file):
    with sync_api().sync_playwright() as p:
        browser, page, blocked, errors, spec, tree = open_page(p, page_file)
        check_one_timeline(page, spec, tree)
        check_hover_links_tree_and_text(page, spec, tree)
        browser.close()
    assert not blocked and not errors, (blocked, errors)


@pytest.mark.parametrize("name", ["speculation", "radix"])
def test_each_view_looks_like_its_reference(page_file, name, tmp_path):
    with sync_api().sync_playwright() as p:
        browser, page, blocked, errors, spec, tree = open_page(p, page_file)
        go_to(spec, 60)  # both views at the event of the text's frame 60, through the linked timeline
        page.mouse.move(0, 0)
        page.wait_for_timeout(600)
        view = spec if name == "speculation" else tree
        view.scroll_into_view_if_needed()
        shot = view.screenshot(animations="disabled")
        reference = REFERENCE / f"{name}.png"
        if os.environ.get("TEACHSPEC_UPDATE_REFERENCES") or not reference.exists():
            reference.write_bytes(shot)
            pytest.skip(f"wrote the reference {reference.relative_to(ROOT)}")
        (tmp_path / f"{name}.png").write_bytes(shot)
        assert drift(page, shot, reference) < DRIFT, f"{name} drifted from {reference}; see {tmp_path}"
        # the measure can fail: the other view's reference is far from this one
        other = REFERENCE / f"{'radix' if name == 'speculation' else 'speculation'}.png"
        if other.exists():
            assert drift(page, shot, other) > DRIFT
        browser.close()
    assert not blocked and not errors, (blocked, errors)


# -- in JupyterLab ------------------------------------------------------------------------------------------------

def test_in_jupyterlab_the_views_keep_the_focus_in_view_and_move_together(lab, tmp_path):
    url, token = lab
    write_notebook(tmp_path / "lab" / "linked.ipynb",
                   "import ipywidgets as w\n"
                   "from teachspec.widgets.export import views_of\n"
                   f"spec, tree = views_of({str(TRACE)!r}, pair='tiny')\n"
                   "w.VBox([spec, tree])")
    with sync_api().sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        page = browser.new_page(viewport=VIEWPORT)
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        run_all_cells(page, f"{url}/lab/tree/linked.ipynb?reset&token={token}")  # reset: no restored workspace
        shown = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")  # a restored workspace may open others
        spec, tree = shown.locator(".ts-spec").first, shown.locator(".ts-radix").first
        spec.locator(".ts-text [data-token-index]").first.wait_for(timeout=180_000)
        start = time.monotonic()
        checked = check_focus_stays_in_view(page, spec)
        assert len(checked) >= 15, checked
        check_one_timeline(page, spec, tree)
        check_hover_links_tree_and_text(page, spec, tree)
        assert time.monotonic() - start < 300
        browser.close()
    assert not errors, errors
