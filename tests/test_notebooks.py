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


@pytest.mark.parametrize("path", ALL, ids=_id)
def test_committed_clean_and_small(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert path.stat().st_size < 60_000, f"{_id(path)} is {path.stat().st_size} bytes: clear its outputs"
    assert "widgets" not in nb.metadata, f"{_id(path)} carries saved widget state; clear it"
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            # outputs are produced with the bundled pair only; a stale or stand-in output must not be committed
            assert cell.outputs == [] and cell.execution_count is None, f"{_id(path)} cell {i} has outputs"


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
    pinned = [c for p in LECTURES for c in nbformat.read(p, as_version=4).cells
              if c.cell_type == "code" and c.source.startswith("# NBVAL_CHECK_OUTPUT")]
    assert len(pinned) >= 4


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

@pytest.mark.skipif(not _pair_loadable(), reason="the bundled pair is not on disk; set TEACHSPEC_NOTEBOOK_PAIR=config")
@pytest.mark.parametrize("path", ALL, ids=_id)
def test_runs_under_nbval(path):
    """nbval-lax: every cell must run; cells marked # NBVAL_CHECK_OUTPUT must reproduce their stored output (a
    cell with no stored output, execution_count None, is run but not compared)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax", "--nbval-current-env",
           "--nbval-kernel-startup-timeout", "300", "--nbval-sanitize-with", str(SANITIZE), str(path)]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    run = subprocess.run(cmd, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
