"""Argument validation shared by the public API: each error names the parameter, the value and what is allowed."""

from __future__ import annotations

import numbers
import random

_seeds = random.SystemRandom()  # fresh seeds come from here: torch's global random state is the user's own


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


def check_token_ids(name: str, seq) -> list[int]:
    """A list or tuple of token ids, each an int >= 0, as a list; the first bad item is named in the error."""
    if not isinstance(seq, (list, tuple)):
        raise TypeError(f"{name} must be a list of token ids, got {type(seq).__name__}")
    if plain_token_ids(seq):
        return list(seq)
    return [check_int(f"{name}[{i}]", t, 0) for i, t in enumerate(seq)]


def check_seed(seed) -> int:
    """A seed for a torch.Generator: an int in [0, 2**63), or None for a fresh one. A fresh seed never touches torch's
    global generator, so a student's `torch.manual_seed(0)` keeps giving the same numbers around engine calls."""
    if seed is None:
        return _seeds.getrandbits(63)
    seed = check_int("seed", seed, 0)
    if seed >= 2**63:
        raise ValueError(f"seed must be < 2**63 (a torch.Generator's range), got {seed}")
    return seed


def check_prompt(prompt, encode) -> list[int]:
    """A prompt is text (encoded with the tokenizer's special tokens, as `generate` would see it), a list of token
    ids or a 1-D tensor of them; either way it must hold at least one token."""
    if hasattr(prompt, "dim") and hasattr(prompt, "tolist"):  # a tensor, without importing torch here
        if prompt.dim() != 1 or prompt.is_floating_point():
            raise TypeError(f"prompt as a tensor must be 1-D integer token ids, got shape {tuple(prompt.shape)} and "
                            f"dtype {prompt.dtype}")
        prompt = prompt.tolist()
    if isinstance(prompt, str):
        ids = encode(prompt)
    elif isinstance(prompt, (list, tuple)):
        ids = check_token_ids("prompt", prompt)
    else:
        raise TypeError(f"prompt must be a string, a list of token ids or a 1-D tensor of them, got "
                        f"{type(prompt).__name__}")
    if not ids:
        raise ValueError("prompt is empty: give at least one token of text to continue")
    return ids


def check_context(prompt_tokens: int, max_new_tokens: int, context: int) -> None:
    if prompt_tokens + max_new_tokens > context:
        raise ValueError(f"the prompt ({prompt_tokens} tokens) plus max_new_tokens={max_new_tokens} exceeds the "
                         f"model's context of {context} tokens; shorten the prompt or ask for fewer tokens")
