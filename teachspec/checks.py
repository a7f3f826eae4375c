"""Input checks shared by the public API: each error names the parameter, the value and what is allowed."""

from __future__ import annotations

import numbers


def check_int(name: str, value, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def plain_token_ids(seq) -> bool:
    """True when every item is a plain non-negative int: the usual case, checked in one pass at C speed, so the
    per-item checks with their precise messages only run when something is off (long prompts pass here often)."""
    return set(map(type, seq)) <= {int} and (not len(seq) or min(seq) >= 0)


def check_prompt(prompt, encode) -> list[int]:
    """A prompt is text or a list of token ids; either way it must hold at least one token."""
    if isinstance(prompt, str):
        ids = encode(prompt)
    elif isinstance(prompt, (list, tuple)) and plain_token_ids(prompt):
        ids = list(prompt)
    elif isinstance(prompt, (list, tuple)):
        ids = [check_int(f"prompt[{i}]", t, 0) for i, t in enumerate(prompt)]
    else:
        raise TypeError(f"prompt must be a string or a list of token ids, got {type(prompt).__name__}")
    if not ids:
        raise ValueError("prompt is empty: give at least one token of text to continue")
    return ids


def check_context(prompt_tokens: int, max_new_tokens: int, context: int) -> None:
    if prompt_tokens + max_new_tokens > context:
        raise ValueError(f"the prompt ({prompt_tokens} tokens) plus max_new_tokens={max_new_tokens} exceeds the "
                         f"model's context of {context} tokens; shorten the prompt or ask for fewer tokens")
