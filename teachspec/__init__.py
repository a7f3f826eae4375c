"""teachspec: guessing several tokens at once.

A readable engine for speculative decoding and RadixAttention, with an event log that notebook widgets replay.
The flow is one way: models -> engine -> events -> widgets.

The names below load on first use (PEP 562), so `import teachspec.radix.tree` stays a plain data structure with
no torch behind it, and the command line starts without loading transformers until it needs it. Submodules load
the same way: `import teachspec; teachspec.theory` imports teachspec.theory when it is first asked for.
"""

from importlib import import_module
from importlib.util import find_spec

_EXPORTS = {
    "Engine": "teachspec.engine",
    "EventLog": "teachspec.events",
    "Pair": "teachspec.models.pair",
    "RadixCache": "teachspec.radix.tree",
    "TokenTree": "teachspec.speculative.tree",
    "load_pair": "teachspec.models.pair",
    "set_threads": "teachspec.threads",
    "verify": "teachspec.speculative.verify",
    "verify_tree": "teachspec.speculative.tree",
}

__all__ = sorted(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    # a submodule, such as theory: imported now, and an ordinary attribute of the package from then on
    if name.isidentifier() and not name.startswith("_") and find_spec(f"{__name__}.{name}") is not None:
        return import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'teachspec' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
