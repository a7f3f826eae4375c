"""How long each lecture takes, section by section: what an instructor plans the hour with.

A lecture is read aloud, discussed and run: its time is its prose at a teaching pace plus a minute for each code
cell (run it, look at what it shows, say what it means). The pace is an estimate, not a measurement of any room:

    minutes(section) = words of prose / WORDS_PER_MINUTE + code cells * MINUTES_PER_CELL

A section starts at a markdown cell with a `## ` heading (the title cell starts the first). The index of the course
(notebooks/index.ipynb) shows `plan()` for every lecture, and a test keeps it equal to what the lectures hold now.

    python -m teachspec.course.minutes notebooks/       # the plan, as the index's markdown
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

WORDS_PER_MINUTE = 30   # prose read and discussed, formulas included
MINUTES_PER_CELL = 1.0  # a code cell run and looked at
HEADING = re.compile(r"^#{1,2} (.+)$", re.M)


@dataclass
class Section:
    title: str
    words: int = 0
    code_cells: int = 0

    @property
    def minutes(self) -> float:
        return self.words / WORDS_PER_MINUTE + self.code_cells * MINUTES_PER_CELL


def sections(path: Path) -> list[Section]:
    """The lecture at `path`, cut where a markdown cell opens with a `#` or `##` heading."""
    found: list[Section] = []
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "markdown":
            heading = HEADING.match(cell.source.lstrip())
            if heading or not found:
                title = heading.group(1).strip() if heading else path.stem
                found.append(Section(re.sub(r"^\d+\.\s*", "", title)))  # "4. How much faster" -> "How much faster"
            found[-1].words += len(cell.source.split())
        elif found:
            found[-1].code_cells += 1
        else:
            found.append(Section(path.stem, code_cells=1))
    return found


def plan(folder: Path) -> str:
    """Markdown: for each lecture in `folder` (NN_name.ipynb), its sections with their minutes, and the total."""
    lines = ["## Minutes by section", "",
             f"An estimate for planning the hour: prose at {WORDS_PER_MINUTE} words a minute, and "
             f"{MINUTES_PER_CELL:g} minute for each code cell run and looked at (`teachspec/course/minutes.py`).", ""]
    for path in sorted(Path(folder).glob("[0-9][0-9]_*.ipynb")):
        parts = sections(path)
        total = round(sum(s.minutes for s in parts))
        listed = "; ".join(f"{s.title} {max(1, round(s.minutes))}" for s in parts)
        lines.append(f"- **{int(path.name[:2])}** ({total} min): {listed}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(plan(Path(sys.argv[1] if len(sys.argv) > 1 else "notebooks")))
