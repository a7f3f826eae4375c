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
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable


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
