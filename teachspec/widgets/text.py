"""Words for the views: the decoded text of token ids, and a one-line description of an event.

The event log stores token ids, never text, so a trace replays without a tokenizer. A view given a `decode`
shows text; without one it shows ids. `decoder` accepts, in this order:

    an object with a .decode method   a transformers tokenizer or a Pair (a tokenizer is also callable, but calling
                                      it *encodes*, so .decode is looked for first)
    a function                        from a list of ids to a string
    a pair's name                     "tiny" (the bundled pair) or a course pair such as "smollm2": its tokenizer
                                      is loaded; so is a tokenizer's folder or hub id

and, with no `decode`, the view's `pair=` (a Pair or a name), then the log's own `pair` attribute, which a log
that knows which pair recorded it may carry. With none of them the view shows ids.
"""

from __future__ import annotations

from dataclasses import fields
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from teachspec.events import Event

Decode = Callable[[list[int]], str]


def decoder(decode: Any = None, pair: Any = None, log: Any = None) -> Decode | None:
    """A function from token ids to text, from the first of `decode`, `pair` and `log.pair` given (see above)."""
    recorded = getattr(log, "pair", None)
    for source in (decode, pair, recorded):
        if source is None:
            continue
        if source is recorded and decode is None and pair is None:
            return _recorded(recorded)
        if isinstance(source, (str, Path)):
            return _tokenizer(str(source)).decode
        method = getattr(source, "decode", None)
        if callable(method):  # a tokenizer or a Pair; checked before callable(): calling a tokenizer encodes
            return method
        if callable(source):
            return source
        raise TypeError(f"decode must be a function from a list of token ids to a string, an object with such a "
                        f".decode method (a tokenizer, a Pair), a pair's name such as 'tiny', or None to show ids; "
                        f"got {type(source).__name__}")
    return None


def _recorded(name: Any) -> Decode | None:
    """The tokenizer of the pair a trace says made it, when that pair is one this package knows and it loads here;
    otherwise None (the view shows token ids): a replay never fails for want of a tokenizer."""
    from teachspec.models import BUNDLED, HUB_PAIRS

    if not isinstance(name, str) or name not in {*BUNDLED, *HUB_PAIRS}:
        return None
    try:
        return _tokenizer(name).decode
    except (OSError, ValueError):
        return None


@lru_cache(maxsize=8)
def _tokenizer(name: str):
    """The tokenizer of a pair named `name`, or in the folder or hub repository `name`."""
    from transformers import AutoTokenizer

    from teachspec.models import BUNDLED, HUB_PAIRS
    if name in BUNDLED:
        return AutoTokenizer.from_pretrained(BUNDLED[name])
    if name in HUB_PAIRS:
        return AutoTokenizer.from_pretrained(HUB_PAIRS[name][0])
    if Path(name).is_dir() or "/" in name:
        return AutoTokenizer.from_pretrained(name)
    raise ValueError(f"no pair named {name!r}: use one of {sorted([*BUNDLED, *HUB_PAIRS])}, a tokenizer's folder "
                     f"or hub id, or pass the tokenizer itself")


class TokenText:
    """Text of token ids through `decode`, cached per single token; every answer is None without a decoder."""

    def __init__(self, decode: Decode | Any | None = None):
        self._decode = decoder(decode)
        self._cache: dict[int, str] = {}

    def __bool__(self) -> bool:
        return self._decode is not None

    def one(self, token: int) -> str | None:
        if self._decode is None:
            return None
        if token not in self._cache:
            self._cache[token] = self._decode([token])
        return self._cache[token]

    def many(self, tokens: list[int]) -> str | None:
        # decoded together, not token by token: a character split over two byte-level tokens comes out whole
        return None if self._decode is None else self._decode(list(tokens))

    def top(self, pairs: list | None) -> list | None:
        """[[token, probability], ...] from an event, as [[token, probability, text], ...] for the front end."""
        if pairs is None:
            return None
        return [[int(t), round(float(p), 5), self.one(int(t))] for t, p in pairs]


def describe(event: Event, index: int | None = None) -> str:
    """`event 12 Evict(node=4, parent=1, tokens=3)`: the event's kind and fields, for captions and errors."""
    parts = []
    for f in fields(event):
        if f.name in ("t", "request") or f.name.startswith("top_"):
            continue
        value = getattr(event, f.name)
        if value is None:  # an optional field left out (a Match's proposed, one server's replica): nothing to say
            continue
        if isinstance(value, list):
            shown = ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in value[:8])
            value = f"[{shown}{f', ... {len(value)} in all' if len(value) > 8 else ''}]"
        elif isinstance(value, float):
            value = f"{value:.4g}"
        parts.append(f"{f.name}={value}")
    name = f"{type(event).__name__}({', '.join(parts)})"
    return name if index is None else f"event {index} {name}"
