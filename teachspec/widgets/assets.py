"""The views' front-end files: plain ES modules and CSS, found on disk and handed to anywidget as text.

The files live at the top of the repository in `widgets/`, where a reader finds them next to the Python package.
An installed wheel carries a copy of them inside the package, in `teachspec/widgets/static/`. `asset_dir()`
looks there first and then in the checkout, so an editable install and a wheel both work.

anywidget loads a view as ONE module from a string, where a relative `import ... from "./helpers.js"` cannot be
resolved. The files stay separate ES modules (so `node --test` can import the pure helpers on their own), and
`module()` joins them in dependency order, dropping the relative imports that the join makes redundant. That is
all the "bundling" there is: no build step, nothing fetched from a network.
"""

from __future__ import annotations

import re
from pathlib import Path

PACKAGED = Path(__file__).parent / "static"           # inside an installed wheel
CHECKOUT = Path(__file__).parents[2] / "widgets"      # the repository's own folder (editable install)

# `import { a, b } from "./helpers.js";`, possibly over several lines: the only imports the views use.
RELATIVE_IMPORT = re.compile(r'^import\s[^;]*?\sfrom\s+"\./[\w.-]+";[ \t]*\n?', re.MULTILINE)


def asset_dir() -> Path:
    """The folder holding the front-end files: the wheel's copy if there is one, else the checkout's."""
    for folder in (PACKAGED, CHECKOUT):
        if (folder / "helpers.js").is_file():
            return folder
    raise FileNotFoundError(f"the widgets' front-end files are missing: looked for helpers.js in {PACKAGED} "
                            f"(an installed wheel) and {CHECKOUT} (a source checkout)")


def read(name: str) -> str:
    path = asset_dir() / name
    if not path.is_file():
        raise FileNotFoundError(f"front-end file {name!r} is not in {path.parent}")
    return path.read_text(encoding="utf-8")


def module(*names: str) -> str:
    """The ES modules `names`, in that order (dependencies first), joined into one module."""
    return "\n".join(f"// ---- {name}\n" + RELATIVE_IMPORT.sub("", read(name)) for name in names)


def stylesheet(*names: str) -> str:
    return "\n".join(read(name) for name in names)
