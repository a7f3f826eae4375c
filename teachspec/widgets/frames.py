"""Frames: a view's whole history as one small change per event, so the browser can step through it alone.

A view's state at one moment is a *snapshot*: its items by key (a token of the text, a node of the tree), a
`meta` dict (the stats strip, the memory bar) and a `caption` that says what just happened. Sending a snapshot per
event would cost O(events x items); each event that changes the view becomes a *frame* holding only the change:

    {"event": 37,            the event's index in the log
     "caption": "...",       what it did, in words
     "put": [item, ...],     items that are new or changed, whole (an item is small)
     "drop": [key, ...],     items that are gone
     "meta": {...}}          present only when meta changed

Applying frames 0 .. n to an empty snapshot gives the snapshot after frame n. The browser does exactly that
(`applyFrame` in widgets/helpers.js), which is why play, pause, step and the slider work with no kernel behind
them: in Voila, in a page written by `export_html` (export.py), in a notebook exported by nbconvert.

`Recorder` is the state machine that makes the frames: a view changes its items with `put`, `drop` or `replace`
while it reads an event, then `record` turns what changed into that event's frame. It knows nothing of events,
widgets or threads (base.py adds those), so it can be read, and tested, on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Snapshot:
    items: dict[str, dict] = field(default_factory=dict)  # key -> item; every item holds its own "key"
    meta: dict = field(default_factory=dict)
    caption: str = ""
    event: int = -1  # index in the log of the event that made it; -1 before any


def apply(snapshot: Snapshot, frame: dict) -> Snapshot:
    """The snapshot after `frame`; `snapshot` itself is left as it was."""
    items = dict(snapshot.items)
    for key in frame["drop"]:
        del items[key]
    for item in frame["put"]:
        items[item["key"]] = item
    return Snapshot(items, frame.get("meta", snapshot.meta), frame["caption"], frame["event"])


def replay(frames: list[dict], n: int | None = None) -> Snapshot:
    """The snapshot after the first `n` frames (all of them when n is None; an empty snapshot when n is 0)."""
    n = len(frames) if n is None else n
    if not 0 <= n <= len(frames):
        raise ValueError(f"n must be between 0 and the number of frames ({len(frames)}), got {n}")
    snapshot = Snapshot()
    for frame in frames[:n]:
        snapshot = apply(snapshot, frame)
    return snapshot


class Recorder:
    """A view's items as events change them, and every event's change kept as a frame."""

    def __init__(self):
        self.items: dict[str, dict] = {}        # the state now: key -> item
        self.meta: dict = {}
        self.frames: list[dict] = []
        self.caption, self.event = "", -1        # of the newest frame
        self._changed: dict[str, bool] = {}      # keys put or dropped since the last frame -> did they exist before

    def put(self, item: dict) -> None:
        """Add or replace an item (never change one in place: frames hold references to the old ones)."""
        key = item["key"]
        self._changed.setdefault(key, key in self.items)
        self.items[key] = item

    def drop(self, key: str) -> None:
        self._changed.setdefault(key, True)
        del self.items[key]

    def replace(self, items: dict[str, dict]) -> None:
        """Make `items` the whole state; only what differs goes into the frame."""
        for key in [k for k in self.items if k not in items]:
            self.drop(key)
        for key, item in items.items():
            if self.items.get(key) != item:
                self.put(item)

    def record(self, event: int, caption: str, meta: dict) -> dict:
        """The frame of what changed since the last one, made by the event at index `event` in the log."""
        frame = {"event": event, "caption": caption,
                 "put": [self.items[k] for k in self._changed if k in self.items],
                 "drop": [k for k, existed in self._changed.items() if existed and k not in self.items]}
        if meta != self.meta:
            frame["meta"] = self.meta = meta
        self._changed = {}
        self.frames.append(frame)
        self.caption, self.event = caption, event
        return frame

    def snapshot(self) -> Snapshot:
        return Snapshot(dict(self.items), self.meta, self.caption, self.event)
