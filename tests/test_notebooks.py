"""The course notebooks: committed clean and small, each runs top to bottom under nbval, and the model-picking
cell falls back to the bundled pair when a hub pair cannot be loaded.

Running them needs a loadable pair. By default that is the bundled pair; TEACHSPEC_NOTEBOOK_PAIR=config runs them
on a small config-built stand-in instead (seconds, no weights), see teachspec/course/pairs.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from test_lecture_claims import failed, recorded

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
LECTURES = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))  # 01_ ... 11_: the name sorts in lecture order
SOLUTIONS = sorted((NOTEBOOKS / "assignments").glob("a*.ipynb"))
ALL = [NOTEBOOKS / "index.ipynb", *LECTURES, *SOLUTIONS]
SANITIZE = NOTEBOOKS / "nbval.cfg"
PIN = "# NBVAL_CHECK_OUTPUT"


def _id(path: Path) -> str:
    return str(path.relative_to(NOTEBOOKS))


def _pair_loadable() -> bool:
    if os.environ.get("TEACHSPEC_NOTEBOOK_PAIR"):
        return True
    from teachspec.models import BUNDLED
    return (BUNDLED["tiny"] / "draft").is_dir() and (BUNDLED["tiny"] / "target").is_dir()


# -- what is committed ---------------------------------------------------------------------------------------------

def test_the_course_is_all_there():
    assert len(LECTURES) == 11, [p.name for p in LECTURES]
    assert len(SOLUTIONS) >= 3, [p.name for p in SOLUTIONS]
    index = nbformat.read(NOTEBOOKS / "index.ipynb", as_version=4)
    text = "\n".join(c.source for c in index.cells)
    for path in [*LECTURES, *SOLUTIONS]:
        assert _id(path) in text, f"index.ipynb does not link {_id(path)}"


MAX_BYTES = 500_000         # a notebook's file: text, code, its few pinned outputs and its snapshots
MAX_OUTPUT_CHARS = 4_000    # one pinned output: a few lines that nbval compares
MAX_PICTURE_BYTES = 150_000  # one snapshot's picture: an SVG of a chart or a view, or a small PNG
TEXT_TYPES = {"text/plain", "text/markdown"}
IMAGE_TYPES = {"image/svg+xml", "image/png"}
SNAPSHOT = "# SNAPSHOT"


def _pinned(cell) -> bool:
    return cell.cell_type == "code" and cell.source.startswith(PIN)


def _snapshot(cell) -> bool:
    return cell.cell_type == "code" and cell.source.startswith(SNAPSHOT)


def _pictures(nb) -> list[tuple[int, str, int]]:
    """(cell, mime type, bytes) of every image output in the notebook."""
    return [(i, kind, len(out.data[kind])) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
            for out in cell.outputs for kind in IMAGE_TYPES & set(out.get("data", {}))]


def _unclean(nb, size: int) -> list[str]:
    """What makes a committed notebook not clean and small: saved widget state, outputs on cells that are neither
    pinned (nbval checks them) nor snapshots (their pictures), pinned cells with nothing to compare, pinned outputs
    that are not a few lines of text, snapshot outputs that are not one small picture each."""
    problems = []
    if size >= MAX_BYTES:
        problems.append(f"{size} bytes (at most {MAX_BYTES}): clear the outputs of cells that are not pinned")
    if "widgets" in nb.metadata:
        problems.append("saved widget state in the notebook's metadata")
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if _snapshot(cell):
            if not cell.outputs:
                problems.append(f"cell {i} is a snapshot ({SNAPSHOT}) but has no picture")
            if cell.execution_count is None:  # nbval fails such a cell: "Unrun reference cell has outputs"
                problems.append(f"cell {i} is a snapshot with no execution count")
            for out in cell.outputs:
                kinds = set(out.get("data", {}))
                if out.output_type != "display_data" or not kinds or not kinds <= IMAGE_TYPES:
                    problems.append(f"cell {i} is a snapshot with a {out.output_type} output {sorted(kinds)}: "
                                    f"keep its pictures only")
                for kind in kinds & IMAGE_TYPES:
                    if len(out.data[kind]) > MAX_PICTURE_BYTES:
                        problems.append(f"cell {i} has a {len(out.data[kind])}-byte picture "
                                        f"(at most {MAX_PICTURE_BYTES})")
            continue
        if not _pinned(cell):
            if cell.outputs or cell.execution_count is not None:
                problems.append(f"cell {i} is not pinned ({PIN}) but has outputs or an execution count")
            continue
        if not cell.outputs or cell.execution_count is None:
            problems.append(f"cell {i} is pinned but has no output or execution count, so nbval compares nothing")
        for out in cell.outputs:
            if out.output_type == "stream":
                text = out.text
            elif out.output_type in ("execute_result", "display_data") and set(out.data) <= TEXT_TYPES:
                text = "".join(out.data.values())
            else:
                problems.append(f"cell {i} has a {out.output_type} output {sorted(out.get('data', {}))}: pin text")
                continue
            if len(text) > MAX_OUTPUT_CHARS:
                problems.append(f"cell {i} has a {len(text)}-character output (at most {MAX_OUTPUT_CHARS})")
    return problems


@pytest.mark.parametrize("path", ALL, ids=_id)
def test_committed_clean_and_small(path):
    """Committed with outputs only on the cells nbval checks and pictures only on snapshot cells, produced by a run
    with the bundled pair (`python -m teachspec.course.pin`), and no widget state."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert not _unclean(nb, path.stat().st_size), f"{_id(path)}: {_unclean(nb, path.stat().st_size)}"


def test_an_unclean_notebook_is_refused():
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    def pinned_cell(text, count=1):
        return new_code_cell(f"{PIN}\nprint(1)", execution_count=count,
                             outputs=[new_output("stream", name="stdout", text=text)])

    clean = new_notebook(cells=[pinned_cell("1\n"), new_code_cell("x = 1")])
    assert _unclean(clean, 1_000) == []
    state = new_notebook(cells=[pinned_cell("1\n")], metadata={"widgets": {"state": {"x" * 10: {}}}})
    widget = new_code_cell(f"{PIN}\nview", execution_count=1, outputs=[new_output(
        "display_data", data={"application/vnd.jupyter.widget-view+json": {"model_id": "ab"}, "text/plain": "V"})])
    stray = new_code_cell("print(2)", execution_count=2, outputs=[new_output("stream", name="stdout", text="2\n")])
    for nb, size, expect in ((clean, 3_000_000, "bytes"), (state, 1_000, "widget state"),
                             (new_notebook(cells=[widget]), 1_000, "display_data"),
                             (new_notebook(cells=[pinned_cell("x" * 10_000)]), 20_000, "character output"),
                             (new_notebook(cells=[stray]), 1_000, "not pinned"),
                             (new_notebook(cells=[pinned_cell("1\n", count=None)]), 1_000, "compares nothing")):
        problems = _unclean(nb, size)
        assert any(expect in p for p in problems), (expect, problems)


def test_a_snapshot_keeps_one_small_picture_and_nothing_else():
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    def snap(data, kind="display_data", count=2):
        extra = {"execution_count": 3} if kind == "execute_result" else {}
        return new_code_cell(f"{SNAPSHOT}\nfig", execution_count=count, outputs=[new_output(kind, data=data, **extra)])

    svg = {"image/svg+xml": "<svg xmlns='http://www.w3.org/2000/svg'/>"}
    assert _unclean(new_notebook(cells=[snap(svg)]), 1_000) == []
    for cell, expect in ((snap({**svg, "application/vnd.plotly.v1+json": {"data": []}}), "keep its pictures only"),
                         (snap({"text/plain": "<Figure>"}), "keep its pictures only"),
                         (snap(svg, count=None), "no execution count"),
                         (snap(svg, "execute_result", count=3), "keep its pictures only"),
                         (new_code_cell(f"{SNAPSHOT}\nfig"), "has no picture"),
                         (snap({"image/svg+xml": "<svg>" + "x" * MAX_PICTURE_BYTES + "</svg>"}), "-byte picture")):
        problems = _unclean(new_notebook(cells=[cell]), 1_000)
        assert any(expect in p for p in problems), (expect, problems)


@pytest.mark.parametrize("path", LECTURES, ids=_id)
def test_every_lecture_shows_a_picture_without_running(path):
    """A code-hosting site or nbviewer, which run nothing, show at least one committed picture of each lecture
    (a `# SNAPSHOT` cell's SVG or PNG), and the notebook stays small."""
    import base64
    import xml.etree.ElementTree as ET

    nb = nbformat.read(path, as_version=4)
    pictures = _pictures(nb)
    assert pictures, f"{_id(path)} has no image or SVG output: mark a chart or a view's still {SNAPSHOT} and pin it"
    assert path.stat().st_size < MAX_BYTES, f"{_id(path)} is {path.stat().st_size} bytes (at most {MAX_BYTES})"
    for i, kind, _ in pictures:
        for out in nb.cells[i].outputs:
            if kind == "image/svg+xml" and kind in out.get("data", {}):
                ET.fromstring(out.data[kind])  # a well-formed SVG document, or this raises
            elif kind == "image/png" and kind in out.get("data", {}):
                assert base64.b64decode(out.data[kind])[:8] == b"\x89PNG\r\n\x1a\n", f"{_id(path)} cell {i}"


def test_pin_keeps_the_pinned_outputs_and_nothing_else():
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    from teachspec.course.pin import strip

    kept = new_output("stream", name="stdout", text="42\n")
    nb = new_notebook(metadata={"widgets": {"application/vnd.jupyter.widget-state+json": {"state": {}}}}, cells=[
        new_code_cell(f"{PIN}\nprint(6 * 7)", execution_count=1, outputs=[kept]),
        new_code_cell("view", execution_count=2, outputs=[new_output(
            "display_data", data={"application/vnd.jupyter.widget-view+json": {"model_id": "ab"}})])])
    nb.cells.append(new_code_cell(f"{SNAPSHOT}\nfig", execution_count=3, outputs=[
        new_output("stream", name="stdout", text="timings that change every run\n"),
        new_output("execute_result", execution_count=3, metadata={"image/svg+xml": {"isolated": True}}, data={
            "application/vnd.plotly.v1+json": {"data": [], "layout": {}}, "image/svg+xml": "<svg/>"})]))
    assert _unclean(nb, 1_000)
    clean = strip(nb)
    assert _unclean(clean, 1_000) == [] and clean.cells[0].outputs == [kept]
    assert clean.cells[1].outputs == [] and clean.cells[1].execution_count is None
    snapshot, = clean.cells[2].outputs  # the picture alone: no text, no chart JSON, no metadata
    assert snapshot.output_type == "display_data" and snapshot.data == {"image/svg+xml": "<svg/>"}
    assert not snapshot.metadata and clean.cells[2].execution_count == 3


@pytest.mark.parametrize("path", [*LECTURES, *[p for p in SOLUTIONS if "pick_pair" in p.read_text()]], ids=_id)
def test_first_code_cell_picks_the_models(path):
    nb = nbformat.read(path, as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert "pick_pair(PAIR" in first.source and re.search(r'PAIR, DEVICE = "tiny", None', first.source), \
        f"{_id(path)}: the first code cell must pick the models, the bundled pair by default"


@pytest.mark.parametrize("path", ALL, ids=_id)
def test_traces_the_notebooks_replay_exist(path):
    from teachspec import EventLog

    for name in re.findall(r'traces/([\w.]+\.jsonl)', path.read_text()):
        log = EventLog.load(NOTEBOOKS / "traces" / name)
        assert len(log) > 0, name


def test_pinned_cells_are_marked():
    """Every lecture but the first (whose numbers are all timings) pins at least one deterministic output."""
    for path in LECTURES[1:]:
        assert any(_pinned(c) for c in nbformat.read(path, as_version=4).cells), f"{_id(path)} pins nothing"


# -- the model-picking cell ----------------------------------------------------------------------------------------

def test_a_hub_pair_without_network_falls_back_with_one_message(monkeypatch, capsys):
    from teachspec.course import pairs

    calls = []

    def fake_load(name=None, **kw):
        calls.append(name or kw.get("target"))
        if name is None:
            raise FileNotFoundError("no network")
        return pairs.standin_pair()

    monkeypatch.delenv(pairs.ENV, raising=False)
    monkeypatch.setattr(pairs, "_reachable", lambda host, **kw: False)
    monkeypatch.setattr(pairs, "load_pair", fake_load)
    pair = pairs.pick_pair("qwen2.5", quiet=True)
    out = capsys.readouterr().out.strip().splitlines()
    assert calls == ["Qwen/Qwen2.5-1.5B", "tiny"]
    assert len(out) == 1 and "Using the bundled pair 'tiny' instead" in out[0] and "qwen2.5" in out[0]
    assert pair.draft is not None


def test_an_unknown_pair_is_refused(monkeypatch):
    from teachspec.course import pairs, pick_pair

    monkeypatch.delenv(pairs.ENV, raising=False)
    with pytest.raises(ValueError, match="not one of"):
        pick_pair("gpt-5")


# -- running them --------------------------------------------------------------------------------------------------

def _nbval(path: Path, claims: Path | None = None) -> subprocess.CompletedProcess:
    """pytest --nbval-lax on one notebook, in the environment the tests run in, as .ci/run does; the lecture's
    claims (`teachspec/course/claims.py`) go to the file `claims`, when given."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax", "--nbval-current-env",
           "--nbval-kernel-startup-timeout", "300", "--nbval-sanitize-with", str(SANITIZE), str(path)]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if claims is not None:
        env["TEACHSPEC_CLAIMS"] = str(claims)
    return subprocess.run(cmd, check=False, cwd=path.parent, env=env, capture_output=True, text=True, timeout=600)


def test_nbval_compares_pinned_outputs_and_only_those(tmp_path):
    """The pinned output is really compared (a changed number fails), addresses and timings are sanitized, and
    cells that are not pinned are run but not compared."""
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    def notebook(answer: str):
        return new_notebook(cells=[
            new_code_cell(f"{PIN}\nprint(6 * 7)", execution_count=1,
                          outputs=[new_output("stream", name="stdout", text=answer)]),
            new_code_cell(f"{PIN}\nprint(object(), '1.25 ms')", execution_count=2,
                          outputs=[new_output("stream", name="stdout", text="<object object at 0x7f0011> 9.50 ms\n")]),
            new_code_cell("import random\nprint(random.random())")],
            metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})

    path = tmp_path / "pinned.ipynb"
    nbformat.write(notebook("42\n"), path)
    # a snapshot's stored picture never matches a fresh run's (its numbers are timings): nbval must not compare it
    nb = notebook("42\n")
    nb.cells.append(new_code_cell(f"{SNAPSHOT}\nfrom IPython.display import SVG\n"
                                  "SVG('<svg xmlns=\"http://www.w3.org/2000/svg\"><text>run</text></svg>')",
                                  execution_count=3,
                                  outputs=[new_output("display_data", data={"image/svg+xml": "<svg>stored</svg>"})]))
    nbformat.write(nb, path)
    run = _nbval(path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    nbformat.write(notebook("41\n"), path)
    run = _nbval(path)
    assert run.returncode != 0 and "Cell outputs differ" in run.stdout, run.stdout[-3000:]


def test_nbconvert_to_html_shows_a_chart_without_running():
    """`jupyter nbconvert --to html` (no --execute) of a committed lecture shows its charts: the page has no
    plotly.js, so each chart is its snapshot's SVG, as an <img> (nbconvert's lab template) or inline <svg>, with
    the chart's title in it."""
    import base64

    path = NOTEBOOKS / "04_how_much_faster_and_when.ipynb"
    run = subprocess.run([sys.executable, "-m", "nbconvert", "--to", "html", "--stdout", str(path)],
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    page = run.stdout[run.stdout.index("<body"):]  # past the stylesheet's icons, which are SVGs too
    shown = re.findall(r"<svg\b.*?</svg>", page, flags=re.S) + [
        base64.b64decode(data).decode() for data in re.findall(r'<img[^>]+src="data:image/svg\+xml;base64,([^"]+)"',
                                                                page)]
    for title in ("Tokens per target pass", "Speedup against k"):
        assert any(title in picture for picture in shown), f"{len(shown)} pictures, none of them {title!r}"


@pytest.mark.skipif(not _pair_loadable(), reason="the bundled pair is not on disk; set TEACHSPEC_NOTEBOOK_PAIR=config")
@pytest.mark.parametrize("path", ALL, ids=_id)
def test_runs_under_nbval(path, tmp_path):
    """nbval-lax: every cell must run; cells marked # NBVAL_CHECK_OUTPUT must reproduce their stored output; and
    every direction the prose states about a measurement (a `claim`) holds on this run, the committed seed on a
    quiet machine (tests/test_lecture_claims.py reruns them with other seeds, and beside a busy neighbour)."""
    record = tmp_path / "claims.jsonl"
    run = _nbval(path, record)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    wrong = failed(recorded(record))
    assert not wrong, f"{path.name}: the prose says what this run did not show: " + "; ".join(wrong)
