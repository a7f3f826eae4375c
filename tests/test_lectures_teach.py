"""The lectures' shape as teaching material: each fits one sitting and asks the student to predict before it shows.

A prediction counts when a code cell builds a `Predict` (the student commits before the answer is on screen) and a
later cell, or the Predict itself, holds the answer."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
LECTURES = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
MOST_CELLS = 32  # about 75 minutes of lecture


def predictions(nb) -> list[int]:
    """The code cells that put a question to the student."""
    return [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "Predict(" in c.source]


@pytest.mark.parametrize("path", LECTURES, ids=lambda p: p.name)
def test_each_lecture_fits_one_sitting(path):
    nb = nbformat.read(path, as_version=4)
    assert len(nb.cells) <= MOST_CELLS, f"{path.name}: {len(nb.cells)} cells (at most {MOST_CELLS}): split it"


@pytest.mark.parametrize("path", LECTURES, ids=lambda p: p.name)
def test_each_lecture_asks_for_two_predictions_before_it_reveals(path):
    nb = nbformat.read(path, as_version=4)
    asked = predictions(nb)
    assert len(asked) >= 2, f"{path.name}: {len(asked)} predict-then-run moments (at least 2)"
    for i in asked:  # the answer comes with the question (answer=...) or in a later cell (reveal)
        later = "\n".join(c.source for c in nb.cells[i + 1:] if c.cell_type == "code")
        assert "answer=" in nb.cells[i].source or ".reveal(" in later, \
            f"{path.name} cell {i} asks a question that no later cell answers"


def test_the_counts_can_fail():
    """Both checks above refuse a lecture that is too long or never asks."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1") for _ in range(MOST_CELLS + 1)])
    assert len(nb.cells) > MOST_CELLS and predictions(nb) == []
    nb.cells[3] = nbformat.v4.new_code_cell('Predict("How many?", number=True)')
    assert predictions(nb) == [3]
