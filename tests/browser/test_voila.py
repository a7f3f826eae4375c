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

from test_jupyterlab import CHROMIUM, FLAGS, ROOT, free_port, kernel_env, shots, stop, wait_until_up  # noqa: F401

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
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        blocked: list[str] = []
        errors: list[str] = []

        def local_only(route):
            if route.request.url.startswith(voila):
                route.continue_()
            else:
                blocked.append(f"{route.request.resource_type} {route.request.url}")
                route.abort()

        page.route("**/*", local_only)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(voila)
        spec, tree = page.locator(".ts-spec"), page.locator(".ts-radix")
        spec.locator(".ts-text .tok").first.wait_for(timeout=120_000)
        tree.locator("g.ts-node").first.wait_for(timeout=30_000)

        counter, caption = spec.locator(".ts-counter"), spec.locator(".ts-caption")
        total = int(counter.inner_text().split("/")[1])
        assert total > 5 and counter.inner_text() == f"{total} / {total}"
        spec.locator(".ts-slider").fill("0")
        first = caption.inner_text()
        spec.locator(".ts-forward").click()
        assert counter.inner_text() == f"2 / {total}" and caption.inner_text() != first
        spec.locator(".ts-play").click()
        page.wait_for_timeout(1200)
        assert int(counter.inner_text().split("/")[0]) > 2, "play did not advance the frame"
        spec.locator(".ts-play").click()
        tree_counter = tree.locator(".ts-counter")
        tree.locator(".ts-back").click()
        tree_total = int(tree_counter.inner_text().split("/")[1])
        assert tree_counter.inner_text() == f"{tree_total - 1} / {tree_total}"
        page.screenshot(path=str(shots / "voila.png"), full_page=True)
        browser.close()
    # Voila's own page asks a CDN for its icon font, which this refuses; no script came from anywhere but Voila
    assert not errors and not [b for b in blocked if not b.startswith("stylesheet ")], (errors, blocked)
