"""What of a notebook is graded: its definitions, taken from the notebook's file, never from a running kernel.

    definitions(nb)   the code that defines the student's answers, for `teachspec.course.sandbox` to run

A notebook's kernel is the student's: whatever it holds at grading time (patched modules, replaced builtins, a
function rebound after its cell ran) may be a trick. The notebook's text is not. So the grader reads the code
cells in order, as "Run All" would, and keeps of each what defines things: imports, functions, classes and
assignments that call nothing, at the top level. Calls, prints, loops and the checks themselves are left out, so
that nothing but definitions runs before the grader calls them, and a cell that runs a model does not run at all. IPython's
`%magic` and `!shell` lines are dropped; a cell that still does not parse is left out with a note.

Every code cell counts, not only the exercise cells: a helper the student wrote in a cell of their own is theirs.
The instructor's cells contribute their imports and definitions too (an import of teachspec there binds a
stand-in that refuses when used, in the sandbox).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

import nbformat

DEFINES = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def kept(node: ast.stmt) -> bool:
    """A definition, or an assignment that calls nothing (`EPS = 1e-9`, `choose_k = lambda ...`): an assignment
    that calls something is a computation, and could be the very call that never returns."""
    if isinstance(node, DEFINES):
        return True
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        lambdas = {id(n) for lam in ast.walk(node.value) if isinstance(lam, ast.Lambda) for n in ast.walk(lam.body)}
        return not any(isinstance(n, ast.Call) and id(n) not in lambdas for n in ast.walk(node.value))
    return False


@dataclass
class Definitions:
    code: str                                        # what the sandbox runs, one cell after another
    notes: list[str] = field(default_factory=list)   # cells left out, and why


def cell_definitions(source: str) -> str:
    """One cell's top-level definitions, as source text (raises SyntaxError when the cell does not parse)."""
    try:
        text, tree = source, ast.parse(source)
    except SyntaxError:  # IPython's `%magic` and `!shell` lines: dropped (a line like `!= b` inside brackets is not)
        text = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
        tree = ast.parse(text)
    return "\n".join(ast.get_source_segment(text, node, padded=True) for node in tree.body if kept(node))


def from_sources(sources: list[str]) -> Definitions:
    """The definitions of cells given as their source texts, in order."""
    out = Definitions("")
    for i, source in enumerate(sources):
        try:
            code = cell_definitions(source)
        except SyntaxError as e:
            out.notes.append(f"code cell {i + 1} does not parse (line {e.lineno}: {e.msg}); it was left out")
            continue
        if code.strip():
            out.code += f"# -- code cell {i + 1}\n{code}\n\n"
    return out


def definitions(nb: nbformat.NotebookNode) -> Definitions:
    """The definitions of every code cell of `nb`, in order."""
    return from_sources([c.source for c in nb.cells if c.cell_type == "code"])
