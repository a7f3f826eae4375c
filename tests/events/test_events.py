"""The event log: the contract between engine and widgets must round-trip exactly and notify subscribers."""

import json

import pytest

from helpers.events import sample_log
from teachspec.events import KINDS, VERSION, Accept, Bonus, Evict, EventLog, Reject


def test_every_kind_is_exercised_and_round_trips(tmp_path):
    log = sample_log()
    assert {e.kind for e in log} == set(KINDS)
    path = log.save(tmp_path / "trace.jsonl")
    again = EventLog.load(path)
    assert again.events == log.events
    assert [type(e) for e in again] == [type(e) for e in log]


def test_file_format_is_versioned_json_lines(tmp_path):
    path = sample_log().save(tmp_path / "trace.jsonl")
    lines = path.read_text().splitlines()
    assert json.loads(lines[0]) == {"format": "teachspec-trace", "version": VERSION}
    assert json.loads(lines[5])["kind"] == "accept" and json.loads(lines[5])["top_p"] == [[9, 0.6], [2, 0.1]]


def test_times_increase_and_requests_are_kept():
    log = sample_log()
    times = [e.t for e in log]
    assert times == sorted(times) and times[0] >= 0
    assert [e.request for e in log.of(Evict)] == [-1]


def test_subscribers_see_each_event_once_until_they_unsubscribe():
    log, seen = EventLog(), []
    unsubscribe = log.subscribe(seen.append)
    first = log.emit(Bonus, 0, step=0, position=1, token=2, p=0.5)
    unsubscribe()
    log.emit(Bonus, 0, step=1, position=2, token=3, p=0.5)
    assert seen == [first]
    assert len(log) == 2


def test_slicing_and_filtering():
    log = sample_log()
    part = log[2:5]
    assert isinstance(part, EventLog) and [e.kind for e in part] == ["draft", "verify", "accept"]
    assert log[0].kind == "request_start"
    assert [e.token for e in log.of(Accept, Reject)] == [9, 8]


def test_newer_version_is_refused_with_a_clear_error(tmp_path):
    path = tmp_path / "future.jsonl"
    path.write_text(json.dumps({"format": "teachspec-trace", "version": VERSION + 1}) + "\n")
    with pytest.raises(ValueError, match=f"version {VERSION + 1}.*upgrade"):
        EventLog.load(path)


def test_not_a_trace_unknown_kind_and_missing_file(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"hello": 1}\n')
    with pytest.raises(ValueError, match="not a teachspec trace"):
        EventLog.load(bad)
    bad.write_text(json.dumps({"format": "teachspec-trace", "version": 1}) + '\n{"kind": "teleport", "t": 0}\n')
    with pytest.raises(ValueError, match="unknown kind 'teleport'"):
        EventLog.load(bad)
    with pytest.raises(FileNotFoundError, match="nowhere.jsonl"):
        EventLog.load(tmp_path / "nowhere.jsonl")


def test_empty_log_round_trips(tmp_path):
    assert len(EventLog.load(EventLog().save(tmp_path / "empty.jsonl"))) == 0


def test_a_version_1_trace_reads_its_plain_events_as_verify_and_bonus(tmp_path):
    """Version 1 recorded plain decoding as Plain events; version 2 as the engine's k = 0 step."""
    path = tmp_path / "v1.jsonl"
    path.write_text(json.dumps({"format": "teachspec-trace", "version": 1}) + "\n"
                    + json.dumps({"kind": "plain", "t": 0.5, "request": 3, "step": 0, "position": 7, "token": 42,
                                  "p": 0.25, "ms": 1.5}) + "\n")
    verify, bonus = EventLog.load(path)
    assert (verify.kind, verify.request, verify.step, verify.position, verify.n, verify.ms) == \
        ("verify", 3, 0, 7, 1, 1.5)
    assert (bonus.kind, bonus.t, bonus.position, bonus.token, bonus.p) == ("bonus", 0.5, 7, 42, 0.25)
    assert "plain" not in KINDS


def test_a_trace_records_the_pair_that_made_it_and_a_replay_finds_its_text_from_that(tmp_path):
    from teachspec import Engine, load_pair
    from teachspec.widgets import SpeculationView

    engine = Engine(load_pair("tiny"))
    out = engine.generate("Return a new dictionary", 6)
    path = engine.events.save(tmp_path / "trace.jsonl")
    assert json.loads(path.read_text().splitlines()[0])["pair"] == "tiny"
    log = EventLog.load(path)
    assert log.pair == "tiny"
    assert "Return a new dictionary" in SpeculationView(log).frames_json.decode()  # no decode= given
    log.pair = "some/unknown-pair"  # a pair this machine cannot load: the replay shows ids, and does not fail
    assert "Return a new dictionary" not in SpeculationView(log).frames_json.decode() and out.tokens


def test_a_header_pair_that_is_not_a_name_is_refused(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"format": "teachspec-trace", "version": VERSION, "pair": 7}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl, line 1: the header's pair must be the name of a pair"):
        EventLog.load(path)
