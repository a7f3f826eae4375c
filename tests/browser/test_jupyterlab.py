"""The views in a real JupyterLab, in headless Chromium: live rendering, the verdict colours, play with no kernel.

The test starts its own JupyterLab on 127.0.0.1 (a free port, a random token, its own settings and runtime
folders) in a temporary folder holding `live_views.ipynb`, opens it with Playwright driving the system's
Chromium, runs every cell and watches the DOM. Screenshots go to $TEACHSPEC_SCREENSHOTS, or to pytest's
temporary folder (the `lab` and `shots` fixtures: tests/browser/conftest.py). It is skipped, with the reason, when
Chromium or Playwright is missing.
"""

from __future__ import annotations

import time

import pytest

from helpers.lab import CHROMIUM, FLAGS, run_all_cells

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)"),
]


def test_views_render_live_replay_and_play_without_a_kernel(lab, shots):
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")
    url, token = lab
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        run_all_cells(page, f"{url}/lab/tree/live_views.ipynb?token={token}")

        # live: sample the views while the generation cell runs; they must grow in several steps
        spec, tree = page.locator(".ts-spec").first, page.locator(".ts-radix").first
        spec.wait_for(timeout=180_000)
        seen_tokens, seen_nodes, seen_frames = set(), set(), set()
        deadline = time.monotonic() + 240
        while page.locator(".ts-spec").count() < 2 and time.monotonic() < deadline:  # the replay is cell 3
            seen_tokens.add(spec.locator(".ts-text .tok").count())
            seen_nodes.add(tree.locator("g.ts-node").count())
            counter = spec.locator(".ts-counter").inner_text()  # "shown / frames"; empty before the first draw
            if "/" in counter:
                seen_frames.add(counter.split("/")[1])  # the frames it has
            page.wait_for_timeout(150)
        assert page.locator(".ts-spec").count() == 2, "the replay view never appeared"
        assert len(seen_tokens) >= 3, f"the live text did not grow step by step: {sorted(seen_tokens)}"
        assert len(seen_nodes) >= 3, f"the live tree did not change step by step: {sorted(seen_nodes)}"
        # the frames arrive in small deltas (about one a request, of twelve), not only in the snapshots that double:
        # several updates each add less than half of what the view already had
        frames = sorted(int(f) for f in seen_frames)
        small = sum(b < 1.5 * a for a, b in zip(frames, frames[1:]))
        assert small >= 5, f"the live view received few small updates: {frames}"
        page.wait_for_selector(".jp-RenderedSVG svg, .jp-RenderedImage svg, .jp-OutputArea-output svg text",
                               timeout=120_000)
        page.wait_for_timeout(1500)  # let the live views play through their last frames

        # the verdicts, each in its own class, and the tree
        for kind in ("accepted", "rejected", "resampled"):
            assert spec.locator(f".tok.{kind}").count() > 0, f"no token marked {kind}"
        assert spec.locator(".ts-legend .tok").count() == 6
        assert tree.locator("g.ts-node").count() >= 3 and tree.locator("g.ts-node.root").count() == 1
        assert "tokens of 96" in tree.locator(".ts-memory-words").inner_text()
        spec.locator(".ts-text .tok.rejected").first.click()
        assert "rejected" in spec.locator(".ts-decision").inner_text()
        assert spec.locator(".ts-alternatives tr").count() > 2  # p and q bars over the top alternatives
        spec.screenshot(path=str(shots / "speculation_live.png"))
        tree.screenshot(path=str(shots / "radix_live.png"))
        page.locator(".jp-Cell").last.scroll_into_view_if_needed()  # JupyterLab renders cells as they come into view
        page.wait_for_selector(".js-plotly-plot", timeout=60_000)

        # replay: play advances the frame, and keeps doing so once the kernel is gone
        replay = page.locator(".ts-spec").nth(1)
        replay.scroll_into_view_if_needed()
        counter = replay.locator(".ts-counter")
        slider = replay.locator(".ts-slider")
        final = counter.inner_text()
        replay.locator(".ts-play").click()
        page.wait_for_timeout(1200)
        playing = counter.inner_text()
        assert playing != final and int(playing.split("/")[0]) >= 2, (final, playing)
        replay.locator(".ts-play").click()  # pause
        paused = counter.inner_text()
        page.wait_for_timeout(600)
        assert counter.inner_text() == paused
        replay.screenshot(path=str(shots / "speculation_replay.png"))

        page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")
        page.wait_for_function("!window.jupyterapp.shell.currentWidget.sessionContext.session", timeout=60_000)
        before = slider.input_value()
        replay.locator(".ts-forward").click()
        replay.locator(".ts-forward").click()
        assert int(slider.input_value()) == int(before) + 2
        replay.locator(".ts-back").click()
        assert int(slider.input_value()) == int(before) + 1
        replay.locator(".ts-play").click()
        page.wait_for_timeout(1200)
        assert int(slider.input_value()) > int(before) + 1, "play did not advance with the kernel shut down"
        page.screenshot(path=str(shots / "notebook.png"), full_page=True)
        browser.close()
    assert not errors, errors
