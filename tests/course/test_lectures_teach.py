"""The lectures' shape as teaching material: each fits the hour, and asks the student to predict before it tells.

A prediction counts when a code cell builds a `Predict` whose answer the course keeps apart, under its `key`
(teachspec/widgets/answers.py), and the answer is known up front or revealed by a later cell. The source a student
reads holds the question and its choices only: no answer, no explanation."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from teachspec.widgets.answers import everything

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
LECTURES = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
MOST_WORDS = 1_600  # of prose: about an hour at a teaching pace, with the cells run and discussed
MOST_CODE_CELLS = 16
KEY = re.compile(r"""\bkey\s*=\s*["']([\w.-]+)["']""")


def words(nb) -> int:
    """The prose's words: whitespace-separated tokens of every markdown cell (a formula's pieces count too)."""
    return sum(len(c.source.split()) for c in nb.cells if c.cell_type == "markdown")


def code_cells(nb) -> int:
    return sum(c.cell_type == "code" for c in nb.cells)


def predictions(nb) -> list[int]:
    """The code cells that put a question to the student."""
    return [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "Predict(" in c.source]


@pytest.mark.parametrize("path", LECTURES, ids=lambda p: p.name)
def test_each_lecture_fits_the_hour(path):
    nb = nbformat.read(path, as_version=4)
    assert words(nb) <= MOST_WORDS, f"{path.name}: {words(nb)} words of prose (at most {MOST_WORDS}): move what is " \
                                    f"only for the curious to an appendix"
    assert code_cells(nb) <= MOST_CODE_CELLS, f"{path.name}: {code_cells(nb)} code cells (at most {MOST_CODE_CELLS})"


def blind(nb, answers) -> list[str]:
    """What gives a lecture's predictions away, or leaves one unanswered: a Predict cell without a key the course
    keeps, with answer= or explain= in its source, an explanation that stands in a cell's source, a measured answer
    that no later cell reveals."""
    problems = []
    sources = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    for i in predictions(nb):
        source = nb.cells[i].source
        if re.search(r"\b(answer|explain)\s*=", source):
            problems.append(f"cell {i} gives its answer or explanation in its source")
        keys = KEY.findall(source)
        if not keys:
            problems.append(f"cell {i} names no key for its answer")
        for key in keys:
            if key not in answers:
                problems.append(f"cell {i}: no answer kept under {key!r}")
                continue
            kept = answers[key]
            if kept.explain and kept.explain[:60] in " ".join(sources.split()):
                problems.append(f"cell {i}: the explanation of {key!r} stands in the notebook's code")
            later = "\n".join(c.source for c in nb.cells[i + 1:] if c.cell_type == "code")
            if kept.answer is None and ".reveal(" not in later:
                problems.append(f"cell {i} asks a question ({key!r}) that no later cell reveals")
    return problems


@pytest.mark.parametrize("path", LECTURES, ids=lambda p: p.name)
def test_each_lecture_asks_two_questions_without_telling(path):
    nb = nbformat.read(path, as_version=4)
    asked = predictions(nb)
    assert len(asked) >= 2, f"{path.name}: {len(asked)} predict-then-run moments (at least 2)"
    assert not blind(nb, everything()), f"{path.name}: {blind(nb, everything())}"


def test_every_kept_answer_belongs_to_one_question():
    asked = [key for path in LECTURES for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"
             for key in KEY.findall(c.source) if "Predict(" in c.source]
    assert len(asked) == len(set(asked)), sorted(k for k in asked if asked.count(k) > 1)
    assert set(everything()) == set(asked), {"kept, never asked": sorted(set(everything()) - set(asked)),
                                             "asked, never kept": sorted(set(asked) - set(everything()))}


def test_the_checks_can_fail():
    """The checks above refuse a lecture that is too long, never asks, or tells."""
    from teachspec.widgets.answers import Answer

    new = nbformat.v4
    nb = new.new_notebook(cells=[new.new_code_cell("x = 1") for _ in range(MOST_CODE_CELLS + 1)])
    nb.cells.append(new.new_markdown_cell("word " * (MOST_WORDS + 1)))
    assert code_cells(nb) > MOST_CODE_CELLS and words(nb) > MOST_WORDS and predictions(nb) == []
    answers = {"k": Answer(None, "Because the ninth guess adds less than the average rate reached so far."),
               "known": Answer("8", "")}
    told = new.new_notebook(cells=[new.new_code_cell('Predict("Best k?", ["4", "8"], answer="8")')])
    unkeyed = new.new_notebook(cells=[new.new_code_cell('Predict("Best k?", ["4", "8"])')])
    unknown = new.new_notebook(cells=[new.new_code_cell('Predict("Best k?", ["4", "8"], key="nope")')])
    unrevealed = new.new_notebook(cells=[new.new_code_cell('Predict("How many?", number=True, key="k")')])
    explained = new.new_notebook(cells=[new.new_code_cell('g = Predict("How many?", number=True, key="k")'),
                                        new.new_code_cell("# Because the ninth guess adds less than the average rate "
                                                          "reached so far.\ng.reveal(3)")])
    for nb, expect in ((told, "in its source"), (unkeyed, "names no key"), (unknown, "no answer kept"),
                       (unrevealed, "no later cell reveals"), (explained, "stands in the notebook")):
        assert any(expect in p for p in blind(nb, answers)), (expect, blind(nb, answers))
    fine = new.new_notebook(cells=[new.new_code_cell('Predict("Best k?", ["4", "8"], key="known")'),
                                   new.new_code_cell('g = Predict("How many?", number=True, key="k")'),
                                   new.new_code_cell("g.reveal(3)")])
    assert blind(fine, answers) == []
