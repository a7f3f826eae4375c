"""The course notebooks: committed with the outputs of one full run, so a reader without a kernel sees them; each
runs top to bottom under nbval; and the model-picking cell falls back to the bundled pair when a hub pair cannot be
loaded.

Running them needs a loadable pair. By default that is the bundled pair; TEACHSPEC_NOTEBOOK_PAIR=config runs them
on a small config-built stand-in instead (seconds, no weights), see teachspec/course/pairs.py.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from helpers.claims import failed, recorded
from teachspec.course.pin import code_hash
from teachspec.widgets.predict import FOLDED

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
LECTURES = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))  # 01_ ... 15_: the name sorts in lecture order
APPENDICES = sorted((NOTEBOOKS / "appendix").glob("*.ipynb"))
STUDENTS = sorted((NOTEBOOKS / "assignments").glob("a*.ipynb"))  # the assignments as students get them
SOLUTIONS = sorted((ROOT / "teachspec/course/sources").glob("a*.ipynb"))  # the instructor's, which nbval runs
ALL = [NOTEBOOKS / "index.ipynb", *LECTURES, *APPENDICES, *SOLUTIONS]
READ = [*LECTURES, *APPENDICES]  # what is committed with every output of one run
SANITIZE = NOTEBOOKS / "nbval.cfg"
PIN = "# NBVAL_CHECK_OUTPUT"
ON_THE_PAGE = ("The outputs on this page are from one full run on the bundled pair on two CPU cores; run the "
               "notebook to make your own.")


def _id(path: Path) -> str:
    return str(path.relative_to(NOTEBOOKS if path.is_relative_to(NOTEBOOKS) else ROOT))


def _pair_loadable() -> bool:
    if os.environ.get("TEACHSPEC_NOTEBOOK_PAIR"):
        return True
    from teachspec.models import BUNDLED
    return (BUNDLED["tiny"] / "draft").is_dir() and (BUNDLED["tiny"] / "target").is_dir()


# -- what is committed ---------------------------------------------------------------------------------------------

def test_the_course_is_all_there():
    assert len(LECTURES) == 15, [p.name for p in LECTURES]
    index = nbformat.read(NOTEBOOKS / "index.ipynb", as_version=4)
    text = "\n".join(c.source for c in index.cells)
    assert len(STUDENTS) >= 6 and [p.name for p in STUDENTS] == [p.name for p in SOLUTIONS]
    for path in [*LECTURES, *APPENDICES, *STUDENTS]:
        assert _id(path) in text, f"index.ipynb does not link {_id(path)}"


def test_the_index_links_no_notebook_that_holds_a_solution():
    """A student browsing notebooks/ from the index meets the assignments as they get them: no solution, no hidden
    test (the instructor's sources live with the graders, `teachspec course --with-solutions` writes them)."""
    index = "\n".join(c.source for c in nbformat.read(NOTEBOOKS / "index.ipynb", as_version=4).cells)
    linked = [NOTEBOOKS / link for link in re.findall(r"\]\(([^)#]+\.ipynb)\)", index)]
    assert linked and all(path.is_file() for path in linked), [p for p in linked if not p.is_file()]
    for path in linked:
        text = path.read_text()
        assert not re.search(r"BEGIN (SOLUTION|HIDDEN TESTS)", text), f"the index links {_id(path)}, which holds one"
    for path in NOTEBOOKS.rglob("*.ipynb"):
        assert not re.search(r"BEGIN (SOLUTION|HIDDEN TESTS)", path.read_text()), f"{_id(path)} holds a solution"


def test_the_index_plans_each_lecture_by_section_as_the_lectures_stand():
    from teachspec.course.minutes import plan

    cells = [c.source for c in nbformat.read(NOTEBOOKS / "index.ipynb", as_version=4).cells]
    assert plan(NOTEBOOKS) in cells, "the index's minutes are stale: run python -m teachspec.course.minutes " \
                                     "notebooks and put its output in the index's 'Minutes by section' cell"


MAX_BYTES = 1_000_000       # a notebook's file: text, code and the outputs of one run
MAX_OUTPUT_CHARS = 4_000    # one compared output: a few lines that nbval compares
MAX_PICTURE_BYTES = 150_000  # one picture: an SVG of a chart or a view, or a small PNG
SHOWN = {"text/plain", "text/markdown", "text/html", "image/svg+xml", "image/png"}  # what a page without a kernel shows
IMAGE_TYPES = {"image/svg+xml", "image/png"}
COVERAGE = 0.95  # of the code cells that print or draw, the share that must keep their output


def _pinned(cell) -> bool:
    return cell.cell_type == "code" and cell.source.startswith(PIN)


def _pictures(nb) -> list[tuple[int, str, int]]:
    """(cell, mime type, bytes) of every image output in the notebook."""
    return [(i, kind, len(out.data[kind])) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
            for out in cell.outputs for kind in IMAGE_TYPES & set(out.get("data", {}))]


def _silent(source: str) -> bool:
    """Whether a cell's code, read without running it, shows nothing: its last statement is no expression (which
    the notebook would display) and it calls nothing that prints, displays, states a claim or reveals an answer."""
    try:
        body = ast.parse(source).body
    except SyntaxError:  # a cell magic, say: it may show anything
        return False
    if body and isinstance(body[-1], ast.Expr):
        return False
    return not re.search(r"\b(print|display|claim|reveal)\(", source)


def coverage(nb) -> tuple[int, int]:
    """(code cells that keep an output, code cells that print or draw): a cell prints or draws if it keeps an
    output, or if its source is not silent (`_silent`), which a cell that printed nothing on the committed run but
    may on another (a warning on a busy machine) is not counted as."""
    code = [c for c in nb.cells if c.cell_type == "code"]
    kept = sum(bool(c.outputs) for c in code)
    return kept, kept + sum(not c.outputs and not _silent(c.source) for c in code)


def _unclean(nb, size: int) -> list[str]:
    """What makes a committed notebook not the record of one run that a page without a kernel can show: saved
    widget state, outputs that need a kernel or a script, outputs of other code than the notebook's (its code hash),
    fewer than COVERAGE of the printing cells with their output, an unrun cell with outputs, compared cells with
    nothing to compare or more than a few lines, pictures over their size, an answer shown outside a closed box."""
    problems = []
    if size >= MAX_BYTES:
        problems.append(f"{size} bytes (at most {MAX_BYTES})")
    if "widgets" in nb.metadata:
        problems.append("saved widget state in the notebook's metadata")
    if nb.metadata.get("teachspec", {}).get("code_hash") != code_hash(nb):
        problems.append("its outputs are not from its code (the code hash differs): run `teachspec pin` on it")
    kept, printing = coverage(nb)
    if kept < COVERAGE * printing:
        problems.append(f"{kept} of {printing} code cells that print or draw keep their output (at least "
                        f"{COVERAGE:.0%}): run `teachspec pin` on it")
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if cell.outputs and cell.execution_count is None:  # nbval fails such a cell: "Unrun reference cell"
            problems.append(f"cell {i} has outputs but no execution count")
        if _pinned(cell) and not cell.outputs:
            problems.append(f"cell {i} is compared ({PIN}) but has no output, so nbval compares nothing")
        for out in cell.outputs:
            data = out.get("data", {})
            if set(data) - SHOWN:
                problems.append(f"cell {i} keeps {sorted(set(data) - SHOWN)}, which a page without a kernel cannot "
                                f"show")
            if "image/svg+xml" in data and "image/png" not in data:
                problems.append(f"cell {i} keeps an SVG with no PNG beside it, which an untrusted notebook in "
                                f"JupyterLab does not draw")
            for kind in IMAGE_TYPES & set(data):
                if len(data[kind]) > MAX_PICTURE_BYTES:
                    problems.append(f"cell {i} has a {len(data[kind])}-byte picture (at most {MAX_PICTURE_BYTES})")
            text = out.get("text", "") + data.get("text/plain", "")
            if re.search(r"The answer: |Right: you predicted|Not this time: you predicted", text):
                problems.append(f"cell {i} shows an answer in plain text: reveal folds it")
            page = data.get("text/html", "")
            if FOLDED in page and (re.search(rf"<details class='{FOLDED}' open", page)
                                   or not cell.metadata.get("jupyter", {}).get("outputs_hidden")):
                problems.append(f"cell {i} shows a revealed answer open, or does not collapse its output")
            if _pinned(cell) and len(text) > MAX_OUTPUT_CHARS:
                problems.append(f"cell {i} has a {len(text)}-character compared output (at most {MAX_OUTPUT_CHARS})")
    return problems


@pytest.mark.parametrize("path", READ, ids=_id)
def test_committed_with_the_outputs_of_one_run(path):
    """Committed as `teachspec pin` leaves it after one full run with the bundled pair: every printing cell's output
    (at least COVERAGE of them), each as a page without a kernel shows it, from the code beside it."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert not _unclean(nb, path.stat().st_size), f"{_id(path)}: {_unclean(nb, path.stat().st_size)}"


@pytest.mark.parametrize("path", READ, ids=_id)
def test_the_committed_run_bears_out_the_prose(path):
    """Every claim the prose makes held on the run whose outputs are on the page (claims.py prints "Not on this
    run" under a cell whose measurement contradicts its text): lecture 4's chart at or below its own formula, say."""
    nb = nbformat.read(path, as_version=4)
    contradicted = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" for out in c.outputs
                    if "Not on this run" in out.get("text", "") + out.get("data", {}).get("text/plain", "")]
    assert not contradicted, f"{_id(path)}: cells {contradicted} say the committed run contradicts the prose: pin it " \
                             f"again on a quiet machine, or correct the prose"


@pytest.mark.parametrize("path", LECTURES, ids=_id)
def test_each_lecture_says_where_its_outputs_come_from(path):
    first = next(c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    assert ON_THE_PAGE in " ".join(first.source.split()), f"{_id(path)}: its first cell must say {ON_THE_PAGE!r}"


def _stamped(nb):
    nb.metadata["teachspec"] = {"code_hash": code_hash(nb)}
    return nb


def test_an_unclean_notebook_is_refused():
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

    def printing(text="1\n", count=1, source="print(1)"):
        return new_code_cell(source, execution_count=count, outputs=[new_output("stream", name="stdout", text=text)])

    def folded(state=""):
        cell = new_code_cell("guess.reveal(3)", execution_count=2, outputs=[new_output("display_data", data={
            "text/html": f"<details class='{FOLDED}'{state}><summary>The answer</summary>3</details>",
            "text/plain": "folded"})])
        cell.metadata["jupyter"] = {"outputs_hidden": True}
        return cell

    clean = _stamped(new_notebook(cells=[printing(), new_code_cell("x = 1"), new_markdown_cell("text"), folded()]))
    assert _unclean(clean, 1_000) == []
    stale = _stamped(new_notebook(cells=[printing()]))
    stale.cells[0].source = "print(2)"
    state = _stamped(new_notebook(cells=[printing()], metadata={"widgets": {"state": {}}}))
    widget = _stamped(new_notebook(cells=[new_code_cell("view", execution_count=1, outputs=[new_output(
        "display_data", data={"application/vnd.jupyter.widget-view+json": {"model_id": "ab"}, "text/plain": "V"})])]))
    empty = _stamped(new_notebook(cells=[printing(), *[new_code_cell(f"print({i})") for i in range(2)]]))
    told = _stamped(new_notebook(cells=[printing("No prediction. The answer: 8.\n")]))
    opened, uncollapsed = _stamped(new_notebook(cells=[folded(" open")])), _stamped(new_notebook(cells=[folded()]))
    uncollapsed.cells[0].metadata = {}
    unrun = _stamped(new_notebook(cells=[printing(count=None)]))
    compared = _stamped(new_notebook(cells=[new_code_cell(f"{PIN}\nx = 1")]))
    picture = _stamped(new_notebook(cells=[new_code_cell("fig", execution_count=1, outputs=[new_output(
        "display_data", data={"image/png": "x" * (MAX_PICTURE_BYTES + 1)})])]))
    svg_alone = _stamped(new_notebook(cells=[new_code_cell("fig", execution_count=1, outputs=[new_output(
        "display_data", data={"image/svg+xml": "<svg/>"})])]))
    for nb, size, expect in ((clean, 3_000_000, "bytes"), (stale, 1_000, "code hash"), (state, 1_000, "widget state"),
                             (widget, 1_000, "cannot show"), (empty, 1_000, "keep their output"),
                             (told, 1_000, "in plain text"), (opened, 1_000, "open"), (uncollapsed, 1_000, "collapse"),
                             (unrun, 1_000, "no execution count"), (compared, 1_000, "compares nothing"),
                             (picture, 1_000, "-byte picture"), (svg_alone, 1_000, "no PNG beside it")):
        problems = _unclean(nb, size)
        assert any(expect in p for p in problems), (expect, problems)


def test_a_cell_counts_as_printing_by_what_it_shows_or_what_its_code_would():
    assert _silent("x = 1\ny = f(x)") and _silent("def f():\n    return 1")
    for source in ("x", "print(1)", "f(x)", "display(view)", "claim('a', True, '1')", "guess.reveal(3)", "%%time\nx"):
        assert not _silent(source), source


@pytest.mark.parametrize("path", LECTURES, ids=_id)
def test_every_lecture_shows_a_picture_without_running(path):
    """A code-hosting site or nbviewer, which run nothing, show at least one committed picture of each lecture
    (a chart's or a view's SVG, or a PNG), and every picture is well formed."""
    import base64
    import xml.etree.ElementTree as ET

    nb = nbformat.read(path, as_version=4)
    pictures = _pictures(nb)
    assert pictures, f"{_id(path)} has no image or SVG output: run `teachspec pin` on it"
    for i, kind, _ in pictures:
        for out in nb.cells[i].outputs:
            if kind == "image/svg+xml" and kind in out.get("data", {}):
                ET.fromstring(out.data[kind])  # a well-formed SVG document, or this raises
            elif kind == "image/png" and kind in out.get("data", {}):
                assert base64.b64decode(out.data[kind])[:8] == b"\x89PNG\r\n\x1a\n", f"{_id(path)} cell {i}"


def test_pin_keeps_what_a_page_without_a_kernel_shows():
    import base64

    from nbformat.v4 import new_code_cell, new_notebook, new_output

    from teachspec.course.pin import png, strip

    svg = '<svg xmlns="http://www.w3.org/2000/svg" width="20" height="10"><rect width="20" height="10"/></svg>'
    drawn = png(svg)
    assert base64.b64decode(drawn)[:8] == b"\x89PNG\r\n\x1a\n"
    said = new_output("stream", name="stdout", text="timings that change every run\n")
    nb = new_notebook(metadata={"widgets": {"application/vnd.jupyter.widget-state+json": {"state": {}}}}, cells=[
        new_code_cell(f"{PIN}\nprint(6 * 7)", execution_count=1, outputs=[new_output("stream", name="stdout",
                                                                                     text="42\n")]),
        new_code_cell("view", execution_count=2, outputs=[new_output("display_data", data={
            "application/vnd.jupyter.widget-view+json": {"model_id": "ab"}, "text/html": "<script>player</script>",
            "image/svg+xml": svg, "text/plain": "SpeculationView: 9 frames"})]),
        new_code_cell("fig", execution_count=3, outputs=[said, new_output(
            "execute_result", execution_count=3, metadata={"image/svg+xml": {"isolated": True}}, data={
                "application/vnd.plotly.v1+json": {"data": [], "layout": {}}, "image/svg+xml": svg})]),
        new_code_cell("guess", execution_count=4, outputs=[new_output("display_data", data={
            "application/vnd.jupyter.widget-view+json": {"model_id": "cd"}, "text/html": "<div>Predict.</div>",
            "text/plain": "Predict: ?"})]),
        new_code_cell("guess.reveal(3)", execution_count=5, outputs=[new_output("display_data", data={
            "text/html": f"<details class='{FOLDED}'>3</details>", "text/plain": "folded"})])])
    assert _unclean(nb, 1_000)
    clean = strip(nb)
    assert _unclean(clean, 1_000) == [], _unclean(clean, 1_000)
    assert clean.cells[0].outputs == nb.cells[0].outputs
    view, = clean.cells[1].outputs  # the still, drawn for an untrusted page too, and its words; no player, no id
    assert view.data == {"image/svg+xml": svg, "image/png": drawn, "text/plain": "SpeculationView: 9 frames"}
    assert clean.cells[2].outputs[0] == said
    assert clean.cells[2].outputs[1].data == {"image/svg+xml": svg, "image/png": drawn}
    assert not clean.cells[2].outputs[1].metadata and clean.cells[2].outputs[1].execution_count == 3
    assert clean.cells[3].outputs[0].data == {"text/html": "<div>Predict.</div>", "text/plain": "Predict: ?"}
    assert clean.cells[4].metadata["jupyter"]["outputs_hidden"] and not clean.cells[3].metadata.get("jupyter")


@pytest.mark.parametrize("path", [*LECTURES, *APPENDICES, *[p for p in SOLUTIONS if "pick_pair" in p.read_text()]],
                         ids=_id)
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
    """Every lecture but the first (whose numbers are all timings) has at least one deterministic output nbval
    compares."""
    for path in LECTURES[1:]:
        assert any(_pinned(c) for c in nbformat.read(path, as_version=4).cells), f"{_id(path)} compares nothing"


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
    cells that are not pinned are run but their committed outputs are not compared."""
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
    # a cell that is not compared keeps the output of the committed run, which a fresh run never matches
    nb = notebook("42\n")
    nb.cells[2].outputs = [new_output("stream", name="stdout", text="0.123 from the committed run\n")]
    nb.cells[2].execution_count = 3
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
    quiet machine (tests/course/test_lecture_claims.py reruns them with other seeds, and beside a busy neighbour)."""
    record = tmp_path / "claims.jsonl"
    run = _nbval(path, record)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    wrong = failed(recorded(record))
    assert not wrong, f"{path.name}: the prose says what this run did not show: " + "; ".join(wrong)
