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
