"""When a generation ends: transformers' stop rules, checked token by token along a run of new tokens.

transformers' `generate` stops after the first token that

- is one of the end-of-sequence ids: the model's `generation_config.eos_token_id`, one id or a list (Llama 3 and
  Qwen2.5 instruct models stop on an end-of-turn id as well as on the end of text), or
- completes a stop string (`stop_strings=`, its `StopStringCriteria`): the string appears in the text and overlaps
  the newest token, so a string that was already in the prompt never stops anything by itself.

The token that stops is kept; nothing after it is. Plain decoding checks one token a step. Speculation commits a
run of up to k + 1 tokens a step, so the rule walks that run in order: the first token that stops ends the output
there, and the accepted guesses after it are dropped exactly as rejected ones are (the engine crops both models'
caches to the committed tokens, and only committed tokens reach the radix tree). The output is thus token for token
what `generate(..., eos_token_id=..., stop_strings=...)` returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from teachspec.validate import check_int


def eos_ids(eos) -> frozenset[int]:
    """One id, a list of ids or None (never stop early), as a set."""
    if eos is None:
        return frozenset()
    if isinstance(eos, int) and not isinstance(eos, bool):
        return frozenset([check_int("eos_token_id", eos, 0)])
    if isinstance(eos, Iterable) and not isinstance(eos, (str, bytes)):
        return frozenset(check_int(f"eos_token_id[{i}]", t, 0) for i, t in enumerate(eos))
    raise TypeError(f"eos_token_id must be a token id, a list of token ids or None, got {eos!r}")


def stop_strings(stop) -> tuple[str, ...]:
    """`stop=` as a tuple of non-empty strings: None, one string, or a list of them."""
    if stop is None:
        return ()
    items = [stop] if isinstance(stop, str) else stop
    if not isinstance(items, (list, tuple)):
        raise TypeError(f"stop must be a string or a list of strings, got {stop!r} ({type(stop).__name__})")
    for i, s in enumerate(items):
        if not isinstance(s, str) or not s:
            raise ValueError(f"stop[{i}] must be a non-empty string, got {s!r}")
    return tuple(items)


@dataclass(frozen=True)
class StopRule:
    """The eos ids and stop strings of one request; `decode` turns token ids into text (the tokenizer's)."""

    eos: frozenset[int] = frozenset()
    strings: tuple[str, ...] = ()
    decode: Callable[[list[int]], str] | None = None

    def __post_init__(self):
        if self.strings and self.decode is None:
            raise ValueError("stop strings need a decode function (token ids -> text) to be found in the text")

    def check(self, ids: list[int], new: list[int]) -> tuple[int, str | None]:
        """Of the run `new` that follows the committed `ids`: how many tokens to keep, and why the generation
        stops after them ("eos" or "stop"), or (len(new), None) when nothing in the run stops it."""
        for j, token in enumerate(new):
            if token in self.eos:
                return j + 1, "eos"
            if self.strings and self._completes_a_string(ids, new, j):
                return j + 1, "stop"
        return len(new), None

    def _completes_a_string(self, ids: list[int], new: list[int], j: int) -> bool:
        # Only the last few tokens can matter: a string of n characters spans at most n tokens (each token is at
        # least one character; a few more cover characters split over byte-level tokens).
        window = max(map(len, self.strings)) + 4
        tail = (ids[-window:] + new[:j + 1])[-window:]
        before, text = self.decode(tail[:-1]), self.decode(tail)
        # a string stops the generation when it ends inside the newest token's text (it overlaps that token):
        # it then starts no earlier than len(before) - len(s) + 1
        return any(text.find(s, max(0, len(before) - len(s) + 1)) >= 0 for s in self.strings)
