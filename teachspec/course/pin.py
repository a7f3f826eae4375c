"""Run a course notebook top to bottom and keep what a reader without a kernel needs to see: every output.

A lecture is read on a code-hosting site, on nbviewer, in JupyterLab before its first run and in Binder while the
kernel starts, and there it shows only what its file keeps. So the notebooks are committed with the outputs of one
full run on the bundled pair (the default of every first cell) on two CPU cores, each output cut down to what a
page that runs nothing can show:

    kept      text (stream, text/plain, text/markdown, text/html) and pictures (image/svg+xml, image/png)
    dropped   a widget's model id (it needs the widget's state, megabytes, which is dropped too), a plotly chart's
              JSON (it needs plotly.js), scripts, and a view's HTML player wherever its still picture is there

A chart (teachspec/widgets/charts.py) and a view (teachspec/widgets/base.py) put an SVG of themselves in their
display data for this, and each SVG is kept with a PNG of it beside: JupyterLab draws no SVG in a notebook it does
not trust (any notebook that was not run on this machine), but it draws a PNG; other pages draw the SVG. The answer a `Predict` reveals sits folded in a closed `<details>` (predict.py), and the cell
holding it is marked `outputs_hidden`, so JupyterLab opens its output collapsed too.

What nbval compares: a cell whose source starts with `# NBVAL_CHECK_OUTPUT` is deterministic and seeded (an exact
enumeration, a greedy output checked against plain decoding, a hit rate), and `pytest --nbval-lax` compares a
fresh run against its output. Every other output is a record of the committed run (timings, measured rates) that
nbval runs but does not compare; the lecture's claims (teachspec/course/claims.py) check what it says of them on
every run. The notebook's metadata keeps a hash of its code (`code_hash`), so a test can tell outputs that no
longer belong to the code beside them.

    teachspec pin notebooks/05_radix_attention.ipynb [...]     # run, keep the outputs
    teachspec pin --strip notebooks/*.ipynb                    # only clean what is there, run nothing

Run it with the bundled pair and with the package that the kernel imports being this one (PYTHONPATH=. from a
checkout), on a quiet machine: the outputs it keeps are what every reader sees. It prints each notebook's run time.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import time
from pathlib import Path

import nbformat

from teachspec.widgets.predict import FOLDED

PIN = "# NBVAL_CHECK_OUTPUT"
TEXT = ("text/plain", "text/markdown", "text/html")
IMAGES = ("image/svg+xml", "image/png")   # pictures every renderer shows


def pinned(cell) -> bool:
    return cell.cell_type == "code" and cell.source.lstrip().startswith(PIN)


def code_hash(nb) -> str:
    """A hash of every code cell's source, in order: outputs made by other code than this are stale."""
    code = "\x00".join(c.source for c in nb.cells if c.cell_type == "code")
    return hashlib.sha256(code.encode()).hexdigest()[:16]


def png(svg: str) -> str:
    """The SVG document `svg` drawn as a PNG, base64-encoded as a notebook keeps it (with cairosvg)."""
    try:
        import cairosvg
    except ImportError as e:
        raise RuntimeError("teachspec pin draws each SVG as a PNG too and needs cairosvg for that: pip install "
                           "'teachspec[notebooks]' (and the cairo library: apt-get install libcairo2)") from e
    return base64.b64encode(cairosvg.svg2png(bytestring=svg.encode())).decode()


def readable(out):
    """`out` as a page that runs nothing can show it, or None when nothing of it can be shown there."""
    if out.output_type in ("stream", "error"):
        return out
    data = {kind: out.data[kind] for kind in (*TEXT, *IMAGES) if kind in out.get("data", {})}
    if any(kind in data for kind in IMAGES):
        data.pop("text/html", None)  # a view's player or a chart's page: the still says it without a script
    if "image/svg+xml" in data and "image/png" not in data:
        data["image/png"] = png(data["image/svg+xml"])
    if not data:
        return None
    if out.output_type == "execute_result":
        return nbformat.v4.new_output("execute_result", data=data, execution_count=out.execution_count)
    return nbformat.v4.new_output("display_data", data=data)


def folded(cell) -> bool:
    """Whether one of the cell's outputs is a revealed answer (predict.py's folded <details>)."""
    return any(FOLDED in out.get("data", {}).get("text/html", "") for out in cell.outputs)


def strip(nb):
    """A copy of `nb` whose outputs are cut to what a page that runs nothing shows, with output metadata emptied,
    cells holding a revealed answer collapsed, no saved widget state or per-cell timings, and the code's hash."""
    nb = copy.deepcopy(nb)
    nb.metadata.pop("widgets", None)
    nb.metadata.setdefault("teachspec", {})["code_hash"] = code_hash(nb)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)  # nbclient's per-cell timestamps
        if cell.cell_type != "code":
            continue
        cell.outputs = [kept for kept in map(readable, cell.outputs) if kept is not None]
        jupyter = cell.metadata.get("jupyter", {})
        if folded(cell):
            cell.metadata["jupyter"] = {**jupyter, "outputs_hidden": True}
        elif "outputs_hidden" in jupyter:
            jupyter.pop("outputs_hidden")
            if not jupyter:
                cell.metadata.pop("jupyter")
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
        n = sum(pinned(c) for c in nb.cells)
        shown = sum(bool(c.outputs) for c in nb.cells if c.cell_type == "code")
        ran = "" if seconds is None else f", ran in {seconds:.1f} s"
        yield (f"{path}: {shown} cells with outputs, {n} compared by nbval{ran}, "
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
