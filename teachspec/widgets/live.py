"""Following a running engine without slowing it: buffer every event, hand them over at most 20 times a second.

The engine calls its log's subscribers synchronously, inside its decoding loop, so whatever a subscriber does is
time the engine does not decode. A live view therefore subscribes `Throttle.add`, which appends the event to a
deque (atomic, so there is no lock to take) and, if the worker thread is asleep, wakes it. The worker
waits out the rest of the interval, takes the whole batch and calls `flush(batch)`, which turns the events into
frames and sends the new ones to the browser in one message. Between bursts the worker sleeps until woken: an
idle live view costs nothing.

Why time-based: a browser redraw per event would mean one widget message per token, thousands a second on a
fast model, which is slower than the decoding it shows. Twenty updates a second already looks continuous; the
browser animates within a batch by itself.

`Following` is one view following one log: it subscribes the throttle, hands each batch to the view's `update`,
and, because an exception in the worker thread would vanish with the thread, keeps the first one as `failure`
and stops following, for the view to show and for `flush()` and `detach()` to raise.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable

from teachspec.events import Event, EventLog


class Throttle:
    """Collect items from a fast producer; call `flush(batch)` at most once per `interval` seconds."""

    def __init__(self, flush: Callable[[list], None], interval: float = 0.05):
        if not (isinstance(interval, (int, float)) and interval > 0):
            raise ValueError(f"interval must be a number of seconds > 0, got {interval!r}")
        self._flush, self.interval = flush, float(interval)
        self._pending: deque = deque()
        self._asleep = True               # read by add() without a lock: at worst one wake-up too many
        self._wake = threading.Event()    # set when items arrive while the worker sleeps, or on close
        self._closed = threading.Event()  # set by close(); also cuts short the wait between flushes
        self._handing = threading.Lock()  # one hand-over at a time, so batches reach `flush` in order
        self.flushes = 0                  # batches handed over so far
        # a daemon: a forgotten view never keeps Python from exiting
        self._worker = threading.Thread(target=self._run, name="teachspec-live-view", daemon=True)
        self._worker.start()

    def add(self, item: Any) -> None:
        """The producer's side: one append, and a wake-up when the worker sleeps."""
        self._pending.append(item)
        if self._asleep:
            self._asleep = False
            self._wake.set()

    def hand_over(self) -> None:
        """Call `flush` with everything buffered, now (the worker does this by itself every interval)."""
        with self._handing:
            # popleft exactly the items there now: the producer may append more meanwhile, they wait their turn
            batch = [self._pending.popleft() for _ in range(len(self._pending))]
            if batch:
                self.flushes += 1
                self._flush(batch)

    def _run(self) -> None:
        last = -float("inf")
        while True:
            self._wake.wait()
            self._closed.wait(last + self.interval - time.monotonic())  # at most one flush per interval
            # cleared, then asleep, then the batch: an add() that still saw the worker awake appended before
            # the batch is taken; one that sees it asleep sets the flag after the clear, waking the next round
            self._wake.clear()
            self._asleep = True
            last = time.monotonic()
            self.hand_over()
            if self._closed.is_set():
                self.hand_over()  # what arrived during the last flush
                return

    def close(self) -> None:
        """Flush what is buffered and stop the worker; no flush happens after this returns."""
        self._closed.set()
        self._wake.set()
        self._worker.join()


class Following:
    """`update(batch)` called with the events `log` receives, at most once per `interval`, until `stop()`."""

    def __init__(self, log: EventLog, update: Callable[[list[Event]], None], on_failure: Callable[[Exception], None],
                 interval: float = 0.05):
        self._update, self._on_failure = update, on_failure
        self.failure: Exception | None = None
        self.work_s = 0.0                 # CPU seconds the worker spent in `update`
        self._throttle = Throttle(self._run, interval)
        self._unsubscribe: Callable[[], None] | None = log.subscribe(self._throttle.add)

    def _run(self, batch: list[Event]) -> None:
        if self.failure is not None:  # the view's state is broken: it shows the error, not later events
            return
        start = time.thread_time()
        try:
            self._update(batch)
            self.work_s += time.thread_time() - start
        except Exception as e:  # any error at all: kept, and shown by the view
            self.failure = e
            self._unsubscribe_once()
            self._on_failure(e)

    def _unsubscribe_once(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def flush(self) -> None:
        """Hand over what is buffered now, in this thread, in turn with the worker's hand-overs."""
        self._throttle.hand_over()

    def stop(self) -> None:
        """Unsubscribe, then hand over what was still buffered and end the worker."""
        self._unsubscribe_once()
        self._throttle.close()
