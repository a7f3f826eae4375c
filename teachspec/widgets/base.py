"""ReplayView: a view's frames, sent to the browser; the parent of SpeculationView and RadixTreeView.

A view is a small state machine over events (frames.py's Recorder): a subclass says how one event changes its
items (`_step`, calling `_put` and `_drop`, or `_replace` with all of them) and what its `_meta` is. This class
feeds it events and sends the frames it makes to the browser:

    replay   View(log)          consumes every event already in the log, once
    live     view.attach(log)   follows the log (live.py): events are buffered and turned into frames at most 20
                                times a second by a timer thread, so the engine never waits for the browser
    both     View.live(log)     replays what is there, then follows

Either way the result is the same list of frames: a test checks that a view following a log live holds, after
every event, exactly the state a view replaying the same events would. A page or a file of its own is page.py's
job (`to_html`, and the text/html a notebook export shows); several views of one trace, export.py's.

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

Views of one log are *linked*: they share `link`, and in the browser stepping any one of them moves the others to
the same event (widgets/player.js), in a notebook and in an exported page alike.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
import weakref
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from teachspec.busy import Watch, warning
from teachspec.events import Event, EventLog
from teachspec.widgets import page
from teachspec.widgets.frames import Recorder, Snapshot, replay
from teachspec.widgets.live import Following
from teachspec.widgets.text import TokenText, decoder

_LINKS: "weakref.WeakKeyDictionary[EventLog, str]" = weakref.WeakKeyDictionary()  # log -> its views' link


def link_of(log: EventLog | None) -> str:
    """The link every view of `log` shares (a fresh one for a view of no log)."""
    if log is None:
        return uuid.uuid4().hex[:12]
    return _LINKS.setdefault(log, uuid.uuid4().hex[:12])


class ReplayView(anywidget.AnyWidget):
    frames_json = traitlets.Bytes(b"[]").tag(sync=True)  # every frame so far: one UTF-8 JSON array
    frame = traitlets.Int(-1).tag(sync=True)          # the frame on screen (the browser's controls set it); -1: newest
    empty = traitlets.Unicode("").tag(sync=True)      # what the view says while it has no frames
    error = traitlets.Unicode("").tag(sync=True)      # why a live view stopped following, shown in red
    following = traitlets.Bool(False).tag(sync=True)  # attached to a live log
    link = traitlets.Unicode("").tag(sync=True)       # views with the same link step together in the browser
    notice = traitlets.Unicode("").tag(sync=True)     # while following: that the machine is too busy for its times

    nothing = "This log holds no events to show."     # the empty view's words; subclasses say more

    def __init__(self, log: EventLog | None = None, decode: Any = None, interval: float = 0.05, pair: Any = None):
        super().__init__()
        if not (isinstance(interval, (int, float)) and interval > 0):
            raise ValueError(f"interval must be a number of seconds > 0 (0.05: at most 20 updates a second), "
                             f"got {interval!r}")
        if log is not None:
            _check_log(log)
        self.text = TokenText(decoder(decode, pair, log))
        self.interval = float(interval)
        self.link = link_of(log)
        self.publishes = 0                       # times the frames were sent to the browser
        self._recorder = Recorder()
        self._lock = threading.RLock()           # the timer thread and the caller's thread both consume events
        self._chunks: list[bytes] = []           # the frames as JSON, one chunk per batch: b'{..},{..}', no brackets
        self._encoded = 0                        # frames in the chunks so far
        self._size = self._synced = 0            # bytes in the chunks, and in them when frames_json was last set
        self._seen = 0                           # events consumed: the index of the next one
        self._following: Following | None = None
        self._watch: Watch | None = None  # live only: the machine since `_watched` (busy.py)
        self._watched = 0.0
        self._failure: Exception | None = None
        self._work_s = 0.0
        if log is not None:
            self._consume(log.events)
        self._publish()

    # -- what a subclass provides -------------------------------------------------------------------------------

    def _step(self, event: Event, index: int) -> str | None:
        """Apply one event to the view's state; return a caption if the view changed, None to make no frame."""
        raise NotImplementedError

    def _meta(self) -> dict:
        raise NotImplementedError

    # -- the state, through the recorder (frames.py) -------------------------------------------------------------

    @property
    def items(self) -> dict[str, dict]:
        return self._recorder.items

    @property
    def meta(self) -> dict:
        return self._recorder.meta

    def _put(self, item: dict) -> None:
        self._recorder.put(item)

    def _drop(self, key: str) -> None:
        self._recorder.drop(key)

    def _replace(self, items: dict[str, dict]) -> None:
        self._recorder.replace(items)

    @property
    def frames(self) -> list[dict]:
        """Every frame so far (frames.py); the browser receives them as `frames_json`."""
        with self._lock:
            return list(self._recorder.frames)

    def snapshot(self, frame: int | None = None) -> Snapshot:
        """The view's state at frame `frame`, or after the last event it consumed when None (what the browser
        shows at the newest frame): what a static picture (`to_svg`) draws."""
        if frame is None:
            with self._lock:
                return self._recorder.snapshot()
        if isinstance(frame, bool) or not isinstance(frame, int) or not 0 <= frame < len(self.frames):
            raise ValueError(f"frame must be None (the newest) or an int in [0, {len(self.frames)}), got {frame!r}")
        return replay(self.frames, frame + 1)

    def _consume(self, events: list[Event]) -> None:
        with self._lock:
            for event in events:
                index, self._seen = self._seen, self._seen + 1
                caption = self._step(event, index)
                if caption is not None:
                    self._recorder.record(index, caption, self._meta())

    # -- to the browser ------------------------------------------------------------------------------------------

    def _publish(self, whole: bool = True) -> None:
        """Send the frames made since the last time: all of them as `frames_json` if `whole`, else a delta."""
        frames = self._recorder.frames
        with self._lock, self.hold_sync():  # the traits that changed go in one message
            start, new = self._encoded, frames[self._encoded:]
            if new:  # the batch is encoded in one call; its brackets come off so chunks join into one array
                chunk = json.dumps(new, ensure_ascii=False, separators=(",", ":")).encode()[1:-1]
                self._chunks.append(chunk)
                self._encoded, self._size = len(frames), self._size + len(chunk)
            if whole or self._size > 2 * self._synced:
                self.frames_json = b"[" + b",".join(self._chunks) + b"]"
                self._synced = self._size
            elif new:
                self.send({"start": start}, [b"[" + chunk + b"]"])
            self.empty = "" if frames else ("Waiting for events..." if self.following else self.nothing)
            self.publishes += 1

    def to_html(self, path: str | Path) -> Path:
        """Write this view's replay as one self-contained HTML file that plays offline (page.py)."""
        with self._lock:
            self._publish()
        return page.write([self], path)

    def _repr_mimebundle_(self, **kwargs):
        """The widget; the replay as plain HTML for pages with no widget manager (an nbconvert export); and, for a
        page that runs nothing at all (a code-hosting site), a still of the newest frame as SVG.

        Both hold the frames there are when the view is displayed: all of a replay's, none of a live view's, whose
        text says so (its lecture draws a still where the run ends).
        """
        data, metadata = super()._repr_mimebundle_(**kwargs)
        with self._lock:
            self._publish()  # frames_json up to date (a live view sends deltas between snapshots)
            bundle = {**data, "text/html": page.fragment(self)}
            if self._recorder.frames:
                bundle["image/svg+xml"] = self.to_svg()
                bundle["text/plain"] = f"{type(self).__name__}: {len(self._recorder.frames)} frames"
            else:
                bundle["text/plain"] = f"{type(self).__name__}: {self.empty or self.nothing}"
            return bundle, metadata

    def to_svg(self, frame: int | None = None) -> str:
        """A still of frame `frame` (the newest when None) as an SVG document: each view draws its own."""
        raise NotImplementedError

    # -- live (live.py) ------------------------------------------------------------------------------------------

    @property
    def failure(self) -> Exception | None:
        """What stopped a live view, re-raised by flush() and detach()."""
        return self._following.failure if self._following is not None else self._failure

    @property
    def work_s(self) -> float:
        """CPU seconds the timer thread spent on this view's live updates."""
        return self._work_s + (self._following.work_s if self._following is not None else 0.0)

    @classmethod
    def live(cls, log: EventLog, **kwargs) -> "ReplayView":
        """A view of everything already in `log` that keeps following it."""
        return cls(log, **kwargs).attach(log)

    def attach(self, log: EventLog) -> "ReplayView":
        """Follow `log` from now on (events already in it are not replayed: build the view from it for those)."""
        _check_log(log)
        if self._following is not None:
            raise ValueError("this view already follows a log; call detach() before attaching it to another")
        self._following = Following(log, self._update, self._show_failure, self.interval)
        self.following = True
        self._publish()
        return self

    def flush(self) -> "ReplayView":
        """Turn every buffered event into frames and send them all now, instead of at the next tick."""
        if self.failure is not None:
            raise self.failure
        if self._following is not None:
            self._following.flush()
            self._publish()
        if self.failure is not None:
            raise self.failure
        return self

    def detach(self) -> "ReplayView":
        """Stop following: the buffered events are shown, later ones are not."""
        following = self._following
        if following is not None:
            following.stop()  # its last hand-over shows what was still buffered
            self._failure, self._work_s = following.failure, self._work_s + following.work_s
            self._following = None
            self.following = False
            self._publish()
        if self.failure is not None:
            raise self.failure
        return self

    def _update(self, batch: list[Event]) -> None:
        """The timer thread's work: the batch's frames, sent as a delta; about once a second, a look at the
        machine, so that the live numbers (tokens/s, pass times) say when other programs disturb them."""
        with self._lock:
            self._consume(batch)
            self._publish(whole=False)
        if self._watch is None or time.perf_counter() - self._watched >= 1.0:
            if self._watch is not None:
                self.notice = warning(self._watch.stop().as_dict())
            self._watch, self._watched = Watch(), time.perf_counter()

    def _show_failure(self, e: Exception) -> None:
        self.error = f"{type(e).__name__}: {e}"
        self.following = False


def _check_log(log: Any) -> EventLog:
    if not isinstance(log, EventLog):
        raise TypeError(f"log must be an EventLog (engine.events, or EventLog.load(path)), got {type(log).__name__}")
    return log
