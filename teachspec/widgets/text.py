"""Words for the views: the decoded text of token ids, and a one-line description of an event.

The event log stores token ids, never text, so a trace replays without a tokenizer. A view given a `decode`
(a tokenizer, a Pair, or any function from a list of ids to a string) shows text; without one it shows ids.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable

from teachspec.events import Event

Decode = Callable[[list[int]], str]


class TokenText:
    """Text of token ids through `decode`, cached per single token; every answer is None without a decoder."""

    def __init__(self, decode: Decode | Any | None = None):
        if decode is not None and not callable(decode):
            decode = getattr(decode, "decode", None)  # a tokenizer or a Pair: use its .decode
            if not callable(decode):
                raise TypeError("decode must be a function from a list of token ids to a string, or an object "
                                "with such a .decode method (a tokenizer, a Pair), or None to show ids")
        self._decode = decode
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
        if isinstance(value, list):
            shown = ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in value[:8])
            value = f"[{shown}{f', ... {len(value)} in all' if len(value) > 8 else ''}]"
        elif isinstance(value, float):
            value = f"{value:.4g}"
        parts.append(f"{f.name}={value}")
    name = f"{type(event).__name__}({', '.join(parts)})"
    return name if index is None else f"event {index} {name}"
