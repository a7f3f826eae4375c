"""Binder builds an environment that can run every notebook: each distribution a notebook imports is pinned in
binder/requirements.txt (teachspec itself is installed --no-deps by postBuild, so its own dependencies must be
there too), CPU torch, graphviz from apt."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
BINDER = ROOT / "binder"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements() -> dict[str, str]:
    out = {}
    for line in (BINDER / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            name, _, version = line.partition("==")
            out[_norm(name)] = version
    return out


def _notebook_imports() -> set[str]:
    modules = set()
    for path in (ROOT / "notebooks").rglob("*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "code":
                continue
            source = "\n".join(l for l in cell.source.splitlines() if not l.lstrip().startswith(("%", "!")))
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Import):
                    modules |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    modules.add(node.module.split(".")[0])
    return modules


def _distributions(module: str) -> list[str]:
    return md.packages_distributions().get(module, [])


def test_every_notebook_import_is_pinned():
    pinned = _requirements()
    missing = []
    for module in sorted(_notebook_imports()):
        if module in sys.stdlib_module_names or module == "teachspec":
            continue
        dists = _distributions(module)
        assert dists, f"notebooks import {module!r}, which no installed distribution provides"
        if not any(_norm(d) in pinned for d in dists):
            missing.append(f"{module} ({', '.join(dists)})")
    assert not missing, f"binder/requirements.txt does not name: {missing}"


def test_teachspec_own_dependencies_are_pinned():
    pinned = _requirements()
    for req in md.requires("teachspec") or []:
        if "extra ==" in req:
            continue
        name = _norm(re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0])
        assert name in pinned, f"teachspec depends on {name}, which binder/requirements.txt does not pin"


def test_pins_are_exact_and_torch_is_the_cpu_build():
    text = (BINDER / "requirements.txt").read_text()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in text
    assert all(v for v in _requirements().values()), "pin every requirement with == so Binder can cache it"
    assert _requirements()["torch"].endswith("+cpu")


def test_apt_and_post_build():
    assert "graphviz" in (BINDER / "apt.txt").read_text().split()
    post = (BINDER / "postBuild").read_text()
    assert post.startswith("#!") and "set -e" in post
    assert re.search(r"pip install .*--no-deps (-e )?\.", post), "postBuild must install teachspec itself, --no-deps"
    assert (BINDER / "postBuild").stat().st_mode & 0o111, "postBuild must be executable"
