"""The views in a real JupyterLab, in headless Chromium: live rendering, the verdict colours, play with no kernel.

The test starts its own JupyterLab on 127.0.0.1 (a free port, a random token, its own settings and runtime
folders) in a temporary folder holding `live_views.ipynb`, opens it with Playwright driving the system's
Chromium, runs every cell and watches the DOM. Screenshots go to $TEACHSPEC_SCREENSHOTS, or to pytest's
temporary folder. It is skipped, with the reason, when Chromium or Playwright is missing.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
HERE = Path(__file__).parent
ROOT = HERE.parents[1]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)"),
]


def write_notebook(path: Path, source: str) -> None:
    """A one-cell notebook with a Python 3 kernel at `path`."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, path)


def run_all_cells(page, address: str) -> None:
    """Open a notebook in JupyterLab at `address` and run all its cells once its kernel is up."""
    page.goto(address)
    page.wait_for_function("window.jupyterapp?.shell?.currentWidget?.sessionContext", timeout=120_000)
    page.evaluate("""async () => {
        const nb = window.jupyterapp.shell.currentWidget;
        await nb.context.ready;
        await nb.sessionContext.ready;
        window.jupyterapp.commands.execute('notebook:run-all-cells');
    }""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kernel_env() -> dict[str, str]:
    """The environment for servers and kernels: teachspec imported from this checkout, whatever is installed."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}


def wait_until_up(url: str, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.5)


def stop(server: subprocess.Popen) -> None:
    os.killpg(server.pid, signal.SIGTERM)  # the server and the kernels it started, nothing else
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server of our own: (base url, token); stopped with all its kernels afterwards."""
    pytest.importorskip("jupyterlab", reason="JupyterLab is not installed (pip install jupyterlab)")
    root = tmp_path / "lab"
    root.mkdir()
    shutil.copy(HERE / "live_views.ipynb", root)
    settings = tmp_path / "settings"
    for plugin, values in {"@jupyterlab/apputils-extension/notification": {"fetchNews": "false",
                                                                         "checkForUpdates": False}}.items():
        path = settings / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    port, token = free_port(), secrets.token_hex(16)
    env = {**kernel_env(), "JUPYTERLAB_SETTINGS_DIR": str(settings), "JUPYTER_RUNTIME_DIR": str(tmp_path / "run")}
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
         f"--IdentityProvider.token={token}", "--LabApp.expose_app_in_browser=True",
         f"--ServerApp.root_dir={root}", "--allow-root"],
        env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "server.log", "w"), start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(f"{url}/api/status?token={token}", server, tmp_path / "server.log")
        yield url, token
    finally:
        stop(server)


@pytest.fixture
def shots(tmp_path) -> Path:
    folder = Path(os.environ.get("TEACHSPEC_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


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
