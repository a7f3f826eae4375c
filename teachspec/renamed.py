"""Names that changed, kept working for one release: the old name still answers, and says what to use instead.

A module lists what it renamed, old -> new, and hands `old_names` its module-level `__getattr__` (PEP 562), which
Python calls only for a name the module does not define:

    __getattr__ = old_names(__name__, {"Request": "Job"}, globals())

A class attribute renamed gets a property that warns the same way (`Engine.tree` for `Engine.radix`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any


def said(old: str, new: str) -> None:
    """Warn once per place that `old` is now `new`, for the caller's caller (the code that used the old name)."""
    warnings.warn(f"{old} is now {new}; the old name goes in the next release", DeprecationWarning, stacklevel=3)


def old_names(module: str, renamed: dict[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module `__getattr__` answering each old name of `renamed` with its new one's value, and a warning."""
    def __getattr__(name: str) -> Any:
        if name in renamed:
            said(f"{module}.{name}", f"{module}.{renamed[name]}")
            return namespace[renamed[name]]
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    return __getattr__
