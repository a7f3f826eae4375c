"""Loading a trace checks every line first: each malformed file is refused naming the file, the line and the problem.

The malformed traces are made from a valid one: the file cut short, made binary, given a wrong header, and every
event's every field removed or given a value of another type (the types come from the events' dataclasses).
"""

from __future__ import annotations

import gzip
import json
import re
import types
import typing
from dataclasses import MISSING, fields

import pytest

from helpers.events import sample_log
from teachspec.events import KINDS, VERSION, EventLog, OneOf, Prefill, TraceError, check_event

HEADER = json.dumps({"format": "teachspec-trace", "version": VERSION})
ROWS = sample_log().to_dicts()  # one event of every kind; row i is on line i + 2


def trace(*lines: str) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def with_row(i: int, row: dict) -> bytes:
    """The valid trace with row i replaced."""
    rows = [json.dumps(r) for r in ROWS]
    rows[i] = json.dumps(row)
    return trace(HEADER, *rows)


def wrong_value(annotation: str):
    """A JSON value of another type than `annotation` allows."""
    return {"int": "seven", "float": "seven", "str": 7, "list[int]": ["a"], "list[float]": "0.5"}.get(annotation,
                                                                                                    [[1]])


# (name, file contents, line the error must name, what it must say)
CASES = [
    ("empty file", b"", 1, "the file is empty"),
    ("only blank lines", b"\n  \n\n", 1, "the file is empty"),
    ("binary: gzip", gzip.compress(trace(HEADER)), 1, "not UTF-8 text .* binary"),
    ("binary after valid lines", trace(HEADER, json.dumps(ROWS[0])) + b"\xff\xfe\x00garbage\n", 3, "not UTF-8"),
    ("header cut short", b'{"format": "teachspec-tr', 1, "not JSON"),
    ("header is a list", trace('["teachspec-trace", 1]'), 1, "not a teachspec trace: its first line is list"),
    ("header is a number", trace("1"), 1, "not a teachspec trace: its first line is int 1"),
    ("header of another format", trace('{"format": "chrome-trace", "version": 1}'), 1, "not a teachspec trace"),
    ("blank first line", trace("", HEADER), 1, "not JSON"),
    ("header without version", trace('{"format": "teachspec-trace"}'), 1, "version must be a whole number"),
    ("version as a string", trace('{"format": "teachspec-trace", "version": "1"}'), 1, "version must be .*str '1'"),
    ("version 0", trace('{"format": "teachspec-trace", "version": 0}'), 1, "version must be .*>= 1, got int 0"),
    ("version true", trace('{"format": "teachspec-trace", "version": true}'), 1, "version must be .*bool True"),
    ("version 1.5", trace('{"format": "teachspec-trace", "version": 1.5}'), 1, "version must be .*float 1.5"),
    ("future version", trace(json.dumps({"format": "teachspec-trace", "version": VERSION + 1})), 1,
     f"version {VERSION + 1} trace; this teachspec reads versions up to {VERSION}: upgrade"),
    ("last line cut short", trace(HEADER, json.dumps(ROWS[0]), json.dumps(ROWS[1])[:-9]), 3,
     "not JSON .*truncated or corrupted"),
    ("a line of garbage", trace(HEADER, "hello", json.dumps(ROWS[0])), 2, "not JSON"),
    ("event is a list", trace(HEADER, json.dumps(list(ROWS[0].values()))), 2, "must be a JSON object .* got list"),
    ("event is a string", trace(HEADER, '"accept"'), 2, "must be a JSON object .* got str 'accept'"),
    ("event is null", trace(HEADER, "null"), 2, "must be a JSON object .* got null"),
    ("event is a number", trace(HEADER, "3.5"), 2, "must be a JSON object .* got float 3.5"),
    ("no kind", with_row(3, {k: v for k, v in ROWS[3].items() if k != "kind"}), 5, 'no "kind"; known kinds'),
    ("unknown kind", with_row(0, {**ROWS[0], "kind": "teleport"}), 2, "unknown kind 'teleport'; known kinds"),
    ("kind not a string", with_row(0, {**ROWS[0], "kind": 3}), 2, 'the "kind" must be a string .* got int 3'),
    ("unknown field", with_row(2, {**ROWS[2], "colour": "red"}), 4, r"unknown fields \['colour'\]"),
    ("the issue's token 'seven'", with_row(4, {**ROWS[4], "token": "seven"}), 6,
     "field 'token' of this 'accept' event must be int, got str 'seven'"),
    ("the issue's request 'zero'", with_row(1, {**ROWS[1], "request": "zero"}), 3,
     "field 'request' of this 'prefill' event must be int, got str 'zero'"),
    ("a bool for an int", with_row(1, {**ROWS[1], "cached": True}), 3, "'cached' .* must be int, got bool True"),
    ("a float for an int", with_row(1, {**ROWS[1], "cached": 1.5}), 3, "'cached' .* must be int, got float 1.5"),
    ("a top pair of one", with_row(4, {**ROWS[4], "top_p": [[9]]}), 6,
     r"'top_p' .* must be list\[tuple\[int, float\]\] \| None, got list \[\[9\]\]"),
    ("a top pair backwards", with_row(4, {**ROWS[4], "top_p": [[0.6, 9]]}), 6, "'top_p' .* must be list"),
    ("a token list with a string", with_row(2, {**ROWS[2], "tokens": [9, "8"]}), 4,
     r"'tokens' .* must be list\[int\], got list \[9, '8'\]"),
]
FIRST = {row["kind"]: i for i, row in reversed(list(enumerate(ROWS)))}  # kind -> its first row
for kind, i in FIRST.items():  # every field of every kind: missing, and of the wrong type
    row = ROWS[i]
    for f in fields(KINDS[kind]):
        annotation = str(f.type)
        if f.default is MISSING and f.default_factory is MISSING:
            CASES.append((f"{row['kind']} without {f.name}", with_row(i, {k: v for k, v in row.items() if k != f.name}),
                          i + 2, f"this '{row['kind']}' event needs the field '{f.name}'"))
        CASES.append((f"{row['kind']} with a wrong {f.name}", with_row(i, {**row, f.name: wrong_value(annotation)}),
                      i + 2, f"the field '{f.name}' of this '{row['kind']}' event must be"))


@pytest.mark.parametrize("contents, line, problem", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_malformed_trace_is_refused_naming_the_file_the_line_and_the_problem(tmp_path, contents, line, problem):
    path = tmp_path / "trace.jsonl"
    path.write_bytes(contents)
    with pytest.raises(TraceError) as raised:
        EventLog.load(path)
    message = str(raised.value)
    assert message.startswith(f"{path}, line {line}: "), message
    assert re.search(problem, message), message
    assert isinstance(raised.value, ValueError)                 # what callers caught before keeps working


def test_there_are_at_least_30_kinds_of_malformed_trace():
    assert len(CASES) >= 30 and len({name for name, *_ in CASES}) == len(CASES)


def test_the_valid_trace_the_cases_start_from_loads(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_bytes(trace(HEADER, *map(json.dumps, ROWS)))
    assert EventLog.load(path).to_dicts() == ROWS


def test_nothing_is_returned_from_a_trace_whose_last_line_is_bad(tmp_path):
    """No partly loaded log: thousands of good events before the bad line make no difference."""
    rows = [json.dumps(ROWS[1])] * 2000 + ['{"kind": "prefill", "t": 0.1, "request": 0, "cached": 1']
    path = tmp_path / "trace.jsonl"
    path.write_bytes(trace(HEADER, *rows))
    with pytest.raises(TraceError, match=f"line {len(rows) + 1}: not JSON"):
        EventLog.load(path)


def test_from_dicts_checks_each_row_the_same_way():
    with pytest.raises(TraceError, match="event 1: the field 'request' of this 'prefill' event must be int"):
        EventLog.from_dicts([ROWS[0], {**ROWS[1], "request": "zero"}])
    with pytest.raises(TraceError, match="event 0: an event must be a JSON object"):
        EventLog.from_dicts([[1, 2]])


def test_what_json_writes_loosely_still_loads(tmp_path):
    """An int where a float is annotated (JSON may write 2.0 as 2) becomes a float; Windows line ends and an
    editor's byte-order mark are harmless; blank lines between events are skipped."""
    row = {**ROWS[1], "ms": 2, "t": 0}
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + (HEADER + "\r\n\r\n" + json.dumps(row) + "\r\n").encode())
    [event] = EventLog.load(path).events
    assert isinstance(event, Prefill) and type(event.ms) is float and event.ms == 2.0 and type(event.t) is float


def test_a_missing_file_is_still_a_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.jsonl"):
        EventLog.load(tmp_path / "nowhere.jsonl")


# -- values that parse but mean nothing ----------------------------------------------------------------------------
# Every field whose annotation gives a range (events.py, "what a value may be"), of every kind: one value moved just
# outside it, everything else as in the valid trace. The ranges are read from the annotations, so a field that gains
# one is damaged here too.

def _beyond(rule) -> list:
    """Values just outside a Range or a OneOf."""
    if isinstance(rule, OneOf):
        return ["teleport", ""]
    out = []
    if rule.low is not None:
        out.append(rule.low - 1)
    if rule.high is not None:
        out.append(rule.high + 0.01)
    return out


def _damaged(value, hint) -> list:
    """Copies of `value` with one number or name moved outside what `hint` allows (the first item, for a list)."""
    if typing.get_origin(hint) is typing.Annotated:
        return _beyond(hint.__metadata__[0])
    if value is None:
        return []
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return _damaged(value, next(a for a in args if a is not type(None)))
    if origin is list and value:
        return [[bad, *value[1:]] for bad in _damaged(value[0], args[0])]
    if origin is tuple:
        return [[*value[:j], bad, *value[j + 1:]] for j, a in enumerate(args) for bad in _damaged(value[j], a)]
    return []


PRESENT = {"top_p": [[9, 0.6]], "top_q": [[9, 0.5]], "top_residual": [[2, 0.4]], "ids": [1, 2, 3, 4, 5],
           "proposed": [3, 4], "replica": 1}  # for the optional fields the valid trace leaves out (the insert's ids:
# one per each of its 5 tokens; a suffix tree's match proposes nodes below it; a cluster's replica)
MEANINGLESS = []
for kind, i in FIRST.items():
    row, hints = ROWS[i], typing.get_type_hints(KINDS[kind], include_extras=True)
    for name, hint in hints.items():
        if name == "kind":
            continue
        for bad in _damaged(PRESENT.get(name) if row.get(name) is None else row[name], hint):
            MEANINGLESS.append((f"{kind} with {name} = {bad!r}", with_row(i, {**row, name: bad}), i + 2,
                                rf"the field '{name}' of this '{kind}' event must be (>=|<=|in|one of)"))


def test_every_field_with_a_range_is_damaged_somewhere():
    ranged = {(kind, name) for kind, cls in KINDS.items() for name, hint in
              typing.get_type_hints(cls, include_extras=True).items() if "Annotated" in str(hint)}
    damaged = {tuple(case[0].split(" with ")[0:1]) + (case[0].split(" with ")[1].split(" = ")[0],)
               for case in MEANINGLESS}
    assert ranged <= damaged, ranged - damaged


# Fields that each hold a possible value, together impossible; and judgments of steps that never happened.
def _rows_with(*changes: tuple[int, dict]) -> bytes:
    rows = [dict(r) for r in ROWS]
    for i, change in changes:
        rows[i] = {**rows[i], **change}
    return trace(HEADER, *map(json.dumps, rows))


ROW = {kind: i for kind, i in FIRST.items()}
DISAGREEING = [
    ("a draft with more q than tokens", _rows_with((ROW["draft"], {"q": [0.5, 0.25, 0.1]})), ROW["draft"] + 2,
     "'q' .* must hold one probability per drafted token"),
    ("a prompt that is not prompt_tokens long", _rows_with((ROW["request_start"], {"prompt_tokens": 2})),
     ROW["request_start"] + 2, "'prompt' .* must hold prompt_tokens = 2 ids"),
    ("a score with a log-probability short", _rows_with((ROW["score"], {"logprobs": []})), ROW["score"] + 2,
     "'logprobs' .* one log-probability per token"),
    ("a tree whose root has a parent", _rows_with((ROW["tree_draft"], {"parents": [0, 0, 0]})),
     ROW["tree_draft"] + 2, "'parents' .* make a tree"),
    ("a tree with a parent after its child", _rows_with((ROW["tree_draft"], {"parents": [-1, 2, 0]})),
     ROW["tree_draft"] + 2, r"'parents' .* 0 <= parents\[1\] < 1"),
    ("a tree with a token short", _rows_with((ROW["tree_draft"], {"tokens": [4, 11]})), ROW["tree_draft"] + 2,
     "'tokens' .* one token per node"),
    ("a match whose path ends elsewhere", _rows_with((ROW["match"], {"path": [0, 1]})), ROW["match"] + 2,
     "'path' .* end at the matched node 2"),
    ("an insert with ids for fewer tokens", _rows_with((ROW["insert"], {"ids": [1, 2]})), ROW["insert"] + 2,
     "'ids' .* one id per new token"),
    ("a span that ends before it starts", _rows_with((ROW["program_span"], {"stop": 6})), ROW["program_span"] + 2,
     "'stop' .* >= start"),
    ("more accepted than drafted", _rows_with((ROW["counters"], {"accepted": 7})), ROW["counters"] + 2,
     "'accepted' .* <= draft_tokens"),
    ("more prefix hits than queries", _rows_with((ROW["counters"], {"prefix_hits": 41})), ROW["counters"] + 2,
     "'prefix_hits' .* <= prefix_queries"),
    ("a judgment past the draft: i = 7 for k = 2", _rows_with((ROW["reject"], {"i": 7})), ROW["reject"] + 2,
     "'i' of this 'reject' event must be < 2"),
    ("a resample of a step never drafted", _rows_with((ROW["resample"], {"step": 9})), ROW["resample"] + 2,
     "'step' of this 'resample' event must be a step of request 1 drafted or verified before it"),
    ("a bonus for another request's step", _rows_with((ROW["bonus"], {"request": 2})), ROW["bonus"] + 2,
     "'step' of this 'bonus' event must be a step of request 2"),
]


@pytest.mark.parametrize("contents, line, problem", [c[1:] for c in MEANINGLESS + DISAGREEING],
                         ids=[c[0] for c in MEANINGLESS + DISAGREEING])
def test_a_trace_that_parses_but_means_nothing_is_refused_naming_the_line_and_the_field(tmp_path, contents, line,
                                                                                        problem):
    test_a_malformed_trace_is_refused_naming_the_file_the_line_and_the_problem(tmp_path, contents, line, problem)


def test_values_at_the_ends_of_their_ranges_load(tmp_path):
    """The checks refuse only what is outside: a request of -1, a count of 0, a probability of 1 and one rounded
    by float32 just past it, a log-probability of 0, and judgments in a trace that records no steps at all."""
    edges = _rows_with((ROW["prefill"], {"cached": 0, "request": -1}),
                       (ROW["accept"], {"p": 1.0000001, "q": 1.0, "u": 0.0}),
                       (ROW["score"], {"logprobs": [0.0]}))
    path = tmp_path / "trace.jsonl"
    path.write_bytes(edges)
    assert len(EventLog.load(path).events) == len(ROWS)
    judged_only = [r for r in ROWS if r["kind"] in ("accept", "reject", "resample", "bonus")]
    path.write_bytes(trace(HEADER, *map(json.dumps, judged_only)))
    assert len(EventLog.load(path).events) == len(judged_only)


def test_check_event_is_the_same_check_for_one_event():
    event = EventLog.from_dicts([ROWS[ROW["verify"]]]).events[0]
    event.n = 0
    with pytest.raises(TraceError, match=r"an event: the field 'n' of this 'verify' event must be >= 1, got 0"):
        check_event(event)
