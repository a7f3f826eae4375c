"""What the browser suite (tests/browser/) shares, apart from its fixtures (`lab`, `shots`: tests/browser/conftest.py):
the system's Chromium and the flags it runs headless with, servers on a free port started and stopped with their
kernels, notebooks written and run in JupyterLab, pages that reach nothing but what they are allowed, the player's
controls stepped through, and measures taken in the page (texts under 14 px, a box inside another) at a
projector's 1280 x 720."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
ROOT = Path(__file__).parents[2]  # the repository
VIEWPORT = {"width": 1280, "height": 720}  # a projector's
SHOWN = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook on screen (a restored workspace may open others)


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


# -- pages: offline, and JupyterLab at a projector's size ---------------------------------------------------------

def offline_page(p, allow: str = "file://"):
    """A Chromium page that reaches only URLs starting with `allow`; returns (browser, page, blocked, errors).

    `blocked` lists each refused request as "<resource type> <url>"; `errors` the page's uncaught exceptions.
    """
    browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    blocked: list[str] = []
    errors: list[str] = []

    def only_allowed(route):
        if route.request.url.startswith(allow):
            route.continue_()
        else:
            blocked.append(f"{route.request.resource_type} {route.request.url}")
            route.abort()

    page.route("**/*", only_allowed)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return browser, page, blocked, errors


def steps_through(page, view) -> None:
    """The player works: step forward and back, the slider, play and pause, each changing what is drawn."""
    counter, slider = view.locator(".ts-counter"), view.locator(".ts-slider")
    caption = view.locator(".ts-caption")
    total = int(counter.inner_text().split("/")[1])
    assert total > 5 and counter.inner_text() == f"{total} / {total}"  # opens on the newest frame
    slider.fill("0")
    first = caption.inner_text()
    assert counter.inner_text() == f"1 / {total}"
    view.locator(".ts-forward").click()
    view.locator(".ts-forward").click()
    assert counter.inner_text() == f"3 / {total}" and caption.inner_text() != first
    view.locator(".ts-back").click()
    assert counter.inner_text() == f"2 / {total}"
    view.locator(".ts-speed").select_option("8")
    view.locator(".ts-play").click()
    page.wait_for_timeout(800)
    view.locator(".ts-play").click()  # pause
    paused = int(counter.inner_text().split("/")[0])
    assert paused > 4, f"play did not advance: {counter.inner_text()}"
    page.wait_for_timeout(400)
    assert int(counter.inner_text().split("/")[0]) == paused


def sync_api():
    return pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")


def open_lab(p, url: str, token: str, name: str):
    """A 1280 x 720 page of JupyterLab with `name` run in it, the file browser open; returns (browser, page,
    errors)."""
    browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
    page = browser.new_page(viewport=VIEWPORT)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    run_all_cells(page, f"{url}/lab/tree/{name}?reset&token={token}")  # reset: no restored workspace
    page.locator("#jp-left-stack").wait_for()
    assert page.locator("#jp-left-stack").bounding_box()["width"] > 200, "the file browser is not open"
    return browser, page, errors


def write(path, cells: list[str]) -> None:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, path)


# -- measures, in the page ---------------------------------------------------------------------------------------

# Every text drawn in `roots` under 14 px, as [tag, text, px]: HTML at its font size, SVG at its font size times
# the drawing's scale. Tooltips (<title>) and a select's closed options are not drawn; the select itself is.
SMALL_TEXT = """(roots) => {
  const small = [];
  const check = (el, text) => {
    const r = el.getBoundingClientRect();
    if (!r.width || !r.height) return;  // not drawn: display none, an empty state
    const m = el instanceof SVGElement ? el.getScreenCTM() : null;
    const scale = m ? Math.hypot(m.a, m.b) : 1;  // a turned axis title too
    const px = parseFloat(getComputedStyle(el).fontSize) * scale;
    if (px < 14 - 0.05) small.push([el.tagName, text.trim().slice(0, 40), Math.round(px * 100) / 100]);
  };
  for (const root of roots) {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let t = walker.nextNode(); t; t = walker.nextNode()) {
      if (t.textContent.trim() && !t.parentElement.closest('title, option, style, script')) {
        check(t.parentElement, t.textContent);
      }
    }
    for (const select of root.querySelectorAll('select')) check(select, select.value);
  }
  return small;
}"""


def inside(a, b, slack: float = 1.0) -> bool:
    """Box a (left, top, right, bottom) lies inside box b."""
    return a[0] >= b[0] - slack and a[1] >= b[1] - slack and a[2] <= b[2] + slack and a[3] <= b[3] + slack
