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

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
LECTURES = sorted(NOTEBOOKS.glob("0*.ipynb"))
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
    assert len(LECTURES) == 8, [p.name for p in LECTURES]
    assert len(SOLUTIONS) >= 3, [p.name for p in SOLUTIONS]
    index = nbformat.read(NOTEBOOKS / "index.ipynb", as_version=4)
    text = "\n".join(c.source for c in index.cells)
    for path in [*LECTURES, *SOLUTIONS]:
        assert _id(path) in text, f"index.ipynb does not link {_id(path)}"


MAX_BYTES = 60_000          # a notebook's file: text, code and its few pinned outputs
MAX_OUTPUT_CHARS = 4_000    # one pinned output: a few lines that nbval compares
TEXT_TYPES = {"text/plain", "text/markdown"}


def _pinned(cell) -> bool:
    return cell.cell_type == "code" and cell.source.startswith(PIN)


def _unclean(nb, size: int) -> list[str]:
    """What makes a committed notebook not clean and small: saved widget state, outputs on cells nbval does not
    check, pinned cells with nothing to compare, anything but a few lines of text."""
    problems = []
    if size >= MAX_BYTES:
        problems.append(f"{size} bytes (at most {MAX_BYTES}): clear the outputs of cells that are not pinned")
    if "widgets" in nb.metadata:
        problems.append("saved widget state in the notebook's metadata")
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
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
    """Committed with outputs only on the cells nbval checks, produced by a run with the bundled pair
    (`python -m teachspec.course.pin`), and no widget state."""
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


def test_pin_keeps_the_pinned_outputs_and_nothing_else():
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    from teachspec.course.pin import strip

    kept = new_output("stream", name="stdout", text="42\n")
    nb = new_notebook(metadata={"widgets": {"application/vnd.jupyter.widget-state+json": {"state": {}}}}, cells=[
        new_code_cell(f"{PIN}\nprint(6 * 7)", execution_count=1, outputs=[kept]),
        new_code_cell("view", execution_count=2, outputs=[new_output(
            "display_data", data={"application/vnd.jupyter.widget-view+json": {"model_id": "ab"}})])])
    assert _unclean(nb, 1_000)
    clean = strip(nb)
    assert _unclean(clean, 1_000) == [] and clean.cells[0].outputs == [kept]
    assert clean.cells[1].outputs == [] and clean.cells[1].execution_count is None


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

def _nbval(path: Path) -> subprocess.CompletedProcess:
    """pytest --nbval-lax on one notebook, in the environment the tests run in, as .ci/run does."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax", "--nbval-current-env",
           "--nbval-kernel-startup-timeout", "300", "--nbval-sanitize-with", str(SANITIZE), str(path)]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
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
    run = _nbval(path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    nbformat.write(notebook("41\n"), path)
    run = _nbval(path)
    assert run.returncode != 0 and "Cell outputs differ" in run.stdout, run.stdout[-3000:]


@pytest.mark.skipif(not _pair_loadable(), reason="the bundled pair is not on disk; set TEACHSPEC_NOTEBOOK_PAIR=config")
@pytest.mark.parametrize("path", ALL, ids=_id)
def test_runs_under_nbval(path):
    """nbval-lax: every cell must run; cells marked # NBVAL_CHECK_OUTPUT must reproduce their stored output."""
    run = _nbval(path)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
