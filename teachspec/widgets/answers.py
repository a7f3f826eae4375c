"""The answer book of `Predict`: the answers to the lectures' predictions, kept apart from the lectures so that
reading one does not give them away.

A lecture's `Predict` cell holds its question and its choices only, and names its answer by a key:

    guess = Predict("Which k gives the largest speedup?", ["1", "2", "4", "8"], key="04-best-k")

The answers live in `teachspec/course/answers/NN.json`, one file per lecture (NN its number), each a JSON object
from key to `{"answer": ..., "explain": "..."}`. `answer` is left out where the run measures it (the lecture then
calls `guess.reveal(measured)`); `explain` is shown with the answer, once the student has committed or asked to
see it. A key names one prediction in the whole course, so two files never hold the same key.

Anything a package ships can be read by a determined student; this keeps the answer off the page they are
reading, which is what a prediction needs. Graded work is another matter (teachspec/course/grading.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

FOLDER = Path(__file__).parents[1] / "course" / "answers"  # the course's data: one JSON file per lecture


@dataclass(frozen=True)
class Answer:
    answer: str | float | None  # None: the run measures it, and the lecture passes it to reveal
    explain: str


@cache
def everything() -> dict[str, Answer]:
    """Every answer of the course, by key; a malformed file or a key held twice is refused with its name."""
    found: dict[str, Answer] = {}
    where: dict[str, str] = {}
    for path in sorted(FOLDER.glob("*.json")):
        try:
            entries = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path} is not a JSON file of answers: {e}") from None
        if not isinstance(entries, dict):
            raise ValueError(f"{path} must hold a JSON object from key to answer, got {type(entries).__name__}")
        for key, entry in entries.items():
            if key in found:
                raise ValueError(f"the answer key {key!r} is in both {where[key]} and {path.name}: a key names one "
                                 f"prediction in the whole course")
            if not isinstance(entry, dict) or set(entry) - {"answer", "explain"} or \
                    not isinstance(entry.get("explain", ""), str):
                raise ValueError(f"{path.name}: {key!r} must be an object with an optional 'answer' and a string "
                                 f"'explain', got {entry!r}")
            found[key], where[key] = Answer(entry.get("answer"), entry.get("explain", "")), path.name
    return found


def lookup(key: str) -> Answer:
    """The answer kept under `key`; an unknown key is refused, naming the folder the answers live in."""
    answers = everything()
    if key not in answers:
        raise ValueError(f"no answer is kept under the key {key!r} in {FOLDER}/*.json "
                       f"({len(answers)} keys there)")
    return answers[key]
