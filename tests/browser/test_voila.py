"""The replay in Voila: a notebook turned into a page, its views drawn by anywidget's front end, the network refused.

The test starts Voila on 127.0.0.1 (a free port) serving a two-cell notebook that replays a saved trace, so no
model is needed, and opens it in headless Chromium with every request that does not go to that server refused.
anywidget's front end and our modules come from Voila itself; only Voila's page template asks a CDN for an icon
font, which a room without network does without.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import nbformat
import pytest

from helpers.lab import CHROMIUM, ROOT, free_port, kernel_env, offline_page, steps_through, stop, wait_until_up

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)"),
]

CELLS = [
    "from teachspec.events import EventLog\nfrom teachspec.widgets import RadixTreeView, SpeculationView",
    'SpeculationView(EventLog.load("speculation.jsonl"))',
    'RadixTreeView(EventLog.load("radix_shared.jsonl"), budget=4096)',
]


@pytest.fixture
def voila(tmp_path):
    """A Voila server of our own rendering replay.ipynb: its base url; stopped with its kernels afterwards."""
    pytest.importorskip("voila", reason="Voila is not installed (pip install voila)")
    root = tmp_path / "voila"
    root.mkdir()
    for trace in ("speculation.jsonl", "radix_shared.jsonl"):
        shutil.copy(ROOT / "notebooks" / "traces" / trace, root)
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, root / "replay.ipynb")
    port = free_port()
    log = tmp_path / "voila.log"
    server = subprocess.Popen(
        [sys.executable, "-m", "voila", "replay.ipynb", "--no-browser", f"--port={port}", "--Voila.ip=127.0.0.1"],
        cwd=root, env={**kernel_env(), "JUPYTER_RUNTIME_DIR": str(tmp_path / "run")},
        stdout=subprocess.DEVNULL, stderr=open(log, "w"), start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url, server, log)
        yield url
    finally:
        stop(server)


def test_a_replay_renders_and_steps_in_voila_with_no_network(voila, shots):
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")
    with sync_api.sync_playwright() as p:
        browser, page, blocked, errors = offline_page(p, allow=voila)
        page.goto(voila)
        spec, tree = page.locator(".ts-spec"), page.locator(".ts-radix")
        spec.locator(".ts-text .tok").first.wait_for(timeout=120_000)
        tree.locator("g.ts-node").first.wait_for(timeout=30_000)
        steps_through(page, spec)
        steps_through(page, tree)
        page.screenshot(path=str(shots / "voila.png"), full_page=True)
        browser.close()
    # Voila's own page asks a CDN for its icon font, which this refuses; no script came from anywhere but Voila
    assert not errors and not [b for b in blocked if not b.startswith("stylesheet ")], (errors, blocked)
