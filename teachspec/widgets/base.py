"""What every view shares: turn events into frames, replay a finished log or follow a live one, send to the browser.

A view is a small state machine over events. A subclass says how one event changes its items (`_step`, calling
`_put` and `_drop`, or `_replace` with all of them) and what its `_meta` is; this class records each event's
changes as a frame (frames.py) and sends the frames to the browser:

    replay   View(log)          consumes every event already in the log, once
    live     view.attach(log)   subscribes; events are buffered and turned into frames at most 20 times a second
                                by a timer thread (see live.py), so the engine never waits for the browser
    both     View.live(log)     replays what is there, then follows

Either way the result is the same list of frames: a test checks that a view following a log live holds, after
every event, exactly the state a view replaying the same events would.

How the frames travel matters once a log is long. A synced trait is sent whole each time it is set, so setting
all frames twenty times a second would cost O(all frames) per update: in the kernel, on the wire and in the
browser, which parses them again. So a live view sends *snapshot plus deltas*:

    frames_json   the trait: the bytes of one JSON array of every frame, set when a replay view is built, on
                  flush() and detach(), and while following only when the frames have doubled in size since it
                  was last set (so each frame travels in it O(1) times on average)
    a message     at every other update: {"start": n} and one buffer holding frames n, n + 1, ... as a JSON array

The browser appends each delta whose `start` is the number of frames it has; one that leaves a gap (a view
displayed while the engine runs can miss the first messages) is ignored until the next `frames_json`, which holds
everything. Saved widget state, an HTML export and Voila read `frames_json`, complete once the view stops
following. Each new batch of frames is JSON-encoded once, in one call, and kept as bytes: setting the trait joins
bytes, and the widget protocol ships bytes as a binary buffer, unparsed.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from teachspec.events import Event, EventLog
from teachspec.widgets import export
from teachspec.widgets.frames import Snapshot
from teachspec.widgets.live import Throttle
from teachspec.widgets.text import TokenText


class ReplayView(anywidget.AnyWidget):
    frames_json = traitlets.Bytes(b"[]").tag(sync=True)  # every frame so far: one UTF-8 JSON array
    frame = traitlets.Int(-1).tag(sync=True)          # the frame on screen (the browser's controls set it); -1: newest
    empty = traitlets.Unicode("").tag(sync=True)      # what the view says while it has no frames
    error = traitlets.Unicode("").tag(sync=True)      # why a live view stopped following, shown in red
    following = traitlets.Bool(False).tag(sync=True)  # attached to a live log

    nothing = "This log holds no events to show."     # the empty view's words; subclasses say more

    def __init__(self, log: EventLog | None = None, decode: Any = None, interval: float = 0.05):
        super().__init__()
        if not (isinstance(interval, (int, float)) and interval > 0):
            raise ValueError(f"interval must be a number of seconds > 0 (0.05: at most 20 updates a second), "
                             f"got {interval!r}")
        self.text = TokenText(decode)
        self.interval = float(interval)
        self.failure: Exception | None = None    # what stopped a live view, re-raised by flush() and detach()
        self.publishes = 0                       # times the frames were sent to the browser
        self.work_s = 0.0                        # CPU seconds the timer thread spent on this view's live updates
        self.items: dict[str, dict] = {}         # the state now: key -> item
        self.meta: dict = {}
        self._lock = threading.RLock()           # the timer thread and the caller's thread both consume events
        self._frames: list[dict] = []
        self._chunks: list[bytes] = []           # the frames as JSON, one chunk per batch: b'{..},{..}', no brackets
        self._encoded = 0                        # frames in the chunks so far
        self._size = self._synced = 0            # bytes in the chunks, and in them when frames_json was last set
        self._changed: dict[str, bool] = {}      # keys the current event put or dropped -> did it exist before
        self._caption, self._event = "", -1      # of the newest frame
        self._seen = 0                           # events consumed: the index of the next one
        self._throttle: Throttle | None = None
        self._unsubscribe = None
        if log is not None:
            self._consume(_check_log(log).events)
        self._publish()

    # -- what a subclass provides -------------------------------------------------------------------------------

    def _step(self, event: Event, index: int) -> str | None:
        """Apply one event to the view's state; return a caption if the view changed, None to make no frame."""
        raise NotImplementedError

    def _meta(self) -> dict:
        raise NotImplementedError

    # -- changing items ------------------------------------------------------------------------------------------

    def _put(self, item: dict) -> None:
        """Add or replace an item (never change one in place: frames hold references to the old ones)."""
        key = item["key"]
        self._changed.setdefault(key, key in self.items)
        self.items[key] = item

    def _drop(self, key: str) -> None:
        self._changed.setdefault(key, True)
        del self.items[key]

    def _replace(self, items: dict[str, dict]) -> None:
        """Make `items` the whole state; only what differs goes into the frame."""
        for key in [k for k in self.items if k not in items]:
            self._drop(key)
        for key, item in items.items():
            if self.items.get(key) != item:
                self._put(item)

    # -- replay --------------------------------------------------------------------------------------------------

    @property
    def frames(self) -> list[dict]:
        """Every frame so far (frames.py); the browser receives them as `frames_json`."""
        with self._lock:
            return list(self._frames)

    def snapshot(self) -> Snapshot:
        """The view's state after the last event it consumed (what the browser shows at the newest frame)."""
        with self._lock:
            return Snapshot(dict(self.items), self.meta, self._caption, self._event)

    def _consume(self, events: list[Event]) -> None:
        with self._lock:
            for event in events:
                index, self._seen = self._seen, self._seen + 1
                caption = self._step(event, index)
                if caption is None:
                    continue
                frame = {"event": index, "caption": caption,
                         "put": [self.items[k] for k in self._changed if k in self.items],
                         "drop": [k for k, existed in self._changed.items() if existed and k not in self.items]}
                meta = self._meta()
                if meta != self.meta:
                    frame["meta"] = self.meta = meta
                self._changed = {}
                self._frames.append(frame)
                self._caption, self._event = caption, index

    def _publish(self, whole: bool = True) -> None:
        """Send the frames made since the last time: all of them as `frames_json` if `whole`, else a delta."""
        with self._lock, self.hold_sync():  # the traits that changed go in one message
            start, new = self._encoded, self._frames[self._encoded:]
            if new:  # the batch is encoded in one call; its brackets come off so chunks join into one array
                chunk = json.dumps(new, ensure_ascii=False, separators=(",", ":")).encode()[1:-1]
                self._chunks.append(chunk)
                self._encoded, self._size = len(self._frames), self._size + len(chunk)
            if whole or self._size > 2 * self._synced:
                self.frames_json = b"[" + b",".join(self._chunks) + b"]"
                self._synced = self._size
            elif new:
                self.send({"start": start}, [b"[" + chunk + b"]"])
            self.empty = "" if self._frames else ("Waiting for events..." if self.following else self.nothing)
            self.publishes += 1

    # -- without a kernel ----------------------------------------------------------------------------------------

    def to_html(self, path: str | Path) -> Path:
        """Write this view's replay as one self-contained HTML file that plays offline (export.py)."""
        return export.export_html(self, path)

    def _repr_mimebundle_(self, **kwargs):
        """The widget, plus the replay as plain HTML for pages with no widget manager (an nbconvert export).

        The HTML holds the frames there are when the view is displayed: all of a replay's, none of a live view's.
        """
        data, metadata = super()._repr_mimebundle_(**kwargs)
        with self._lock:
            self._publish()  # frames_json up to date (a live view sends deltas between snapshots)
            return {**data, "text/html": export.fragment(self)}, metadata

    # -- live ----------------------------------------------------------------------------------------------------

    @classmethod
    def live(cls, log: EventLog, **kwargs) -> "ReplayView":
        """A view of everything already in `log` that keeps following it."""
        return cls(log, **kwargs).attach(log)

    def attach(self, log: EventLog) -> "ReplayView":
        """Follow `log` from now on (events already in it are not replayed: build the view from it for those)."""
        _check_log(log)
        if self._throttle is not None:
            raise ValueError("this view already follows a log; call detach() before attaching it to another")
        self._throttle = Throttle(self._flush_live, self.interval)
        self._unsubscribe = log.subscribe(self._throttle.add)
        self.following = True
        self._publish()
        return self

    def flush(self) -> "ReplayView":
        """Turn every buffered event into frames and send them all now, instead of at the next tick."""
        if self.failure is not None:
            raise self.failure
        if self._throttle is not None:
            self._throttle.hand_over()  # in this thread, in turn with the timer's hand-overs
            self._publish()
        if self.failure is not None:
            raise self.failure
        return self

    def detach(self) -> "ReplayView":
        """Stop following: the buffered events are shown, later ones are not."""
        if self._throttle is not None:
            self._unsubscribe()
            self._throttle.close()  # its last flush shows what was still buffered
            self._throttle = self._unsubscribe = None
            self.following = False
            self._publish()
        if self.failure is not None:
            raise self.failure
        return self

    def _flush_live(self, batch: list[Event]) -> None:
        """The timer thread's work. An exception here would vanish with the thread, so it is shown in the view."""
        if self.failure is not None:  # the view's state is broken: it shows the error, not later events
            return
        start = time.thread_time()
        try:
            with self._lock:
                self._consume(batch)
                self._publish(whole=False)
            self.work_s += time.thread_time() - start
        except Exception as e:  # any error at all: shown to the student, kept for flush() and detach() to raise
            self.failure = e
            if self._unsubscribe is not None:
                self._unsubscribe()
            self.error = f"{type(e).__name__}: {e}"
            self.following = False


def _check_log(log: Any) -> EventLog:
    if not isinstance(log, EventLog):
        raise TypeError(f"log must be an EventLog (engine.events, or EventLog.load(path)), got {type(log).__name__}")
    return log
