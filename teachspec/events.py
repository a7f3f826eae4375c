"""The event log: the one contract between the engine and everything that watches it.

The engine appends a typed record for every decision it makes; widgets, charts and tests read those records and
nothing else. A log saved to a file (a *trace*) replays with no model and no kernel.

Every event carries `t`, seconds since the log was created (`time.perf_counter`), and `request`, the id of the
request it belongs to (-1 for cache events outside any request). The vocabulary, with every field:

Request lifecycle
    RequestStart  request, prompt_tokens (count), prompt (token ids)
    Prefill       cached (prompt tokens served from the radix cache), computed (tokens run through the target),
                  ms (wall time of the prefill)
    Finish        new_tokens (count), reason ("eos" | "stop" (a stop string) | "length" | "score"), ms (wall time of
                  the whole request)
    Score         position (index of the continuation's first token), tokens (the continuation's ids), logprobs
                  (the target's log-probability of each): `program.score.score` rates continuations of a prompt instead
                  of generating one; its request is RequestStart (the prompt), a Prefill each time the prompt is
                  computed (once with the radix cache, once per continuation without), a Score per continuation,
                  and Finish with reason "score"

Speculation (one *step* = one draft of k tokens followed by one target pass over k + 1 positions)
    Draft     step, position (index in the sequence of the first drafted token), tokens (the k drafted ids),
              q (the draft's probability of each drafted token; 1.0 for drafters without a distribution),
              drafter (a `speculate=` name, teachspec/speculate.py), ms (wall time of the draft passes)
    Verify    step, position, n (positions the target scored, k + 1), ms (wall time of the target pass)
    Accept    step, position, i (index in the draft), token, p, q, u (the uniform draw), top_p, top_q
    Reject    step, position, i, token, p, q, u, top_p, top_q
    Resample  step, position, i, token (drawn from norm(max(0, p - q))), p, q (of the new token), top_residual
    Bonus     step, position, token (drawn from p at position k + 1 when all k were accepted), p, top_p

    TreeDraft step, position (of the root, the last committed token), parents (each node's parent, -1 for the
              root), tokens (each node's token, the root's first), drafter, ms: a tree of guesses (`tree=`),
              checked in one target pass (a Verify with n = the node count); each child tried is then an Accept or
              Reject whose `i` is its node and whose position is the root's plus its depth, and the step ends with
              a Resample (every child of the last node rejected) or a Bonus (a leaf reached)

    Plain decoding is the k = 0 step: a Verify over n = 1 position and a Bonus, from `teachspec.decode` and from
    the engine alike (version 1 traces had a Plain event instead; `load` reads each as those two).

    `top_*` fields are optional lists of [token, probability] pairs, the few most likely alternatives, recorded
    only when the engine is asked for them (they cost a top-k per position). Accept/Reject/Resample/Bonus follow
    the Leviathan et al. (2023) rule: accept drafted x with probability min(1, p(x)/q(x)).

Radix cache (node ids are stable for a node's life; the root is node 0)
    Match    node (deepest node of the match), length (tokens matched), path (node ids root -> node),
             proposed (a suffix tree's guess: the node ids of the branch it proposes below the match, parents
             before children; absent for the radix cache, whose lookups propose nothing)
    Insert   node (new leaf, or -1 when nothing new), parent, tokens (new tokens stored), cached (already present),
             ids (the new tokens themselves, so a view labels the node with its text; absent in older traces)
    Split    node (the node that was cut), new (the new parent holding the first `at` tokens), parent, at
    Evict    node, parent, tokens (count freed)
    Lock     node (deepest node locked), locks (its lock count afterwards), protected (protected tokens after)
    Unlock   node, locks, protected

Programs (teachspec.program; `request` is -1: a call may run several requests, or none)
    ProgramStep   run (the run's id), program (the function's name), branch (0, or the fork it runs in), call
                  ("text" | "gen" | "select" | "fork"), name (the variable it sets, "" for none), line
                  (the program's line that made the call, from 1), position (tokens in the branch's state when it
                  starts)
    ProgramSpan   run, branch, call, name, start, stop (the tokens [start, stop) of the branch's state the call
                  added), text (their text): the call is done

Serving engines (teachspec.serving: another engine's cache and counters enter through the same log; request -1)
    Insert and Evict as above, one per KV block of a vLLM server (serving/blocks.py: a node is a block)
    Counters  source (the server's URL), drafts (speculation steps), draft_tokens (guesses proposed), accepted
              (guesses accepted), accepted_per_position (index i: drafts whose guess i was accepted),
              prefix_queries and prefix_hits (prompt tokens looked up in its prefix cache, and found there),
              requests (requests finished): the server's own running totals, read from its Prometheus /metrics
              whenever they change (serving/metrics.py)

Many servers (teachspec.routing, teachspec.serving.cluster: N replicas behind a router, and its simulator)
    Route     request, replica (index of the replica the router sent it to, from 0), policy (the router's
              policy), key (the session key a client sent, which consistent hashing hashes; "" for none),
              prompt_tokens
    Health    replica, url, state ("up" | "down"): a replica started, died or was killed
    replica   an optional field of Match, Insert, Split, Evict, Lock, Unlock and Counters: which replica's cache
              or counters the event is about (absent with one server). Node ids are per replica: node 3 of
              replica 0 and node 3 of replica 1 are different blocks. `ReplicaLog(log, i)` stamps it on what a
              RadixCache or a BlockTree emits, so one log holds every replica's tree

Subscribers are called synchronously, in order, with each event once it is in the log. One that raises an
Exception is reported once, by a RuntimeWarning that names it, and unsubscribed; the others still get the event;
then its exception propagates out of `emit`, so the request that emitted it fails (and gives back its locks: see
radix/prefix.py) while later requests run without it. A KeyboardInterrupt inside a subscriber is the user
stopping the program, not the subscriber's fault: it propagates at once and the subscriber stays.

The file format is JSON Lines: a header line `{"format": "teachspec-trace", "version": 2, "pair": "tiny"}` (the
pair that made the events, when known: a replay finds its tokenizer from it), then one object per
event with its `kind`. `EventLog.load` checks the whole file before it returns anything: a line that is not JSON,
not an object, of an unknown kind, missing a field or holding a value of the wrong type (the type is the one the
event's dataclass annotates), and a file that is empty, binary or from a newer version, each raise a TraceError
that names the file, the line and the problem.

It checks what the values mean as well, since a trace that parses can still describe nothing that happened:
    ranges     each field's annotation carries its range (`Count` is an int >= 0, `Probability` a float in [0, 1],
               `Reason` one of the names above; see "what a value may be" below): counts, positions, steps, token
               and node ids and times are >= 0, `request` >= -1, log-probabilities <= 0, Verify's n and Split's at
               >= 1. A probability may pass 1 by 1e-6, and a log-probability 0 by as much: a float32 softmax
               rounds so
    agreement  the fields of one event agree: a Draft has one q per token, a Score one log-probability per token,
               an Insert's ids (when given) are `tokens` many, a RequestStart's prompt (when given)
               `prompt_tokens` many, a TreeDraft's parents make a tree (parents[0] = -1, then
               0 <= parents[j] < j) with one token per node, a Match's path ends at its node, a ProgramSpan's
               start <= stop, and a Counters' accepted <= draft_tokens and prefix_hits <= prefix_queries
    steps      across the trace: an Accept, Reject, Resample or Bonus belongs to a step that its request drafted or
               verified before it (its Draft, TreeDraft or Verify; a trace of judgments alone, with none of those,
               is let be), and judges a guess that step made (i < the Draft's k, or the TreeDraft's node count)
Each refusal is a TraceError that names the line, the event's kind, the field, its value and what it must be;
`EventLog.from_dicts` says "event n" for the line. `check_event(event)` is the check of one event alone.
"""

from __future__ import annotations

import json
import math
import time
import types
import typing
import warnings
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any, Callable, ClassVar, Iterator

FORMAT = "teachspec-trace"
VERSION = 2  # 2: plain decoding as Verify + Bonus; version 1's Plain events are read as those



class TraceError(ValueError):
    """A trace that cannot be replayed; the message names the file, the line and what is wrong there."""


# -- what a value may be -----------------------------------------------------------------------------------------
# A field's annotation is its JSON type and, through Annotated, its meaning: the values that meaning allows. Both
# are declared here once, and `load` checks both; code that makes events only sees the plain types.

ROUNDING = 1e-6  # how far a float32 softmax may overshoot: it can give a probability of 1.0000001


@dataclass(frozen=True, slots=True)
class Range:
    """The numbers a field may hold, both ends included (None: no end); `slack` forgives rounding above `high`."""
    low: float | None = None
    high: float | None = None
    slack: float = 0.0

    def holds(self, x: float) -> bool:
        return (self.low is None or x >= self.low) and (self.high is None or x <= self.high + self.slack)

    def __str__(self) -> str:
        if self.high is None:
            return f">= {self.low}"
        return f"<= {self.high}" if self.low is None else f"in [{self.low}, {self.high}]"


@dataclass(frozen=True, slots=True)
class OneOf:
    """The names a field may hold."""
    names: tuple[str, ...]

    def holds(self, x: str) -> bool:
        return x in self.names

    def __str__(self) -> str:
        return f"one of {', '.join(map(repr, self.names))}"


Seconds = Annotated[float, Range(0)]              # `t`: since the log was created
RequestId = Annotated[int, Range(-1)]             # -1: outside any request
Count = Annotated[int, Range(0)]                  # how many: tokens, locks, drafts, requests
Index = Annotated[int, Range(0)]                  # where, counting from 0: a position in the sequence, a step,
                                                  # a guess's i, a run, a branch
TokenId = Annotated[int, Range(0)]                # an index into the vocabulary
NodeId = Annotated[int, Range(0)]                 # a radix node: the root is 0, the others 1, 2, ... as made
                                                  # (serving/blocks.py numbers vLLM's blocks so; no hash is an id)
Ms = Annotated[float, Range(0)]                   # a wall time, in milliseconds
Probability = Annotated[float, Range(0, 1, slack=ROUNDING)]
LogProb = Annotated[float, Range(high=0, slack=ROUNDING)]
Reason = Annotated[str, OneOf(("eos", "stop", "length", "score"))]    # why a request finished
CallKind = Annotated[str, OneOf(("text", "gen", "select", "fork"))]   # what a program's call did

Top = list[tuple[TokenId, Probability]]  # [[token, probability], ...], the few most likely alternatives


@dataclass(slots=True)
class Event:
    kind: ClassVar[str] = "event"
    t: Seconds
    request: RequestId


# -- request lifecycle -------------------------------------------------------------------------------------------

@dataclass(slots=True)
class RequestStart(Event):
    kind: ClassVar[str] = "request_start"
    prompt_tokens: Count
    prompt: list[TokenId] = field(default_factory=list)


@dataclass(slots=True)
class Prefill(Event):
    kind: ClassVar[str] = "prefill"
    cached: Count
    computed: Count
    ms: Ms


@dataclass(slots=True)
class Finish(Event):
    kind: ClassVar[str] = "finish"
    new_tokens: Count
    reason: Reason
    ms: Ms


@dataclass(slots=True)
class Score(Event):
    kind: ClassVar[str] = "score"
    position: Index
    tokens: list[TokenId]
    logprobs: list[LogProb]


# -- speculation -------------------------------------------------------------------------------------------------

@dataclass(slots=True)
class Draft(Event):
    kind: ClassVar[str] = "draft"
    step: Index
    position: Index
    tokens: list[TokenId]
    q: list[Probability]
    drafter: str
    ms: Ms


@dataclass(slots=True)
class TreeDraft(Event):
    kind: ClassVar[str] = "tree_draft"
    step: Index
    position: Index
    parents: list[Annotated[int, Range(-1)]]  # -1 for the root; that they make a tree is checked as a whole
    tokens: list[TokenId]
    drafter: str
    ms: Ms


@dataclass(slots=True)
class Verify(Event):
    kind: ClassVar[str] = "verify"
    step: Index
    position: Index
    n: Annotated[int, Range(1)]  # a pass scores the committed token's next position at least
    ms: Ms


@dataclass(slots=True)
class Decision(Event):
    """A token decided at guess i of a step, with its p and q: the fields Accept, Reject and Resample share."""
    step: Index
    position: Index
    i: Index
    token: TokenId
    p: Probability
    q: Probability


@dataclass(slots=True)
class Judged(Decision):
    """A drafted token the target has judged: Accept's and Reject's fields."""
    u: Annotated[float, Range(0, 1)]  # the uniform draw
    top_p: Top | None = None
    top_q: Top | None = None


@dataclass(slots=True)
class Accept(Judged):
    kind: ClassVar[str] = "accept"


@dataclass(slots=True)
class Reject(Judged):
    kind: ClassVar[str] = "reject"


@dataclass(slots=True)
class Resample(Decision):
    kind: ClassVar[str] = "resample"
    top_residual: Top | None = None


@dataclass(slots=True)
class Bonus(Event):
    kind: ClassVar[str] = "bonus"
    step: Index
    position: Index
    token: TokenId
    p: Probability
    top_p: Top | None = None


# -- radix cache -------------------------------------------------------------------------------------------------

@dataclass(slots=True)
class Match(Event):
    kind: ClassVar[str] = "match"
    node: NodeId
    length: Count
    path: list[NodeId]
    proposed: list[NodeId] | None = None
    replica: Index | None = None


@dataclass(slots=True)
class Insert(Event):
    kind: ClassVar[str] = "insert"
    node: Annotated[int, Range(-1)]  # -1: nothing new was stored
    parent: NodeId
    tokens: Count
    cached: Count
    ids: list[TokenId] | None = None
    replica: Index | None = None


@dataclass(slots=True)
class Split(Event):
    kind: ClassVar[str] = "split"
    node: NodeId
    new: NodeId
    parent: NodeId
    at: Annotated[int, Range(1)]  # the new parent holds at least one token
    replica: Index | None = None


@dataclass(slots=True)
class Evict(Event):
    kind: ClassVar[str] = "evict"
    node: NodeId
    parent: NodeId
    tokens: Count
    replica: Index | None = None


@dataclass(slots=True)
class Lock(Event):
    kind: ClassVar[str] = "lock"
    node: NodeId
    locks: Count
    protected: Count
    replica: Index | None = None


@dataclass(slots=True)
class Unlock(Event):
    kind: ClassVar[str] = "unlock"
    node: NodeId
    locks: Count
    protected: Count
    replica: Index | None = None


# -- programs ----------------------------------------------------------------------------------------------------

@dataclass(slots=True)
class ProgramStep(Event):
    kind: ClassVar[str] = "program_step"
    run: Index
    program: str
    branch: Index
    call: CallKind
    name: str
    line: Annotated[int, Range(1)]  # a source file's lines count from 1
    position: Index


@dataclass(slots=True)
class ProgramSpan(Event):
    kind: ClassVar[str] = "program_span"
    run: Index
    branch: Index
    call: CallKind
    name: str
    start: Index
    stop: Index
    text: str


# -- serving engines ---------------------------------------------------------------------------------------------

@dataclass(slots=True)
class Counters(Event):
    kind: ClassVar[str] = "counters"
    source: str
    drafts: Count
    draft_tokens: Count
    accepted: Count
    accepted_per_position: list[Count]
    prefix_queries: Count
    prefix_hits: Count
    requests: Count
    replica: Index | None = None


# -- many servers ------------------------------------------------------------------------------------------------

@dataclass(slots=True)
class Route(Event):
    kind: ClassVar[str] = "route"
    replica: Index
    policy: str
    key: str                # the session key the router may hash ("" for none): a tenant, a conversation
    prompt_tokens: Count


@dataclass(slots=True)
class Health(Event):
    kind: ClassVar[str] = "health"
    replica: Index
    url: str
    state: Annotated[str, OneOf(("up", "down"))]


KINDS: dict[str, type[Event]] = {c.kind: c for c in (
    RequestStart, Prefill, Finish, Score, Draft, TreeDraft, Verify, Accept, Reject, Resample, Bonus,
    Match, Insert, Split, Evict, Lock, Unlock, ProgramStep, ProgramSpan, Counters, Route, Health)}


# -- the log -----------------------------------------------------------------------------------------------------

class ReplicaLog:
    """What one replica's cache (a RadixCache, a BlockTree) emits into a cluster's shared log, each event stamped
    with `replica`: it has the one method they call, `emit`."""

    def __init__(self, log: "EventLog", replica: int):
        if isinstance(replica, bool) or not isinstance(replica, int) or replica < 0:
            raise ValueError(f"replica must be an int >= 0 (a replica's index), got {replica!r}")
        self.log, self.replica = log, replica

    def emit(self, cls: type[Event], request: int = -1, **fields) -> Event:
        return self.log.emit(cls, request, replica=self.replica, **fields)


class EventLog:
    """An append-only list of events with subscribers.

    `emit(EventType, request=..., **fields)` stamps the time and appends; with nobody subscribed that is one
    object and one list append, so the engine records everything all the time. Subscribers are called
    synchronously with each event; a live view that must not slow the engine buffers and throttles itself.
    """

    def __init__(self, events: list[Event] | None = None, pair: str | None = None):
        self.events: list[Event] = list(events or [])
        self.pair = pair  # the name of the pair that made these events (the engine sets it): a replay's tokenizer
        self.t0 = time.perf_counter()
        self._subscribers: list[Callable[[Event], None]] = []

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def emit(self, cls: type[Event], request: int = -1, **fields) -> Event:
        event = cls(time.perf_counter() - self.t0, request, **fields)
        self.events.append(event)
        if self._subscribers:
            self._notify(event)
        return event

    def _notify(self, event: Event) -> None:
        """Call every subscriber; one that raises is reported, dropped, and its exception re-raised at the end."""
        failure = None
        for fn in list(self._subscribers):  # a copy: a subscriber may unsubscribe itself, or be dropped below
            try:
                fn(event)
            except Exception as error:  # not BaseException: a KeyboardInterrupt propagates at once, see above
                self._drop(fn)
                warnings.warn(f"event subscriber {_name_of(fn)} raised {type(error).__name__}({error}) on "
                              f"event {event.kind!r}; it is unsubscribed, so later events and requests run "
                              f"without it", RuntimeWarning, stacklevel=3)
                if failure is None:
                    failure = error
        if failure is not None:
            raise failure

    def _drop(self, fn: Callable[[Event], None]) -> None:
        for i, subscriber in enumerate(self._subscribers):
            if subscriber is fn:
                del self._subscribers[i]
                return

    def subscribe(self, fn: Callable[[Event], None]) -> Callable[[], None]:
        """Call `fn(event)` for every event from now on; returns a function that unsubscribes.

        A subscriber that raises is unsubscribed (see the module docstring): subscribe it again to resume."""
        if not callable(fn):
            raise TypeError(f"fn must be callable (a function taking one event), got {type(fn).__name__} {fn!r}")
        self._subscribers.append(fn)
        return lambda: self._drop(fn)

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
        with path.open("w", encoding="utf-8") as f:
            header = {"format": FORMAT, "version": VERSION, **({"pair": self.pair} if self.pair else {})}
            f.write(json.dumps(header) + "\n")
            for d in self.to_dicts():
                f.write(json.dumps(d, separators=(",", ":")) + "\n")
        return path

    @classmethod
    def from_dicts(cls, rows: list[dict]) -> "EventLog":
        """Events from dicts like `to_dicts` makes, checked as `load` checks a file (errors say "event n")."""
        labels = [f"event {n}" for n in range(len(rows))]
        events = [_event(row, label) for row, label in zip(rows, labels)]
        _check_steps(events, labels, "")
        return cls(events)

    @classmethod
    def load(cls, path: str | Path) -> "EventLog":
        """Read a trace written by `save`, checking every line before anything is returned (see the module
        docstring); a TraceError names the file, the line and the problem."""
        if not isinstance(path, (str, Path)):
            raise TypeError(f"path must be the trace file's path (a str or Path), got {type(path).__name__} {path!r}")
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"trace file {str(path)!r} does not exist")
        if not path.is_file():
            raise IsADirectoryError(f"trace file {str(path)!r} is a folder; give the .jsonl file inside it")
        data = path.read_bytes()
        try:
            text = data.decode("utf-8").removeprefix("\ufeff")  # an editor's byte-order mark is harmless
        except UnicodeDecodeError as error:
            line = data.count(b"\n", 0, error.start) + 1
            raise TraceError(f"{path}, line {line}: not UTF-8 text (byte {data[error.start]:#04x}); a trace is JSON "
                             f"Lines text, and this looks like a binary file") from None
        lines = text.split("\n")
        example = json.dumps({"format": FORMAT, "version": VERSION})
        if not text.strip():
            raise TraceError(f"{path}, line 1: the file is empty; a trace starts with the header line {example}")
        header = _parse(lines[0], f"{path}, line 1")
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise TraceError(f"{path}, line 1: not a teachspec trace: its first line is {_short(header)}, expected "
                             f"the header {example}")
        version = header.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise TraceError(f"{path}, line 1: the header's version must be a whole number >= 1, got "
                             f"{_short(version)}")
        if version > VERSION:
            raise TraceError(f"{path}, line 1: this is a version {version} trace; this teachspec reads versions up "
                             f"to {VERSION}: upgrade teachspec to replay it")
        pair = header.get("pair")
        if pair is not None and not isinstance(pair, str):
            raise TraceError(f"{path}, line 1: the header's pair must be the name of a pair (a string), got "
                             f"{_short(pair)}")
        rows = [(_parse(line, f"{path}, line {n}"), f"line {n}") for n, line in enumerate(lines[1:], start=2)
                if line.strip()]
        if version == 1:
            rows = [(new, label) for row, label in rows for new in _from_version_1(row)]
        events = [_event(row, f"{path}, {label}") for row, label in rows]
        _check_steps(events, [label for _, label in rows], f"{path}, ")
        return cls(events, pair=pair)


# -- checking a trace as it is read --------------------------------------------------------------------------------

def _schema(cls: type[Event]) -> dict[str, tuple[Any, bool]]:
    """{field: (its JSON type, required)}: the dataclasses are the schema of a trace."""
    hints = typing.get_type_hints(cls)  # Annotated's ranges left out: the type alone
    return {f.name: (hints[f.name], f.default is MISSING and f.default_factory is MISSING) for f in fields(cls)}


def _meanings(cls: type[Event]) -> dict[str, Any]:
    """{field: its annotation, ranges and all}, for the fields whose annotation holds a Range or a OneOf."""
    plain, full = typing.get_type_hints(cls), typing.get_type_hints(cls, include_extras=True)
    return {f.name: full[f.name] for f in fields(cls) if full[f.name] != plain[f.name]}


_SCHEMA = {kind: _schema(cls) for kind, cls in KINDS.items()}  # read once, at import
_MEANINGS = {kind: _meanings(cls) for kind, cls in KINDS.items()}


def _parse(line: str, where: str) -> Any:
    try:
        return json.loads(line, parse_constant=_not_a_number, parse_float=_finite)
    except json.JSONDecodeError as error:
        raise TraceError(f"{where}: not JSON ({error.msg} at column {error.colno}); the file may be truncated or "
                         f"corrupted") from None
    except ValueError as error:  # NaN or Infinity, which Python's json reads but JSON has not
        raise TraceError(f"{where}: {error}") from None
    except RecursionError:
        raise TraceError(f"{where}: JSON nested too deeply to read (an event is a flat object of numbers, strings "
                         f"and short lists); the file is corrupted") from None


def _not_a_number(name: str):
    raise ValueError(f"{name} is not a JSON number (every number in a trace is finite); the file is corrupted")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: valid JSON, but no time or probability is that large
        raise ValueError(f"{text} is too large for a number of a trace (it reads as infinity); the file is corrupted")
    return value


def _from_version_1(row: Any) -> list:
    """A version 1 line as version 2 lines: a Plain event (one decoding step) becomes the Verify of its target pass
    and the Bonus of its token; every other line is unchanged."""
    if not isinstance(row, dict) or row.get("kind") != "plain":
        return [row]
    common = {k: row[k] for k in ("t", "request", "step", "position") if k in row}
    verify = {"kind": "verify", **common, "n": 1, **({"ms": row["ms"]} if "ms" in row else {})}
    bonus = {"kind": "bonus", **common, **{k: row[k] for k in ("token", "p") if k in row}}
    return [verify, bonus]


def _event(row: Any, where: str) -> Event:
    """One event from its JSON object, or a TraceError at `where` saying what is wrong with it."""
    if not isinstance(row, dict):
        raise TraceError(f"{where}: an event must be a JSON object with a \"kind\", got {_short(row)}")
    kind = row.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        what = ("no \"kind\"" if kind is None else f"unknown kind {kind!r}" if isinstance(kind, str) else
                f"the \"kind\" must be a string naming the event, got {_short(kind)}")
        raise TraceError(f"{where}: {what}; known kinds: {sorted(KINDS)}")
    schema = _SCHEMA[kind]
    unknown = sorted(set(row) - set(schema) - {"kind"})
    if unknown:
        raise TraceError(f"{where}: unknown fields {unknown} for this {kind!r} event, whose fields are {list(schema)}")
    values = {}
    for name, (hint, required) in schema.items():
        if name not in row:
            if required:
                raise TraceError(f"{where}: this {kind!r} event needs the field {name!r} ({_type_name(hint)}), "
                                 f"and it is missing")
            continue
        value = row[name]
        if not _conforms(value, hint):
            raise TraceError(f"{where}: the field {name!r} of this {kind!r} event must be {_type_name(hint)}, got "
                             f"{_short(value)}")
        values[name] = float(value) if hint is float else value  # JSON writes 2.0 as 2 at times; a float is a float
    return check_event(KINDS[kind](**values), where)


def check_event(event: Event, where: str = "an event") -> Event:
    """`event` itself, or a TraceError at `where` when a field holds what it cannot mean: a value outside the range
    its annotation gives, or fields that disagree with each other (the module docstring lists both)."""
    for name, hint in _MEANINGS[event.kind].items():
        found = _outside(getattr(event, name), hint, name)
        if found is not None:
            value, rule, at = found
            inside = f" at {at}" if at != name else ""  # which item of a list, or of a [token, probability] pair
            raise TraceError(f"{where}: the field {name!r} of this {event.kind!r} event must be {rule}, got "
                             f"{value!r}{inside}")
    disagreement = _disagreement(event)
    if disagreement is not None:
        name, must, got = disagreement
        raise TraceError(f"{where}: the field {name!r} of this {event.kind!r} event must {must}, got {got}")
    return event


def _outside(value: Any, hint: Any, at: str) -> tuple[Any, Range | OneOf, str] | None:
    """The first value in `value` that its annotation does not allow, as (that value, the rule, where it is:
    `at` itself, or an item such as "top_p[2][1]"), or None when all are allowed. The types are checked already."""
    if typing.get_origin(hint) is Annotated:
        rule = hint.__metadata__[0]
        return None if rule.holds(value) else (value, rule, at)
    if value is None:  # an optional field, absent
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):  # X | None, and the value is not None: it is an X
        return _outside(value, next(a for a in args if a is not type(None)), at)
    items = [args[0]] * len(value) if origin is list else args if origin is tuple else ()
    for j, (item, item_hint) in enumerate(zip(value, items)):
        found = _outside(item, item_hint, f"{at}[{j}]")
        if found is not None:
            return found
    return None


def _disagreement(e: Event) -> tuple[str, str, str] | None:
    """Fields of one event that contradict each other, as (the field, what it must do, what it holds), or None."""
    if isinstance(e, RequestStart) and e.prompt and len(e.prompt) != e.prompt_tokens:
        return "prompt", f"hold prompt_tokens = {e.prompt_tokens} ids (or none, as older traces do)", \
            f"{len(e.prompt)} ids"
    if isinstance(e, Score) and len(e.logprobs) != len(e.tokens):
        return "logprobs", f"hold one log-probability per token of 'tokens' ({len(e.tokens)})", \
            f"{len(e.logprobs)} of them"
    if isinstance(e, Draft) and len(e.q) != len(e.tokens):
        return "q", f"hold one probability per drafted token of 'tokens' ({len(e.tokens)})", f"{len(e.q)} of them"
    if isinstance(e, TreeDraft):
        if not e.parents or e.parents[0] != -1:
            return "parents", "make a tree: parents[0] = -1, node 0 being the root", _short(e.parents)
        forward = next((j for j in range(1, len(e.parents)) if not 0 <= e.parents[j] < j), None)
        if forward is not None:  # an earlier node, so the nodes are in the order a pass lays them out
            return "parents", f"make a tree: each node's parent an earlier node, 0 <= parents[{forward}] < " \
                              f"{forward}", f"parents[{forward}] = {e.parents[forward]}"
        if len(e.tokens) != len(e.parents):
            return "tokens", f"hold one token per node of 'parents' ({len(e.parents)})", f"{len(e.tokens)} of them"
    if isinstance(e, Match) and (not e.path or e.path[-1] != e.node):
        return "path", f"end at the matched node {e.node}", _short(e.path)
    if isinstance(e, Insert) and e.ids is not None and len(e.ids) != e.tokens:
        return "ids", f"hold one id per new token (tokens = {e.tokens})", f"{len(e.ids)} ids"
    if isinstance(e, ProgramSpan) and e.stop < e.start:
        return "stop", f"be >= start ({e.start}): the span is the tokens [start, stop)", f"{e.stop}"
    if isinstance(e, Counters):
        if e.accepted > e.draft_tokens:
            return "accepted", f"be <= draft_tokens ({e.draft_tokens}): only a proposed guess is accepted", \
                f"{e.accepted}"
        if e.prefix_hits > e.prefix_queries:
            return "prefix_hits", f"be <= prefix_queries ({e.prefix_queries}): only a looked-up token is found", \
                f"{e.prefix_hits}"
    return None


def _check_steps(events: list[Event], labels: list[str], prefix: str) -> None:
    """Across a trace, in one pass: every Accept, Reject, Resample and Bonus belongs to a step its request drafted
    or verified before it, and an Accept, Reject or Resample judges a guess of that step (i < the k tokens of its
    Draft, or the node count of its TreeDraft; a Resample from the root of a tree has i = 0). A trace of
    judgments alone, with no Draft, TreeDraft or Verify at all, records no steps to refer to, and is let be.
    `labels` says where each event is ("line 7"), `prefix` what comes before that (the file)."""
    records_steps = any(isinstance(e, (Draft, TreeDraft, Verify)) for e in events)
    steps: dict[tuple[int, int], tuple[int | None, str]] = {}  # (request, step) -> (its guesses, said how)
    for e, label in zip(events, labels):
        key = (e.request, getattr(e, "step", None))
        if isinstance(e, Draft):  # the latest wins: a log two engines shared may reuse a request's id
            steps[key] = (len(e.tokens), f"whose 'draft' at {label} made {len(e.tokens)} guesses")
        elif isinstance(e, TreeDraft):
            steps[key] = (len(e.parents), f"whose 'tree_draft' at {label} has {len(e.parents)} nodes")
        elif isinstance(e, Verify):
            steps.setdefault(key, (None, f"verified at {label}"))  # its draft, if any, came before it
        elif isinstance(e, (Decision, Bonus)):
            where = f"{prefix}{label}: the field"
            if key not in steps:
                if records_steps:
                    raise TraceError(f"{where} 'step' of this {e.kind!r} event must be a step of request "
                                     f"{e.request} drafted or verified before it (by a 'draft', 'tree_draft' or "
                                     f"'verify' event of that step: plain decoding records each step as a "
                                     f"'verify' with n = 1 before its 'bonus'), got {e.step}")
                continue
            k, how = steps[key]
            if k is not None and not isinstance(e, Bonus) and e.i >= k:
                raise TraceError(f"{where} 'i' of this {e.kind!r} event must be < {k} (step {e.step} of request "
                                 f"{e.request} is the one {how}), got {e.i}")


def _conforms(value: Any, hint: Any) -> bool:
    """Whether a value read from JSON has the type a field is annotated with (an int will do for a float)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint in (int, float):
        return isinstance(value, (int, float) if hint is float else int) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin is list:
        return isinstance(value, list) and all(_conforms(v, args[0]) for v in value)
    if origin is tuple:  # a fixed-length JSON array, such as a [token, probability] pair
        return isinstance(value, list) and len(value) == len(args) and all(map(_conforms, value, args))
    raise TypeError(f"events.py has no JSON check for the annotation {hint}: teach _conforms about it")


def _type_name(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("NoneType", "None")


def _short(value: Any) -> str:
    """A value as an error shows it: its Python type and the start of its repr; JSON's null as null."""
    if value is None:
        return "null"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _name_of(fn: Callable) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__
