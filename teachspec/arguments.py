"""The command line's own pieces, below both the `teachspec` command and the course tools it runs.

`teachspec student`, `teachspec traces` and `teachspec pin` are also `python -m teachspec.course.student` (and
`.traces`, `.pin`). Both ways build the same parser from here, so a course tool never calls back into
`teachspec.cli`, and the command line imports a course tool only once its command runs. Nothing heavy is imported:
argument types check a value and say what is allowed, in one line (`Parser`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


class Parser(argparse.ArgumentParser):
    """argparse, with a mistake reported in one line (no usage block): `teachspec NAME: error: ...`, status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")




def whole(minimum: int):
    """A whole number >= minimum."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value
    return parse




def notebook(value: str) -> Path:
    """A notebook file that nbformat can read."""
    path = Path(value)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{value!r} is not a file")
    if path.suffix != ".ipynb":
        raise argparse.ArgumentTypeError(f"{value!r} is not a notebook (.ipynb)")
    import nbformat  # here, not above: only the commands that take a notebook pay for it

    try:
        nbformat.read(path, as_version=4)
    except Exception as e:  # not JSON, or JSON that is not a notebook (jsonschema's ValidationError)
        raise argparse.ArgumentTypeError(f"{value!r} is not a readable notebook: {str(e).splitlines()[0]}") from None
    return path


def new_file(value: str) -> Path:
    """A file to write: its folder must exist already, so a long run does not fail at its very end."""
    path = Path(value)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{value!r} is a folder; give a file name")
    if not path.resolve().parent.is_dir():
        raise argparse.ArgumentTypeError(f"the folder of {value!r} does not exist")
    return path


# -- the commands a course module also runs on its own ------------------------------------------------------------

def student_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("solution", type=notebook, help="the solution notebook")
    ap.add_argument("-o", "--out", type=new_file, default=None,
                    help="where to write it (default: student/<name>.ipynb in the current folder); never the "
                         "solution itself nor a file among the sources")
    ap.add_argument("--force", action="store_true", help="overwrite OUT if it exists (never the solution)")


def traces_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--pair", default="tiny", help="tiny (default), smollm2, qwen2.5, or config (testing only)")
    ap.add_argument("--out", type=Path, default=Path("traces"),
                    help="the folder to write them into (default: traces/ in the current folder)")
    ap.add_argument("--threads", type=whole(1), default=None, help="CPU threads for torch (default: the policy)")


def pin_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("notebooks", nargs="+", type=notebook, help="the notebooks, rewritten in place")
    ap.add_argument("--strip", action="store_true", help="only clean the notebooks, without running them")
    ap.add_argument("--timeout", type=whole(1), default=600, help="seconds a cell may run (default 600)")


# name -> (the line the command list shows, the arguments)
COURSE = {
    "student": ("write the student version of an assignment (solutions out)", student_arguments),
    "traces": ("re-record the traces the notebooks replay", traces_arguments),
    "pin": ("run notebooks top to bottom and keep every output a page that runs nothing can show", pin_arguments),
}


def description(help: str) -> str:
    """A command's --help opens with the line the command list shows for it."""
    return help[0].upper() + help[1:] + "."


def course_parser(name: str) -> Parser:
    """The parser of `teachspec NAME` for a course tool run on its own (`python -m teachspec.course.NAME`)."""
    help, arguments = COURSE[name]
    ap = Parser(prog=f"teachspec {name}", description=description(help))
    arguments(ap)
    return ap


def run_course(name: str, command, argv: list[str] | None = None) -> None:
    """`python -m teachspec.course.NAME ...`: parse as `teachspec NAME` does, run `command(args)`, and end a
    mistake the parser could not see (a missing model, ...) as the command line does, in one line, status 2."""
    ap = course_parser(name)
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        command(args)
    except KeyboardInterrupt:
        ap.exit(130, f"{ap.prog}: interrupted\n")
    except (ValueError, TypeError, OSError) as e:
        ap.exit(2, f"{ap.prog}: error: {' '.join(str(e).split())}\n")
