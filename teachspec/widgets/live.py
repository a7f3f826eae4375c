"""Following a running engine without slowing it: buffer every event, hand them over at most 20 times a second.

The engine calls its log's subscribers synchronously, inside its decoding loop, so whatever a subscriber does is
time the engine does not decode. A live view therefore subscribes `Throttle.add`, which only appends the event to
a list and, if the list was empty, wakes a worker thread. The worker waits out the rest of the interval, takes
the whole batch and calls `flush(batch)`, which turns the events into frames and sends them to the browser once.

Why time-based: a browser redraw per event would mean one widget message per token, thousands a second on a
fast model, which is slower than the decoding it shows. Twenty updates a second already looks continuous; the
browser animates within a batch by itself.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable


class Throttle:
    """Collect items from a fast producer; call `flush(batch)` at most once per `interval` seconds."""

    def __init__(self, flush: Callable[[list], None], interval: float = 0.05):
        if not (isinstance(interval, (int, float)) and interval > 0):
            raise ValueError(f"interval must be a number of seconds > 0, got {interval!r}")
        self._flush, self.interval = flush, float(interval)
        self._pending: list = []
        self._lock = threading.Lock()     # add() runs on the engine's thread, the flush on the worker's
        self._wake = threading.Event()    # set when the buffer stops being empty, or on close
        self._closed = threading.Event()  # set by close(); also cuts short the wait between flushes
        self.flushes = 0                  # batches handed over so far
        # a daemon: a forgotten view never keeps Python from exiting
        self._worker = threading.Thread(target=self._run, name="teachspec-live-view", daemon=True)
        self._worker.start()

    def add(self, item: Any) -> None:
        """The producer's side: one append, and a wake-up when the buffer was empty."""
        with self._lock:
            self._pending.append(item)
            first = len(self._pending) == 1
        if first:
            self._wake.set()

    def take(self) -> list:
        """Everything buffered, now, leaving the buffer empty (for an explicit flush)."""
        with self._lock:
            batch, self._pending = self._pending, []
            return batch

    def _run(self) -> None:
        last = -float("inf")
        while True:
            self._wake.wait()
            self._closed.wait(last + self.interval - time.monotonic())  # at most one flush per interval
            self._wake.clear()
            last = time.monotonic()
            self._hand_over()
            if self._closed.is_set():
                self._hand_over()  # what arrived during the last flush
                return

    def _hand_over(self) -> None:
        batch = self.take()
        if batch:
            self.flushes += 1
            self._flush(batch)

    def close(self) -> None:
        """Flush what is buffered and stop the worker; no flush happens after this returns."""
        self._closed.set()
        self._wake.set()
        self._worker.join()
