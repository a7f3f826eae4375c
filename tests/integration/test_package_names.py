"""The package's own names: submodules such as teachspec.theory resolve on first use, as the README writes them."""

from __future__ import annotations

import subprocess
import sys

import pytest


def fresh(code: str) -> str:
    """Run `code` in a new interpreter, so nothing imported by other tests can make it pass."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_a_submodule_is_an_attribute_of_the_package_once_asked_for():
    """The issue's repro: `import teachspec; teachspec.theory` raised AttributeError."""
    out = fresh("import sys, teachspec; before = 'teachspec.theory' in sys.modules; theory = teachspec.theory; "
                "print(before, theory is sys.modules['teachspec.theory'], callable(theory.speedup))")
    assert out == "False True True"  # not loaded by `import teachspec`: loaded when asked for


def test_the_tree_still_loads_without_torch():
    assert fresh("import sys, teachspec.radix.tree; print('torch' in sys.modules)") == "False"


@pytest.mark.parametrize("name", ["no_such_module", "_private", "radix.tree"])
def test_other_names_are_still_attribute_errors(name):
    import teachspec
    with pytest.raises(AttributeError, match=f"module 'teachspec' has no attribute '{name}'"):
        getattr(teachspec, name)
