"""The package's floor plan, pinned: layers that import only downwards, and no class (nor list a reader looks up by
name) defined in two modules (README.md, "Where things live", draws the layers).

The layers, lowest first; a module may import its own layer and the ones below, never one above:

    0  validate, renamed, events, device, threads, busy, stats, theory, sampling, stopping, templates, hub, kv
    1  models                      the pairs, their loading, the EAGLE head
    2  speculative, radix, routing, workloads
    3  speculate, request          the registry of drafters, one request's state
    4  engine, decode              speculative and plain decoding
    5  chat, program
    6  serving                     vLLM, watched
    7  widgets                     the views of the event log
    8  course, bench, demo, arguments
    9  cli, tools                  the command line; the scripts that train and measure the bundled pair
"""

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[2] / "teachspec"

LAYERS = [
    {"validate", "renamed", "events", "device", "threads", "busy", "stats", "theory", "sampling", "stopping",
     "templates", "hub", "kv"},
    {"models"},
    {"speculative", "radix", "routing", "workloads"},
    {"speculate", "request"},
    {"decode", "engine"},
    {"chat", "program"},
    {"serving"},
    {"widgets"},
    {"course", "bench", "demo", "arguments"},
    {"cli", "tools"},
]


def module_name(path: Path, package: Path) -> str:
    return ".".join(path.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__")


def imports(path: Path, package: Path) -> set[str]:
    """The package's modules that `path` imports, at its top or inside a function."""
    name = module_name(path, package)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or node.level):
            base = node.module if node.level == 0 else ".".join(name.split(".")[:-node.level] +
                                                                 ([node.module] if node.module else []))
            found |= {base} | {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m.startswith(package.name + ".")} - {name}


def part(module: str) -> str | None:
    """The top-level part of the package a module belongs to (None: the package's own __init__)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def arrows_up(package: Path, layers: list[set[str]]) -> tuple[set[str], list[tuple[str, str]]]:
    """(the parts no layer places, every import from a lower layer's module into a higher one's)."""
    level = {p: i for i, layer in enumerate(layers) for p in layer}
    modules = {module_name(p, package): p for p in package.rglob("*.py")}
    unplaced = {part(m) for m in modules} - set(level) - {None}
    up = []
    for m, path in sorted(modules.items()):
        if part(m) is None or part(m) not in level:
            continue
        for i in sorted(imports(path, package)):
            if i in modules and part(i) in level and level[part(i)] > level[part(m)]:
                up.append((m, i))
    return unplaced, up


def test_every_part_of_the_package_has_a_layer_and_imports_only_downwards():
    unplaced, up = arrows_up(PACKAGE, LAYERS)
    assert not unplaced, f"parts of the package in no layer: {sorted(unplaced)}"
    assert not up, f"imports that run up the layers: {up}"


def test_the_layer_check_finds_an_arrow_up(tmp_path):
    package = tmp_path / "teachspec"
    (package / "models").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "models" / "__init__.py").write_text("")
    (package / "engine.py").write_text("from teachspec.models import pair\n")
    (package / "models" / "card.py").write_text("def measure():\n    from teachspec.engine import Engine\n")
    _, up = arrows_up(package, [{"models"}, {"engine"}])
    assert up == [("teachspec.models.card", "teachspec.engine")]
    unplaced, _ = arrows_up(package, [{"models"}])
    assert unplaced == {"engine"}


def defined(package: Path) -> dict[str, list[str]]:
    """Each public class defined at a module's top level, and each name of `ONE_MEANING` however defined -> the
    modules defining it. Functions are left out (`run`, `read` and `markdown` are verbs each module may have of its
    own), and so are a module's own constants (where its files are, its limits)."""
    out: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name) and t.id in ONE_MEANING]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id] if node.target.id in ONE_MEANING else []
            else:
                names = []
            for name in names:
                if not name.startswith("_"):
                    out.setdefault(name, []).append(module_name(path, package))
    return out


# The lists a reader looks up by name: each is defined once, and read from there.
ONE_MEANING = {"POLICIES", "SCHEDULES", "EVICTION", "DRAFTERS", "SERVED", "SPECULATE", "HUB_PAIRS", "BUNDLED",
               "TREE_NAMES", "MAX_TREE_NODES"}


def test_no_class_and_no_list_means_two_things():
    twice = {name: where for name, where in defined(PACKAGE).items() if len(where) > 1}
    assert not twice, f"defined in more than one module: {twice}"


def test_the_name_check_finds_a_name_defined_twice(tmp_path):
    package = tmp_path / "teachspec"
    package.mkdir()
    (package / "a.py").write_text("class Request:\n    pass\nPOLICIES = {}\nLIMIT = 1\n")
    (package / "b.py").write_text("from dataclasses import dataclass\n@dataclass\nclass Request:\n    x: int\n"
                                  "POLICIES = ()\nLIMIT = 2\nrun = 1\n")
    found = {n: w for n, w in defined(package).items() if len(w) > 1}
    assert found == {"Request": ["teachspec.a", "teachspec.b"], "POLICIES": ["teachspec.a", "teachspec.b"]}


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
