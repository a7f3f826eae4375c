"""The state of a running program: token ids, text and variables. `s += call` runs the call on the engine.

A state keeps token ids, not only text, as `teachspec.chat.Chat` does: appended text is encoded once, generated
tokens are kept as the model made them, and a chosen choice keeps the ids it was scored with. So every call's
prompt is the previous call's prompt plus what came since, token for token, and the radix tree serves all of it
but the new part. Re-encoding the whole text before each call could split the old part differently at a seam
(a byte-level BPE tokenizes "\\n\\n" + "Question" differently from "\\n\\nQuestion"), and the tree would then
see a different prefix.

    s += "text"        encode the text, append its ids
    s += gen(...)      engine.generate(s.ids, ...): the same speculative loop and radix cache as any request
    s += select(...)   score(engine, s.ids, choices): every choice reuses the state's KV; the likeliest is appended
                       (by summed log p, or its mean per token: select's choices_method)
    s.fork(n)          n states that start as copies of this one; their calls share its prefix in the tree
    s += user(...)     a chat turn, laid out by the tokenizer's chat template when it has one (else as plain text)

Every call is recorded twice in the engine's event log, ProgramStep when it starts and ProgramSpan when it is
done with the tokens it added, so a view can show which step of which program is running while the tree grows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from teachspec.engine import Engine
from teachspec.events import ProgramSpan, ProgramStep
from teachspec.program.calls import CHOICES_METHODS, ROLES, Gen, ProgramError, Role, Select, Where, caller, signature
from teachspec.program.score import score_on
from teachspec.templates import marks


@dataclass
class Call:
    """What one call of a run did: the numbers behind a program's hit rate and time."""
    kind: str            # "text", "gen", "select" or "fork"
    call: str            # as written in the program: gen('answer', max_tokens=8)
    name: str            # the variable it set, "" for none
    branch: int
    line: int
    start: int           # the tokens [start, stop) it added to its branch's state
    stop: int
    prompt_tokens: int = 0   # tokens the target had to see, over every request the call made
    cached_tokens: int = 0   # of them, served from the radix cache
    new_tokens: int = 0      # tokens generated (a select generates none)
    seconds: float = 0.0


@dataclass
class Run:
    """One execution of a program, shared by its state and every fork of it."""
    engine: Engine
    program: str
    id: int
    speculate: str | None
    k: int | str
    seed: int | None
    calls: list[Call] = field(default_factory=list)
    branches: int = 1    # branch ids handed out so far; the first state is branch 0

    def next_seed(self) -> int | None:
        """Each sampling call gets its own seed, derived from the run's, so a seeded program repeats exactly."""
        return None if self.seed is None else self.seed + len(self.calls)

    @property
    def hit_rate(self) -> float:
        """Prompt tokens served from the cache / prompt tokens the target had to see, over every call."""
        prompt = sum(c.prompt_tokens for c in self.calls)
        return sum(c.cached_tokens for c in self.calls) / prompt if prompt else 0.0

    @property
    def seconds(self) -> float:
        return sum(c.seconds for c in self.calls)


class State:
    """A program's state. Read it with `s[name]`, `s.text`, `s.ids`; extend it with `s += ...`."""

    def __init__(self, run: Run, ids: list[int] | None = None, text: str = "", variables: dict | None = None,
                 branch: int = 0, messages: list[dict] | None = None):
        self.run = run
        self.ids: list[int] = list(ids or [])
        self.text = text
        self.branch = branch
        self.messages: list[dict] = list(messages or [])  # the chat turns so far, as a chat template reads them
        self.scores: dict[str, dict[str, float]] = {}  # select's variable -> {choice: what ranked it}: log p, or its
                                                        # mean per token with choices_method='token_length_normalized'
        self._variables: dict[str, tuple[str, str, Where]] = dict(variables or {})  # name -> (value, call, where)

    @property
    def engine(self) -> Engine:
        return self.run.engine

    @property
    def variables(self) -> dict[str, str]:
        return {name: value for name, (value, _, _) in self._variables.items()}

    def __getitem__(self, name: str) -> str:
        if name not in self._variables:
            raise ProgramError(f"s[{name!r}]", caller(), f"no call has set a variable {name!r}; the variables so "
                                                         f"far are {sorted(self._variables)}")
        return self._variables[name][0]

    def __contains__(self, name: str) -> bool:
        return name in self._variables

    def __iadd__(self, part) -> "State":
        self._add(part, caller())
        return self

    def __repr__(self) -> str:
        return (f"State(program={self.run.program!r}, branch={self.branch}, tokens={len(self.ids)}, "
                f"variables={self.variables!r})")

    def fork(self, n: int) -> list["State"]:
        """n branches that start as this state; whatever they add, they share everything up to here."""
        call, where = signature("fork", n), caller()
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ProgramError(call, where, f"n must be an int >= 1 (the number of branches), got {n!r}")
        first, self.run.branches = self.run.branches, self.run.branches + n
        self._step("fork", "", where)
        self.run.calls.append(Call("fork", call, "", self.branch, where.line, len(self.ids), len(self.ids)))
        self._span("fork", "", len(self.ids), "")
        return [State(self.run, self.ids, self.text, self._variables, first + i, self.messages) for i in range(n)]

    # -- running the calls ---------------------------------------------------------------------------------------

    def _add(self, part, where: Where) -> None:
        if isinstance(part, str):
            self._text(part, where)
        elif isinstance(part, Role):
            self._turn(part)
        elif isinstance(part, (Gen, Select)):
            if part.name in self._variables:
                _, call, at = self._variables[part.name]
                raise ProgramError(part.call, part.where, f"the variable {part.name!r} is already set, by {call} at "
                                                          f"{at}; give each call a name of its own")
            self._gen(part) if isinstance(part, Gen) else self._select(part)
        else:
            shown = repr(part) if len(repr(part)) < 40 else type(part).__name__
            raise ProgramError(f"s += {shown}", where, f"a state takes text, gen(...), select(...) or a chat turn "
                                                       f"such as user(...), got {type(part).__name__}")

    def _turn(self, turn: Role) -> None:
        """A chat turn: the template's opening, the parts, its closing; or, with no template, ROLES' plain text."""
        pair = self.engine.pair
        if not pair.chat_template:
            self._text(("\n\n" if self.ids and turn.role == "user" else "") + ROLES[turn.role], turn.where)
            for inner in turn.parts:
                self._add(inner, turn.where)
            return
        try:
            opening, closing = marks(pair.tokenizer, self.messages, turn.role)
        except Exception as e:  # a template refusing this order of roles, in its own words
            raise ProgramError(turn.call, turn.where, str(e)) from e
        self._text(opening, turn.where, special=False)  # the template's text holds the special tokens it wants
        start = len(self.text)
        for inner in turn.parts:
            self._add(inner, turn.where)
        self.messages.append({"role": turn.role, "content": self.text[start:]})
        self._text(closing, turn.where, special=False)

    def _text(self, text: str, where: Where, special: bool | None = None) -> None:
        """Append text; the first text of a state is encoded as a prompt (with the tokenizer's BOS, if any)."""
        if not text:
            return
        start = len(self.ids)
        self._step("text", "", where)
        self.ids += self.engine.pair.encode(text, special=not self.ids if special is None else special)
        self.text += text
        self.run.calls.append(Call("text", f"s += {text[:20]!r}", "", self.branch, where.line, start,
                                   len(self.ids)))
        self._span("text", "", start, text)

    def _gen(self, g: Gen) -> None:
        engine, run = self.engine, self.run
        self._step("gen", g.name, g.where)
        try:
            out = engine.generate(self.ids, g.max_tokens, temperature=g.params.temperature, top_k=g.params.top_k,
                                  top_p=g.params.top_p, speculate=run.speculate, k=run.k, seed=run.next_seed(),
                                  stop=list(g.stop) or None)
        except Exception as e:  # the engine's message, placed at the program's line
            raise ProgramError(g.call, g.where, str(e)) from e
        tokens, text = cut(out.tokens, g.stop, engine.pair)
        s = out.stats
        self._commit("gen", g, tokens, text, s.prompt_tokens, s.cached_tokens, s.new_tokens, s.wall_s)

    def _select(self, sel: Select) -> None:
        engine = self.engine
        self._step("select", sel.name, sel.where)
        try:
            scored = score_on(engine, self.ids, [engine.pair.encode(c, special=False) for c in sel.choices])
        except Exception as e:
            raise ProgramError(sel.call, sel.where, str(e)) from e
        rank = CHOICES_METHODS[sel.choices_method]  # the summed log p, or its mean per token (calls.py)
        self.scores[sel.name] = {c: rank(s.logprobs) for c, s in zip(sel.choices, scored)}
        best = max(range(len(scored)), key=lambda i: self.scores[sel.name][sel.choices[i]])  # the first of equals
        self._commit("select", sel, scored[best].tokens, sel.choices[best],
                     sum(s.stats.prompt_tokens for s in scored), sum(s.stats.cached_tokens for s in scored), 0,
                     sum(s.stats.wall_s for s in scored))

    def _commit(self, kind: str, call: Gen | Select, tokens: list[int], text: str, prompt: int, cached: int,
                new: int, seconds: float) -> None:
        start = len(self.ids)
        self.ids += tokens
        self.text += text
        self._variables[call.name] = (text, call.call, call.where)
        self.run.calls.append(Call(kind, call.call, call.name, self.branch, call.where.line, start, len(self.ids),
                                   prompt, cached, new, seconds))
        self._span(kind, call.name, start, text)

    # -- the trace -----------------------------------------------------------------------------------------------

    def _step(self, kind: str, name: str, where: Where) -> None:
        self.engine.events.emit(ProgramStep, run=self.run.id, program=self.run.program, branch=self.branch,
                                call=kind, name=name, line=where.line, position=len(self.ids))

    def _span(self, kind: str, name: str, start: int, text: str) -> None:
        self.engine.events.emit(ProgramSpan, run=self.run.id, branch=self.branch, call=kind, name=name,
                                start=start, stop=len(self.ids), text=text)


def cut(tokens: list[int], stops: tuple[str, ...], pair) -> tuple[list[int], str]:
    """The part of a generation a program keeps: no EOS token, nothing from the first stop string on.

    The engine stops right after the token that completes a stop string, as transformers does, and keeps that
    token; the program keeps only the text before the string. A stop string can end inside a token; then the
    whole tokens before the cut are kept and the few characters between them and the cut are encoded on their
    own, so that the kept ids still spell exactly the kept text."""
    if tokens and tokens[-1] in pair.eos:
        tokens = tokens[:-1]
    text = pair.decode(tokens)
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    if not found:
        return list(tokens), text
    text = text[:min(found)]
    n = len(tokens)
    while n and not text.startswith(pair.decode(tokens[:n])):
        n -= 1
    rest = text[len(pair.decode(tokens[:n])):]
    return tokens[:n] + (pair.encode(rest, special=False) if rest else []), text
