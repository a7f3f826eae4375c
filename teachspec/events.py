"""The event log: the one contract between the engine and everything that watches it.

The engine appends a typed record for every decision it makes; widgets, charts and tests read those records and
nothing else. A log saved to a file (a *trace*) replays with no model and no kernel.

Every event carries `t`, seconds since the log was created (`time.perf_counter`), and `request`, the id of the
request it belongs to (-1 for cache events outside any request). The vocabulary, with every field:

Request lifecycle
    RequestStart  request, prompt_tokens (count), prompt (token ids)
    Prefill       cached (prompt tokens served from the radix cache), computed (tokens run through the target),
                  ms (wall time of the prefill)
    Finish        new_tokens (count), reason ("eos" | "length" | "score"), ms (wall time of the whole request)
    Score         position (index of the continuation's first token), tokens (the continuation's ids), logprobs
                  (the target's log-probability of each): `Engine.score` rates continuations of a prompt instead
                  of generating one; its request is RequestStart (the prompt), a Prefill each time the prompt is
                  computed (once with the radix cache, once per continuation without), a Score per continuation,
                  and Finish with reason "score"

Speculation (one *step* = one draft of k tokens followed by one target pass over k + 1 positions)
    Draft     step, position (index in the sequence of the first drafted token), tokens (the k drafted ids),
              q (the draft's probability of each drafted token; 1.0 for drafters without a distribution),
              drafter ("model" | "ngram" | "oracle" | "adversary"), ms (wall time of the draft passes)
    Verify    step, position, n (positions the target scored, k + 1), ms (wall time of the target pass)
    Accept    step, position, i (index in the draft), token, p, q, u (the uniform draw), top_p, top_q
    Reject    step, position, i, token, p, q, u, top_p, top_q
    Resample  step, position, i, token (drawn from norm(max(0, p - q))), p, q (of the new token), top_residual
    Bonus     step, position, token (drawn from p at position k + 1 when all k were accepted), p, top_p
    Plain     step, position, token, p, ms: one ordinary decoding step (no speculation, k = 0)

    `top_*` fields are optional lists of [token, probability] pairs, the few most likely alternatives, recorded
    only when the engine is asked for them (they cost a top-k per position). Accept/Reject/Resample/Bonus follow
    the Leviathan et al. (2023) rule: accept drafted x with probability min(1, p(x)/q(x)).

Radix cache (node ids are stable for a node's life; the root is node 0)
    Match    node (deepest node of the match), length (tokens matched), path (node ids root -> node)
    Insert   node (new leaf, or -1 when nothing new), parent, tokens (new tokens stored), cached (already present)
    Split    node (the node that was cut), new (the new parent holding the first `at` tokens), parent, at
    Evict    node, parent, tokens (count freed)
    Lock     node (deepest node locked), locks (its lock count afterwards), protected (protected tokens after)
    Unlock   node, locks, protected

Programs (teachspec.program; `request` is -1: a call may run several requests, or none)
    ProgramStep   run (the run's id), program (the function's name), branch (0, or the fork it runs in), call
                  ("text" | "gen" | "select" | "fork"), name (the variable it sets, "" for none), line
                  (the program's line that made the call), position (tokens in the branch's state when it starts)
    ProgramSpan   run, branch, call, name, start, stop (the tokens [start, stop) of the branch's state the call
                  added), text (their text): the call is done

The file format is JSON Lines: a header line `{"format": "teachspec-trace", "version": 1}`, then one object per
event with its `kind`. `EventLog.load` refuses files from a newer version with an error that says so.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable, ClassVar, Iterator

FORMAT = "teachspec-trace"
VERSION = 1

Top = list  # [[token, probability], ...], the few most likely alternatives


@dataclass(slots=True)
class Event:
    kind: ClassVar[str] = "event"
    t: float
    request: int


# -- request lifecycle -------------------------------------------------------------------------------------------

@dataclass(slots=True)
class RequestStart(Event):
    kind: ClassVar[str] = "request_start"
    prompt_tokens: int
    prompt: list[int] = field(default_factory=list)


@dataclass(slots=True)
class Prefill(Event):
    kind: ClassVar[str] = "prefill"
    cached: int
    computed: int
    ms: float


@dataclass(slots=True)
class Finish(Event):
    kind: ClassVar[str] = "finish"
    new_tokens: int
    reason: str
    ms: float


@dataclass(slots=True)
class Score(Event):
    kind: ClassVar[str] = "score"
    position: int
    tokens: list[int]
    logprobs: list[float]


# -- speculation -------------------------------------------------------------------------------------------------

@dataclass(slots=True)
class Draft(Event):
    kind: ClassVar[str] = "draft"
    step: int
    position: int
    tokens: list[int]
    q: list[float]
    drafter: str
    ms: float


@dataclass(slots=True)
class Verify(Event):
    kind: ClassVar[str] = "verify"
    step: int
    position: int
    n: int
    ms: float


@dataclass(slots=True)
class Judged(Event):
    """A drafted token the target has judged: the fields Accept and Reject share."""
    step: int
    position: int
    i: int
    token: int
    p: float
    q: float
    u: float
    top_p: Top | None = None
    top_q: Top | None = None


@dataclass(slots=True)
class Accept(Judged):
    kind: ClassVar[str] = "accept"


@dataclass(slots=True)
class Reject(Judged):
    kind: ClassVar[str] = "reject"


@dataclass(slots=True)
class Resample(Event):
    kind: ClassVar[str] = "resample"
    step: int
    position: int
    i: int
    token: int
    p: float
    q: float
    top_residual: Top | None = None


@dataclass(slots=True)
class Bonus(Event):
    kind: ClassVar[str] = "bonus"
    step: int
    position: int
    token: int
    p: float
    top_p: Top | None = None


@dataclass(slots=True)
class Plain(Event):
    kind: ClassVar[str] = "plain"
    step: int
    position: int
    token: int
    p: float
    ms: float


# -- radix cache -------------------------------------------------------------------------------------------------

@dataclass(slots=True)
class Match(Event):
    kind: ClassVar[str] = "match"
    node: int
    length: int
    path: list[int]


@dataclass(slots=True)
class Insert(Event):
    kind: ClassVar[str] = "insert"
    node: int
    parent: int
    tokens: int
    cached: int


@dataclass(slots=True)
class Split(Event):
    kind: ClassVar[str] = "split"
    node: int
    new: int
    parent: int
    at: int


@dataclass(slots=True)
class Evict(Event):
    kind: ClassVar[str] = "evict"
    node: int
    parent: int
    tokens: int


@dataclass(slots=True)
class Lock(Event):
    kind: ClassVar[str] = "lock"
    node: int
    locks: int
    protected: int


@dataclass(slots=True)
class Unlock(Event):
    kind: ClassVar[str] = "unlock"
    node: int
    locks: int
    protected: int


# -- programs ----------------------------------------------------------------------------------------------------

@dataclass(slots=True)
class ProgramStep(Event):
    kind: ClassVar[str] = "program_step"
    run: int
    program: str
    branch: int
    call: str
    name: str
    line: int
    position: int


@dataclass(slots=True)
class ProgramSpan(Event):
    kind: ClassVar[str] = "program_span"
    run: int
    branch: int
    call: str
    name: str
    start: int
    stop: int
    text: str


KINDS: dict[str, type[Event]] = {c.kind: c for c in (
    RequestStart, Prefill, Finish, Score, Draft, Verify, Accept, Reject, Resample, Bonus, Plain,
    Match, Insert, Split, Evict, Lock, Unlock, ProgramStep, ProgramSpan)}


# -- the log -----------------------------------------------------------------------------------------------------

class EventLog:
    """An append-only list of events with subscribers.

    `emit(EventType, request=..., **fields)` stamps the time and appends; with nobody subscribed that is one
    object and one list append, so the engine records everything all the time. Subscribers are called
    synchronously with each event; a live view that must not slow the engine buffers and throttles itself.
    """

    def __init__(self, events: list[Event] | None = None):
        self.events: list[Event] = list(events or [])
        self.t0 = time.perf_counter()
        self._subscribers: list[Callable[[Event], None]] = []

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def emit(self, cls: type[Event], request: int = -1, **fields) -> Event:
        event = cls(time.perf_counter() - self.t0, request, **fields)
        self.events.append(event)
        for fn in self._subscribers:
            fn(event)
        return event

    def subscribe(self, fn: Callable[[Event], None]) -> Callable[[], None]:
        """Call `fn(event)` for every event from now on; returns a function that unsubscribes."""
        self._subscribers.append(fn)
        return lambda: self._subscribers.remove(fn) if fn in self._subscribers else None

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return EventLog(self.events[index])
        return self.events[index]

    def of(self, *classes: type[Event]) -> list[Event]:
        """The events of the given types, in order."""
        return [e for e in self.events if isinstance(e, classes)]

    def clear(self) -> None:
        self.events.clear()

    # -- files ---------------------------------------------------------------------------------------------------

    def to_dicts(self) -> list[dict]:
        return [{"kind": e.kind, **asdict(e)} for e in self.events]

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        with path.open("w") as f:
            f.write(json.dumps({"format": FORMAT, "version": VERSION}) + "\n")
            for d in self.to_dicts():
                f.write(json.dumps(d, separators=(",", ":")) + "\n")
        return path

    @classmethod
    def from_dicts(cls, rows: list[dict]) -> "EventLog":
        events = []
        for n, row in enumerate(rows):
            row = dict(row)
            kind = row.pop("kind", None)
            if kind not in KINDS:
                raise ValueError(f"event {n}: unknown kind {kind!r}; known kinds: {sorted(KINDS)}")
            known = {f.name for f in fields(KINDS[kind])}
            unknown = set(row) - known
            if unknown:
                raise ValueError(f"event {n} ({kind}): unknown fields {sorted(unknown)}")
            events.append(KINDS[kind](**row))
        return cls(events)

    @classmethod
    def load(cls, path: str | Path) -> "EventLog":
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"trace file {str(path)!r} does not exist")
        with path.open() as f:
            header = json.loads(f.readline() or "{}")
            if header.get("format") != FORMAT:
                raise ValueError(f"{path} is not a teachspec trace: its first line is {header!r}, expected "
                                 f"{{'format': {FORMAT!r}, 'version': ...}}")
            if header.get("version", 0) > VERSION:
                raise ValueError(f"{path} is a version {header['version']} trace; this teachspec reads versions "
                                 f"up to {VERSION}: upgrade teachspec to replay it")
            return cls.from_dicts([json.loads(line) for line in f if line.strip()])
