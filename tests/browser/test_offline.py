"""A replay with no kernel, no server and no network: the exported page, and a notebook exported by nbconvert.

Headless Chromium opens the files from file:// with every other request refused, so anything that reached for a
CDN would show up here as a blocked request or a view that never draws. Screenshots go where the other browser
tests' go (the `shots` fixture, tests/browser/conftest.py).
"""

from __future__ import annotations

import subprocess
import sys

import nbformat
import pytest
from transformers import AutoTokenizer

from helpers.lab import CHROMIUM, ROOT, kernel_env, offline_page, steps_through
from teachspec.events import EventLog
from teachspec.models import BUNDLED
from teachspec.widgets import RadixTreeView, SpeculationView, export_html

TRACES = ROOT / "notebooks" / "traces"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)"),
]


def test_an_exported_replay_plays_from_a_file_with_the_network_refused(tmp_path, shots):
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")
    decode = AutoTokenizer.from_pretrained(BUNDLED["tiny"]).decode
    spec = SpeculationView(EventLog.load(TRACES / "speculation.jsonl"), decode=decode)
    tree = RadixTreeView(EventLog.load(TRACES / "radix_shared.jsonl"), decode=decode, budget=4096)
    path = export_html([spec, tree], tmp_path / "replay.html", title="Replay </script> <b>offline</b>")
    with sync_api.sync_playwright() as p:
        browser, page, blocked, errors = offline_page(p)
        page.goto(path.as_uri())
        assert page.title() == "Replay </script> <b>offline</b>"
        view = page.locator(".ts-spec")
        view.locator(".ts-text .tok").first.wait_for(timeout=10_000)
        steps_through(page, view)
        view.locator(".ts-text .tok.accepted").first.click()
        assert "accepted" in view.locator(".ts-decision").inner_text()
        tree_view = page.locator(".ts-radix")
        assert tree_view.locator("g.ts-node").count() >= 3
        steps_through(page, tree_view)
        page.screenshot(path=str(shots / "export_offline.png"), full_page=True)
        browser.close()
    assert not blocked and not errors, (blocked, errors)


def test_an_empty_replay_exports_a_page_that_says_so(tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")
    path = export_html(EventLog(), tmp_path / "empty.html")
    with sync_api.sync_playwright() as p:
        browser, page, blocked, errors = offline_page(p)
        page.goto(path.as_uri())
        assert "No speculation in this log" in page.locator(".ts-spec .ts-empty").inner_text()
        assert "No radix cache events" in page.locator(".ts-radix .ts-empty").inner_text()
        browser.close()
    assert not blocked and not errors, (blocked, errors)


def test_a_notebook_exported_by_nbconvert_replays_offline(tmp_path, shots):
    """nbconvert shows a view's text/html when the notebook holds no widget state, as JupyterLab saves it."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from teachspec.events import EventLog\n"
        "from teachspec.widgets import SpeculationView\n"
        f"SpeculationView(EventLog.load({str(TRACES / 'speculation.jsonl')!r}))")])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, tmp_path / "lecture.ipynb")
    subprocess.run([sys.executable, "-m", "nbconvert", "--to", "html", "--execute",
                    "--ExecutePreprocessor.store_widget_state=False", "lecture.ipynb"],
                   cwd=tmp_path, env=kernel_env(), check=True, capture_output=True, timeout=300)
    with sync_api.sync_playwright() as p:
        browser, page, blocked, errors = offline_page(p)
        page.goto((tmp_path / "lecture.html").as_uri())
        view = page.locator(".ts-spec")
        view.locator(".ts-text .tok").first.wait_for(timeout=10_000)
        steps_through(page, view)
        page.screenshot(path=str(shots / "nbconvert_offline.png"), full_page=True)
        browser.close()
    # the export's own page furniture (require.js, MathJax) may ask the network and be refused; the view does not
    assert not errors, errors
