"""Run a course notebook top to bottom and keep only the outputs that nbval checks, and the pictures.

The notebooks are committed almost clean. A cell whose source starts with `# NBVAL_CHECK_OUTPUT` is deterministic
and seeded (an exact enumeration, a greedy output checked against plain decoding, a hit rate): its output and
execution count are kept, and `pytest --nbval-lax` compares a fresh run against them. A cell whose source starts
with `# SNAPSHOT` draws a main picture of the lecture (a chart, a still of a view): its images alone are kept, SVG
or PNG, with its execution count (nbval refuses a cell with outputs and none), so a code-hosting site, nbviewer
or `nbconvert --to html` shows the picture before anyone runs the notebook; nbval-lax runs the cell and compares
nothing, as it never compares a cell that is not pinned (and a cell is never both). Every other cell is committed
with no output and no execution count (nbval runs it and only checks that it does not raise), and the notebook's
saved widget state is dropped: a view's state is megabytes, and it is rebuilt when the cell runs.

    teachspec pin notebooks/05_radix_attention.ipynb [...]     # run, keep the pinned outputs and the snapshots
    teachspec pin --strip notebooks/*.ipynb                    # only clean, run nothing

Run it with the bundled pair (the default of every notebook's first cell) and with the package that the kernel
imports being this one (PYTHONPATH=. from a checkout). It prints each notebook's run time.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import nbformat

PIN = "# NBVAL_CHECK_OUTPUT"
SNAPSHOT = "# SNAPSHOT"
IMAGES = ("image/svg+xml", "image/png")   # what a snapshot keeps of an output: pictures every renderer shows


def pinned(cell) -> bool:
    return cell.cell_type == "code" and cell.source.lstrip().startswith(PIN)


def snapshot(cell) -> bool:
    return cell.cell_type == "code" and cell.source.lstrip().startswith(SNAPSHOT)


def pictures(outputs) -> list:
    """The images among `outputs`, each as a display_data holding nothing else (a plotly chart's JSON, a
    widget's model id, its HTML player and text reprs are dropped: they need a kernel or plotly.js, or are big)."""
    kept = []
    for out in outputs:
        data = {kind: out.data[kind] for kind in IMAGES if kind in out.get("data", {})}
        if data:
            kept.append(nbformat.v4.new_output("display_data", data=data))
    return kept


def strip(nb):
    """A copy of `nb` with outputs and execution counts only on pinned cells and snapshot cells (of whose outputs
    only the images are kept), output metadata emptied, and no saved widget state or per-cell execution timings."""
    nb = copy.deepcopy(nb)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)  # nbclient's per-cell timestamps
        if cell.cell_type != "code":
            continue
        if pinned(cell):
            for out in cell.outputs:
                if "metadata" in out:
                    out.metadata = {}
        elif snapshot(cell):
            cell.outputs = pictures(cell.outputs)
        else:
            cell.outputs, cell.execution_count = [], None
    return nb


def run(path: Path, timeout: int = 600) -> tuple[object, float]:
    """Execute the notebook in its own folder (the traces are found relative to it); returns it and the seconds."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    metadata = copy.deepcopy(nb.metadata)
    start = time.perf_counter()
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(Path(path).resolve().parent)}}).execute()
    except CellExecutionError as e:  # its message is the whole traceback; the last line says what went wrong
        raise ValueError(f"{path}: a cell raised {e.ename}: {e.evalue}; the notebook was left as it was") from e
    seconds = time.perf_counter() - start
    nb.metadata = metadata  # as committed: the kernel's language_info (its version) is noise in a diff
    return nb, seconds


def pin(paths: list[Path], strip_only: bool = False, timeout: int = 600):
    """Run (unless `strip_only`) and clean each notebook in place; yields one line per notebook."""
    for path in paths:
        if strip_only:
            nb, seconds = nbformat.read(path, as_version=4), None
        else:
            nb, seconds = run(path, timeout)
        nb = strip(nb)
        nbformat.validate(nb)
        nbformat.write(nb, path)
        n, m = sum(pinned(c) for c in nb.cells), sum(snapshot(c) for c in nb.cells)
        ran = "" if seconds is None else f", ran in {seconds:.1f} s"
        yield (f"{path}: {n} pinned cell{'s' * (n != 1)}, {m} snapshot{'s' * (m != 1)}{ran}, "
               f"{path.stat().st_size / 1024:.1f} KiB")


def main(argv: list[str] | None = None) -> None:
    """`python -m teachspec.course.pin ...` is `teachspec pin ...`: the same parser (`teachspec.arguments`)."""
    from teachspec.arguments import run_course

    run_course("pin", command, argv)


def command(args) -> None:
    """`teachspec pin`, its arguments parsed (`teachspec.arguments.pin_arguments`)."""
    for line in pin(args.notebooks, strip_only=args.strip, timeout=args.timeout):
        print(line)


if __name__ == "__main__":
    main()
