"""The calls of the language: what a program asks for, checked on the line that asks.

A call is a small record made inside the program (`gen(...)`, `select(...)`, `user(...)`) and run when it is
added to a state with `s += call`. Making a call checks its arguments and remembers the program line it was
written on, so a mistake is reported there, before the state changes:

    ProgramError: select('answer', choices=[]) at classify line 4: choices must be a non-empty list of distinct
    non-empty strings, got []

The roles lay a chat out the way `teachspec.chat.Chat` does, so a program's turns and a `Chat`'s share their
prefixes in the radix tree: with the tokenizer's chat template when it has one (each turn's opening and closing
as the template renders them, `teachspec.templates.marks`), else as plain text, as
`teachspec.workloads.chat_prompt` does too:

    system text "\\n\\nUser: " message "\\nAssistant:" reply "\\n\\nUser: " ...

(the first "\\n\\n" is left out when the state is empty, and a model's reply after "Assistant:" starts with a
space).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from teachspec.sampling import SamplingParams

ROLES = {"system": "", "user": "User: ", "assistant": "\nAssistant:"}  # what opens each role's turn


class ProgramError(Exception):
    """A call of a program failed: the message names the call, the program line and what went wrong."""

    def __init__(self, call: str, where: "Where", message: str):
        super().__init__(f"{call} at {where}: {message}")
        self.call, self.where = call, where


@dataclass(frozen=True, slots=True)
class Where:
    """The line of the program that made a call."""
    function: str
    line: int
    file: str

    def __str__(self) -> str:
        return f"{self.function} line {self.line}"


def caller(depth: int = 1) -> Where:
    """Where the function `depth` frames up the stack from the caller of `caller` is."""
    frame = sys._getframe(depth + 1)
    return Where(frame.f_code.co_name, frame.f_lineno, frame.f_code.co_filename)


def signature(function: str, *args, **kwargs) -> str:
    """How a call reads in the program, for error messages: select('answer', choices=[])."""
    return f"{function}({', '.join([repr(a) for a in args] + [f'{k}={v!r}' for k, v in kwargs.items()])})"


def _check_name(call: str, where: Where, name) -> None:
    if not isinstance(name, str) or not name:
        raise ProgramError(call, where, f"name must be a non-empty string (the variable to set), got {name!r}")


# -- the calls ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Gen:
    """The model continues the state; its text goes into the variable `name`."""
    name: str
    max_tokens: int
    stop: tuple[str, ...]
    params: SamplingParams
    call: str
    where: Where


@dataclass(frozen=True, slots=True)
class Select:
    """The target picks the choice that ranks highest under `choices_method` (CHOICES_METHODS)."""
    name: str
    choices: tuple[str, ...]
    choices_method: str
    call: str
    where: Where


# What select ranks a choice by, from its tokens' log-probabilities after the state (one per token, program/score.py):
#   sum                      log p(choice | state), the probability of the whole choice. Every token multiplies in
#                            one more probability below 1, so the sum leans towards short choices. teachspec's default.
#   token_length_normalized  that sum over the number of tokens, the mean per token: SGLang's default
#                            (`sgl.token_length_normalized`). No lean to short choices, but a long choice whose later
#                            tokens follow almost surely from its first can win on them.
CHOICES_METHODS = {
    "sum": lambda logprobs: sum(logprobs),
    "token_length_normalized": lambda logprobs: sum(logprobs) / len(logprobs),
}


def check_choices_method(choices_method) -> str:
    """The name itself if it is one of CHOICES_METHODS; a ValueError naming the allowed ones otherwise."""
    if not isinstance(choices_method, str) or choices_method not in CHOICES_METHODS:
        raise ValueError(f"choices_method must be one of {list(CHOICES_METHODS)}, got {choices_method!r}")
    return choices_method


@dataclass(frozen=True, slots=True)
class Role:
    """A chat turn: its opening, then its parts (text and calls) in order."""
    role: str
    parts: tuple
    call: str
    where: Where


GEN_DEFAULTS = dict(max_tokens=16, stop=None, temperature=0.0, top_k=None, top_p=None)


def gen(name: str, max_tokens: int = 16, stop: str | list[str] | None = None, temperature: float = 0.0,
        top_k: int | None = None, top_p: float | None = None) -> Gen:
    """Generate up to `max_tokens` tokens into the variable `name`, cut before the first `stop` string.

    The engine decodes (speculating as `run` says) until an EOS id, a stop string or `max_tokens`; the text is
    then cut before the first stop string, and only what is kept joins the state (the EOS token never does).
    Greedy by default."""
    asked = dict(max_tokens=max_tokens, stop=stop, temperature=temperature, top_k=top_k, top_p=top_p)
    call = signature("gen", name, **{k: v for k, v in asked.items() if v != GEN_DEFAULTS[k]})  # as written
    where = caller()
    _check_name(call, where, name)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ProgramError(call, where, f"max_tokens must be an int >= 1, got {max_tokens!r}")
    stops = (stop,) if isinstance(stop, str) else tuple(stop) if isinstance(stop, (list, tuple)) else stop
    if stops is not None and (not all(isinstance(s, str) and s for s in stops)):
        raise ProgramError(call, where, f"stop must be a non-empty string, a list of them, or None, got {stop!r}")
    try:
        params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    except ValueError as e:
        raise ProgramError(call, where, str(e)) from None
    return Gen(name, max_tokens, stops or (), params, call, where)


def select(name: str, choices: list[str], choices_method: str = "sum") -> Select:
    """Append the choice the target finds likeliest after the state, and set the variable `name` to it.

    Each choice is scored as a continuation of the same state (`program.score.score`): the state is computed once
    and every choice reuses it from the radix tree. Write choices as they would follow the text, usually with their
    leading space: [" yes", " no"]. `choices_method` says what ranks them (CHOICES_METHODS): "sum", the summed
    log-probability of the choice's tokens (the default), or "token_length_normalized", their mean, SGLang's
    default. The two agree whenever the choices have the same number of tokens."""
    default = isinstance(choices_method, str) and choices_method == "sum"
    call = signature("select", name, choices=choices, **({} if default else {"choices_method": choices_method}))
    where = caller()
    _check_name(call, where, name)
    if (not isinstance(choices, (list, tuple)) or not choices
            or not all(isinstance(c, str) and c for c in choices) or len(set(choices)) != len(choices)):
        raise ProgramError(call, where, f"choices must be a non-empty list of distinct non-empty strings, got "
                                        f"{choices!r}")
    try:
        check_choices_method(choices_method)
    except ValueError as e:
        raise ProgramError(call, where, str(e)) from e
    return Select(name, tuple(choices), choices_method, call, where)


def _role(role: str, parts: tuple) -> Role:
    call, where = signature(role, *parts), caller(2)
    for part in parts:
        if not isinstance(part, (str, Gen, Select)):
            raise ProgramError(call, where, f"a {role} turn holds text, gen(...) and select(...), got "
                                            f"{type(part).__name__} {part!r}")
    return Role(role, parts, call, where)


def system(*parts: str | Gen | Select) -> Role:
    """The system text at the start of a chat (the template's system turn, when it has one)."""
    return _role("system", parts)


def user(*parts: str | Gen | Select) -> Role:
    """A user's turn: the chat template's user turn, or "User: " and the message."""
    return _role("user", parts)


def assistant(*parts: str | Gen | Select) -> Role:
    """The assistant's turn, the reply usually gen(...): the template's, or "\\nAssistant:" and the reply."""
    return _role("assistant", parts)
