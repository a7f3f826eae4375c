"""Event subscribers: only callables are taken, and one that raises is reported, dropped, and poisons nothing."""

from __future__ import annotations

import re
import warnings

import pytest

from teachspec.events import Bonus, EventLog


def emit(log: EventLog):
    return log.emit(Bonus, 0, step=0, position=1, token=2, p=0.5)


@pytest.mark.parametrize("bad", [42, "print", None, [print]])
def test_subscribe_takes_only_callables(bad):
    """The issue's repro: subscribe(42) was accepted, and every later event failed with "'int' object is not
    callable". Now it is refused, naming the value, and the log works on as before."""
    log = EventLog()
    with pytest.raises(TypeError, match=f"fn must be callable .*, got {type(bad).__name__} {re.escape(repr(bad))}"):
        log.subscribe(bad)
    assert emit(log) is log[0]


def test_a_subscriber_that_raises_is_reported_once_by_name_dropped_and_its_error_propagates():
    log, before, after = EventLog(), [], []

    def broken_view(event):
        raise ValueError("cannot draw")

    log.subscribe(before.append)
    log.subscribe(broken_view)
    log.subscribe(after.append)
    with pytest.warns(RuntimeWarning) as warned, pytest.raises(ValueError, match="cannot draw"):
        emit(log)
    assert len(warned) == 1
    assert re.search(r"broken_view raised ValueError\(cannot draw\) on event 'bonus'; it is unsubscribed",
                     str(warned[0].message))
    first = log[0]
    assert before == after == [first]                           # in the log, and every other subscriber got it
    with warnings.catch_warnings():
        warnings.simplefilter("error")                          # no second report, no second failure
        second = emit(log)
    assert before == after == [first, second]


def test_two_subscribers_that_raise_are_both_reported_and_the_first_error_propagates():
    log = EventLog()

    def first_view(event):
        raise ValueError("first")

    def second_view(event):
        raise KeyError("second")

    log.subscribe(first_view)
    log.subscribe(second_view)
    with pytest.warns(RuntimeWarning) as warned, pytest.raises(ValueError, match="first"):
        emit(log)
    assert ["first_view" in str(w.message) for w in warned] == [True, False]
    assert "second_view" in str(warned[1].message)
    emit(log)                                                    # both are gone


def test_a_keyboard_interrupt_in_a_subscriber_propagates_and_the_subscriber_stays():
    """Stopping the kernel while a view draws is not the view's fault: it stays subscribed."""
    log, calls = EventLog(), []

    def view(event):
        calls.append(event)
        if len(calls) == 1:
            raise KeyboardInterrupt

    log.subscribe(view)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(KeyboardInterrupt):
            emit(log)
        emit(log)
    assert calls == list(log)


def test_a_subscriber_may_unsubscribe_itself_while_it_is_called():
    log, seen = EventLog(), []

    def once(event):
        unsubscribe()

    unsubscribe = log.subscribe(once)
    log.subscribe(seen.append)
    emit(log)                                                    # the next subscriber is not skipped
    emit(log)
    assert seen == list(log)
    unsubscribe()                                                # a second unsubscribe is harmless
