"""The tests' own floor plan: each test module sits in the folder of the part of the package it tests
(tests/speculative/, tests/radix/, tests/widgets/, tests/course/, ...: README.md, "Tests"), none directly in tests/;
no test module imports another, at its top or inside a function (what two of them share is in tests/helpers/, their
fixtures in a conftest.py); none imports a conftest.py (there is one per folder that has fixtures, and all are named
`conftest`, so the one an import finds depends on which folder pytest collected last); and no two test modules share
a file name (pytest imports a test module that is not in a package by its bare name, so a second `test_x.py` would
fail to collect)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
IMPORTERS = ("import_module", "__import__")  # importlib.import_module("test_x"), __import__("test_x")


def modules_under(tests: Path) -> list[Path]:
    """Every test module under `tests`, however deep."""
    return sorted(tests.rglob("test_*.py"))


def imported(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every module `path` imports, anywhere in it: its top, a function's body, a string given to
    importlib.import_module or __import__."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.module:  # from test_x import y: the module is test_x
                found.append((node.lineno, node.module))
            else:  # from . import test_x: the names are modules
                found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name in IMPORTERS:
                found.append((node.lineno, node.args[0].value))
    return found


def problems(tests: Path) -> list[str]:
    """What breaks the floor plan under the folder `tests`, one line each (none: it holds)."""
    found = [f"{path.relative_to(tests.parent)}: a test module directly in {tests.name}/; move it into the folder of "
             "the part of the package it tests" for path in sorted(tests.glob("test_*.py"))]
    by_name: dict[str, list[Path]] = {}
    for path in modules_under(tests):
        by_name.setdefault(path.name, []).append(path)
    for name, paths in sorted(by_name.items()):
        if len(paths) > 1:
            found.append(f"{name}: {len(paths)} test modules share the name "
                         f"({', '.join(str(p.relative_to(tests.parent)) for p in paths)}); pytest imports each by it")
    for path in sorted(tests.rglob("*.py")):  # test modules, conftest.py files and helpers alike
        where = path.relative_to(tests.parent)
        for line, module in imported(path):
            last = module.rsplit(".", 1)[-1]
            if last.startswith("test_"):
                found.append(f"{where}:{line}: imports the test module {module}; move what it needs into "
                             f"{tests.name}/helpers/ (a fixture: into a conftest.py)")
            elif last == "conftest":
                found.append(f"{where}:{line}: imports {module}; move what it needs into {tests.name}/helpers/")
    return found


def test_every_test_module_is_in_its_folder_and_imports_no_other():
    modules = modules_under(TESTS)
    assert len(modules) > 60 and {p.parent.name for p in modules} >= {"speculative", "radix", "widgets", "course"}
    found = problems(TESTS)
    assert not found, "\n".join(found)


def test_the_layout_check_finds_each_way_to_break_it(tmp_path):
    tests = tmp_path / "tests"
    files = {
        "test_loose.py": "",
        "speculative/test_one.py": "from test_two import helper\n",
        "radix/test_two.py": "def test_it():\n    import test_one as other\n",
        "radix/test_three.py": "import importlib\n\nmodule = importlib.import_module('test_one')\n",
        "widgets/test_one.py": "",
        "course/test_four.py": "from conftest import build_model\n",
        "helpers/pairs.py": "from speculative.test_one import PROMPT\n",
        # what is allowed: helpers, a folder's own fixtures, and a *function* whose name starts with test_
        "course/test_fine.py": "from helpers.pairs import make_pair\nfrom teachspec.course.harness import test_x\n",
        "conftest.py": "import pytest\nfrom helpers.models import save_model\n",
    }
    for name, text in files.items():
        (tests / name).parent.mkdir(parents=True, exist_ok=True)
        (tests / name).write_text(text)
    found = problems(tests)
    expected = [
        "tests/test_loose.py: a test module directly in tests/",
        "test_one.py: 2 test modules share the name (tests/speculative/test_one.py, tests/widgets/test_one.py)",
        "tests/speculative/test_one.py:1: imports the test module test_two",
        "tests/radix/test_two.py:2: imports the test module test_one",  # inside a function
        "tests/radix/test_three.py:3: imports the test module test_one",  # by importlib
        "tests/course/test_four.py:1: imports conftest",
        "tests/helpers/pairs.py:1: imports the test module speculative.test_one",
    ]
    for start in expected:
        assert sum(line.startswith(start) for line in found) == 1, (start, found)
    assert len(found) == len(expected), found  # test_fine.py and conftest.py hold
    for name in ("test_loose.py", "speculative/test_one.py", "radix/test_two.py", "radix/test_three.py",
                 "widgets/test_one.py", "course/test_four.py", "helpers/pairs.py"):
        (tests / name).unlink()
    assert problems(tests) == []
