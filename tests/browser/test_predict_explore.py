"""Predict and the sliders in a real JupyterLab at a projector's 1280 x 720, in headless Chromium.

A notebook with two Predicts (a choice, a number), explore_speedup and explore_pass_cost runs in JupyterLab with
its file browser open (as it opens). The student's moves are the browser's: click a choice, press Commit and read
the verdict; type a number and commit it; press "Show me" instead and see the answer, the form locked; open the
folded verdict a reveal left; drag the alpha and c sliders' handles with the mouse and step k and n with the
keyboard, and see the readout and the chart change with each. Every text of the forms is 14 px or more, and each
form fits the notebook's visible area.

And a committed lecture opened before anyone runs it, as a student reading ahead meets it: its charts are on the
page, its questions are there as text, and the cell holding a revealed answer is collapsed, its answer in a closed
box.
"""

from __future__ import annotations

import re
import time

import pytest

from helpers.lab import CHROMIUM, SHOWN, SMALL_TEXT, inside, open_lab, sync_api, write

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)"),
]

CELLS = [
    "from teachspec.widgets import Predict, explore_pass_cost, explore_speedup",
    'guess = Predict("What is the best k at alpha = 0.8, c = 0.05?", ["1", "4", "8", "16"], answer="8",\n'
    '                explain="Each extra guess adds alpha^k tokens and costs c: at k = 8 the two balance.")\n'
    "guess",
    'number = Predict("How many tokens per target pass at k = 4?", number=True)\nnumber',
    'given_up = Predict("Which order serves the most tokens from the cache?", ["fcfs", "lpm"], answer="lpm",\n'
    '                   explain="lpm runs a group back to back.")\ngiven_up',
    "number.reveal(3.36)",
    "explorer = explore_speedup(alpha=0.8, c=0.05, k=4)\nexplorer",
    "explore_pass_cost({1: 2.0, 2: 2.1, 4: 2.2, 8: 2.4, 16: 3.9, 32: 7.0})",
]

BOX = "(e) => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; }"


def fits(page, form) -> None:
    """The form, scrolled to the top of the notebook's visible area, lies inside it, and no text is under 14 px."""
    form.evaluate("(e) => e.scrollIntoView({ block: 'start' })")
    page.wait_for_timeout(300)
    area = page.locator(f"{SHOWN} .jp-WindowedPanel-outer").evaluate(BOX)
    box = form.evaluate(BOX)
    assert box[3] - box[1] <= area[3] - area[1], f"{box[3] - box[1]:.0f} px tall, the notebook shows {area}"
    assert inside(box, area), f"the form {box} is not inside the notebook's visible area {area}"
    assert not page.evaluate(SMALL_TEXT, [form.element_handle()])


def drag(page, slider, share: float) -> None:
    """Drag `slider`'s handle with the mouse to `share` of its track, as a student would."""
    track = slider.locator(".noUi-target").bounding_box()
    handle = slider.locator(".noUi-handle").bounding_box()
    page.mouse.move(handle["x"] + handle["width"] / 2, handle["y"] + handle["height"] / 2)
    page.mouse.down()
    page.mouse.move(track["x"] + share * track["width"], track["y"] + track["height"] / 2, steps=8)
    page.mouse.up()


def test_predict_commits_and_the_sliders_move_the_numbers(lab, tmp_path, shots):
    url, token = lab
    write(tmp_path / "lab" / "predict.ipynb", CELLS)
    with sync_api().sync_playwright() as p:
        browser, page, errors = open_lab(p, url, token, "predict.ipynb")
        predict = page.locator(f"{SHOWN} .teachspec-predict").nth(0)
        explorer = page.locator(f"{SHOWN} .teachspec-explore").nth(0)
        page.locator(f"{SHOWN} .teachspec-explore").nth(1).locator(".js-plotly-plot .main-svg").first.wait_for(
            timeout=120_000)
        start = time.monotonic()

        # Predict: nothing committed says so; a choice and Commit lock it and give the verdict
        fits(page, predict)
        commit = predict.get_by_role("button", name="Commit")
        commit.click()
        predict.get_by_text("Choose an answer first").wait_for()
        predict.locator("label", has_text=re.compile(r"^\s*8\s*$")).click()
        commit.click()
        predict.get_by_text("Right: you predicted 8").wait_for(timeout=10_000)
        assert "at k = 8 the two balance" in predict.inner_text()
        assert commit.is_disabled() and predict.locator("input[type=radio]").first.is_disabled()
        fits(page, predict)
        page.screenshot(path=str(shots / "predict_committed.png"))

        # a number: typed and committed after the cell that measures it already ran (all cells were run on
        # opening), so it is judged against what that cell revealed
        number = page.locator(f"{SHOWN} .teachspec-predict").nth(1)
        fits(page, number)
        number.locator("input").fill("2.5")
        number.locator("input").press("Enter")
        number.get_by_role("button", name="Commit").click()
        number.get_by_text("Not this time: you predicted 2.5; it is 3.36.").wait_for(timeout=10_000)

        # "Show me": the answer now, and nothing left to commit
        given_up = page.locator(f"{SHOWN} .teachspec-predict").nth(2)
        fits(page, given_up)
        given_up.get_by_role("button", name="Show me").click()
        given_up.get_by_text("The answer: lpm. lpm runs a group back to back.").wait_for(timeout=10_000)
        assert given_up.get_by_role("button", name="Commit").is_disabled()

        # the reveal ran before anything was committed: its verdict is folded, and opens on a click
        folded = page.locator(f"{SHOWN} details.teachspec-answer").first
        assert folded.get_attribute("open") is None and not folded.locator("p").is_visible()
        folded.locator("summary").click()
        folded.get_by_text("The answer: 3.36.").wait_for(timeout=10_000)

        # the sliders: the readout and the chart follow a drag of alpha's handle
        explorer.evaluate("(e) => e.scrollIntoView({ block: 'start' })")  # a chart out of view may not be drawn yet
        page.wait_for_function("(t) => t.textContent.includes('alpha = 0.80')",
                               arg=explorer.locator(".js-plotly-plot .gtitle").element_handle(), timeout=30_000)
        fits(page, explorer)
        readout = explorer.locator(".widget-html-content").filter(has_text="Theorem 3.8")
        assert "2.80x" in readout.inner_text() and "Best k for this alpha and c: 8" in readout.inner_text()
        sliders = explorer.locator(".widget-slider")
        assert sliders.count() == 3
        drag(page, sliders.nth(0), 0.4)
        page.wait_for_function("(e) => !e.innerText.includes('2.80x')", arg=readout.element_handle(),
                               timeout=10_000)
        alpha = float(sliders.nth(0).locator(".widget-readout").inner_text())
        assert 0.3 < alpha < 0.5, alpha
        title = explorer.locator(".js-plotly-plot .gtitle")
        page.wait_for_function("([t, a]) => t.textContent.includes(`alpha = ${a}`)",
                               arg=[title.element_handle(), f"{alpha:.2f}"], timeout=10_000)

        # k with the keyboard: two steps right, and the readout says so
        sliders.nth(2).locator(".noUi-handle").focus()
        page.keyboard.press("ArrowRight")
        page.keyboard.press("ArrowRight")
        readout.get_by_text("tokens per target pass at k = 6").wait_for(timeout=10_000)

        # drag c above alpha: no k wins, said in words and on the chart
        drag(page, sliders.nth(1), 0.9)
        readout.get_by_text("no k beats plain decoding").wait_for(timeout=10_000)
        assert "Best k for this alpha and c: 0" in readout.inner_text()
        explorer.locator(".js-plotly-plot .annotation-text", has_text="no k > 0 beats plain decoding").wait_for(
            timeout=10_000)
        fits(page, explorer)
        page.screenshot(path=str(shots / "explore_speedup.png"))

        # the pass cost: n from 8 to 16 with the keyboard
        costs = page.locator(f"{SHOWN} .teachspec-explore").nth(1)
        fits(page, costs)
        words = costs.locator(".widget-html-content").filter(has_text="One pass over")
        assert "1.20x" in words.inner_text()
        costs.locator(".noUi-handle").focus()
        page.keyboard.press("ArrowRight")
        words.get_by_text("1.95x").wait_for(timeout=10_000)
        assert "16 passes over one position" in words.inner_text()
        costs.locator(".js-plotly-plot .legendtext", has_text="n = 16").wait_for(timeout=10_000)
        fits(page, costs)
        page.screenshot(path=str(shots / "explore_pass_cost.png"))
        assert time.monotonic() - start < 60
        browser.close()
    assert not errors, errors


def test_a_committed_lecture_shows_its_evidence_and_hides_its_answers_before_it_runs(lab, tmp_path, shots):
    """The lecture as committed (teachspec/course/pin.py), opened in JupyterLab and not run."""
    import json
    import shutil

    from helpers.lab import ROOT

    lectures = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

    def open_pictures(path) -> int:
        """The pictures of cells whose output is not collapsed."""
        return sum("image/png" in out.get("data", {}) for c in json.loads(path.read_text())["cells"]
                   if not c["metadata"].get("jupyter", {}).get("outputs_hidden") for out in c.get("outputs", []))

    # a lecture with a revealed answer (a collapsed cell) and a picture in a cell that is not collapsed
    lecture = next(p for p in lectures if '"outputs_hidden": true' in p.read_text() and open_pictures(p))
    shutil.copy(lecture, tmp_path / "lab" / "lecture.ipynb")
    url, token = lab
    with sync_api().sync_playwright() as p:
        from helpers.lab import FLAGS, VIEWPORT

        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        page = browser.new_page(viewport=VIEWPORT)
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{url}/lab/tree/lecture.ipynb?reset&token={token}")
        page.locator(f"{SHOWN} .jp-Cell").first.wait_for(timeout=120_000)
        assert page.locator("#jp-left-stack").bounding_box()["width"] > 200, "the file browser is not open"
        page.locator(f"{SHOWN} .teachspec-predict").first.wait_for(timeout=30_000)  # a question, as text
        # the charts and stills, as PNGs: JupyterLab draws no SVG in a notebook it does not trust, as this one
        page.locator(f"{SHOWN} .jp-RenderedImage img").first.wait_for(timeout=30_000)
        collapsed = page.locator(f"{SHOWN} .jp-Cell .jp-OutputPlaceholder")
        collapsed.first.wait_for(state="attached", timeout=30_000)
        for box in page.locator(f"{SHOWN} details.teachspec-answer").all():
            assert box.get_attribute("open") is None and not box.locator("p").is_visible()
        page.screenshot(path=str(shots / "lecture_before_its_run.png"))
        browser.close()
    assert not errors, errors
