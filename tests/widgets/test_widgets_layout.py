"""The tree view's layout: it stays put as the tree grows, folds big trees, and draws with or without Graphviz."""

from __future__ import annotations

import random
import re
import shutil

import pytest

from teachspec.events import EventLog, Evict, Insert, Split
from teachspec.radix import RadixCache
from teachspec.widgets import RadixTreeView
from teachspec.widgets.frames import replay


def grown(n_requests: int, seed: int = 0, evict_every: int = 0, vocab: int = 4, length: int = 8) -> EventLog:
    """A radix cache fed random sequences over a small vocabulary, so they share prefixes and split nodes."""
    rng = random.Random(seed)
    log = EventLog()
    cache = RadixCache(events=log)
    for r in range(n_requests):
        tokens = [rng.randrange(vocab) for _ in range(rng.randrange(1, length))]
        match = cache.match_prefix(tokens)
        cache.lock(match.node)
        cache.insert(tokens, tokens)
        cache.unlock(match.node)
        if evict_every and r % evict_every == evict_every - 1:
            cache.evict(3)
    return log


def nodes_of(snapshot) -> dict[str, tuple[float, int]]:
    return {k: (it["x"], it["y"]) for k, it in snapshot.items.items() if not it.get("stub")}


def test_nodes_never_jump_about_an_insert_moves_only_what_lies_right_of_the_new_leaf():
    log = grown(60, evict_every=7)
    view = RadixTreeView(log, max_nodes=10_000, columns=None)  # nothing folds: every node is drawn
    checked = {Insert: 0, Split: 0, Evict: 0}
    for n in range(1, len(view.frames)):
        before, after = nodes_of(replay(view.frames, n)), nodes_of(replay(view.frames, n + 1))
        event = log.events[view.frames[n]["event"]]
        if isinstance(log.events[view.frames[n - 1]["event"]], Evict):
            continue  # the node that faded in the previous frame leaves in this one, and its right side closes up
        both = before.keys() & after.keys()
        leaves = [k for k in both if not any(it["parent"] == k for it in replay(view.frames, n).items.values())]
        assert sorted(leaves, key=lambda k: before[k][0]) == sorted(leaves, key=lambda k: after[k][0]), \
            f"frame {n}: the leaves changed order"
        if isinstance(event, Insert) and event.node != -1:
            new_x = after[f"n{event.node}"][0]
            ancestors, node = set(), view.nodes  # the new leaf's ancestors re-centre over their children
            parent = event.parent
            while parent is not None:
                ancestors.add(f"n{parent}")
                parent = node[parent].parent if parent in node else None
            for k in both:
                dx = after[k][0] - before[k][0]
                assert after[k][1] == before[k][1], f"frame {n}: {k} changed rows on an insert"
                assert 0 <= dx <= 1, f"frame {n}: {k} jumped by {dx}"
                if before[k][0] < new_x and k not in ancestors:
                    assert dx == 0, f"frame {n}: {k}, left of the new leaf, moved"
            checked[Insert] += 1
        elif isinstance(event, Split):
            assert all(after[k][0] == before[k][0] for k in both), f"frame {n}: a split moved a node sideways"
            checked[Split] += 1
        elif isinstance(event, Evict):
            gone = f"n{event.node}"
            assert replay(view.frames, n + 1).items[gone]["mark"] == "evicted"  # drawn once more, fading
            checked[Evict] += 1
    assert min(checked.values()) > 3, checked


def test_a_new_child_lands_right_of_its_older_siblings():
    log = EventLog()
    cache = RadixCache(events=log)
    for first in (5, 1, 9, 3):  # token order is 1 3 5 9; creation order is what counts
        cache.insert([first, 0], [0, 0])
    items = RadixTreeView(log).snapshot().items
    assert [items[f"n{i}"]["x"] for i in (1, 2, 3, 4)] == [0, 1, 2, 3]
    assert items["n0"]["x"] == 1.5 and items["n0"]["y"] == 0


def test_a_big_tree_folds_into_stubs_and_keeps_the_recent_nodes():
    log = grown(400, vocab=6, length=12)
    view = RadixTreeView(log, max_nodes=60)
    total_nodes = len(view.nodes) - 1
    assert total_nodes > 300
    for frame in range(0, len(view.frames), 97):
        assert len(replay(view.frames, frame + 1).items) <= 60
    items = view.snapshot().items
    assert len(items) <= 60
    stubs = [it for it in items.values() if it.get("stub")]
    drawn = [it for it in items.values() if not it.get("stub") and it["parent"] is not None]
    assert stubs and len(drawn) + sum(s["folded"] for s in stubs) == total_nodes
    assert sum(it["tokens"] for it in drawn) + sum(s["tokens"] for s in stubs) == view.total
    newest = [e.node for e in log.of(Insert) if e.node != -1][-1]  # the last leaf stored: recent, so drawn
    assert f"n{newest}" in items
    for stub in stubs:  # a stub is its parent's last child
        siblings = [it for it in items.values() if it["parent"] == stub["parent"]]
        assert stub["x"] == max(it["x"] for it in siblings)


def columns_of(items: dict) -> int:
    """Leaves side by side in a drawing (a stub is a leaf)."""
    parents = {it["parent"] for it in items.values()}
    return sum(1 for k in items if k not in parents)


def paths_of(keys: list[str], items: dict) -> set[str]:
    """The drawn nodes on the paths from the root to `keys`."""
    on = set()
    for key in keys:
        while key is not None:
            on.add(key)
            key = items[key]["parent"]
    return on


@pytest.mark.parametrize("columns", [1, 3, 6])
def test_a_wide_tree_folds_to_its_columns_and_always_draws_the_nodes_its_caption_names(columns):
    log = grown(80, vocab=5, length=10, evict_every=9)
    assert columns_of(RadixTreeView(log, columns=None).snapshot().items) > 6  # wide enough to fold
    view = RadixTreeView(log, columns=columns)
    named = 0
    for n in range(len(view.frames)):
        snapshot = replay(view.frames, n + 1)
        items, focus = snapshot.items, snapshot.meta["focus"]
        words = snapshot.caption.split(": '")[0].split(': "')[0]  # not the quoted text
        caption = {f"n{i}" for i in re.findall(r"node (\d+)", words)} - {"n0"}
        assert caption <= set(focus) and all(k in items for k in focus), f"frame {n}: {snapshot.caption}"
        named += bool(caption)
        # within the budget, unless the caption's nodes alone take more: then nothing else is drawn
        if columns_of(items) > columns:
            kept = {k for k, it in items.items() if not it.get("stub")}
            assert kept <= paths_of(focus, items), f"frame {n}: over {columns} columns with other nodes drawn"
    assert named > 50


def test_nodes_deeper_than_max_depth_fold():
    log = EventLog()
    cache = RadixCache(events=log)
    for n in range(1, 30):  # a chain: each insert adds one token under the last
        cache.insert(list(range(n)), list(range(n)))
    view = RadixTreeView(log, max_depth=5)
    items = view.snapshot().items
    assert max(it["y"] for it in items.values()) == 6  # rows 1..5 hold nodes, row 6 the stub
    (stub,) = [it for it in items.values() if it.get("stub")]
    assert stub["folded"] == 24 and stub["y"] == 6


# -- static pictures ---------------------------------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot program is not installed")
def test_to_svg_draws_with_graphviz_when_dot_is_installed():
    svg = RadixTreeView(grown(12)).to_svg()
    assert svg.lstrip().startswith("<?xml") and "Generated by graphviz" in svg and "root" in svg


def test_to_svg_falls_back_to_the_views_own_layout_without_dot(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no dot to be found
    assert shutil.which("dot") is None
    view = RadixTreeView(grown(12))
    svg = view.to_svg()
    assert svg.startswith("<svg") and "graphviz" not in svg
    assert svg.count("<rect") == len(view.snapshot().items) and "root" in svg
    first = view.to_svg(frame=0)
    assert first.count("<rect") < svg.count("<rect")


def test_the_fallback_escapes_text_and_shows_whitespace():
    log = EventLog()
    log.emit(Insert, node=1, parent=0, tokens=2, cached=0)
    view = RadixTreeView(log)
    item = dict(view.snapshot().items["n1"], text="<a> &\n")
    from teachspec.widgets import svg
    from teachspec.widgets.frames import Snapshot
    drawn = svg.plain_svg(Snapshot({"n0": view.snapshot().items["n0"], "n1": item}))
    assert "&lt;a&gt;␣&amp;↵" in drawn


def test_a_token_with_control_characters_still_makes_a_well_formed_svg():
    """A token's text may hold characters XML forbids even escaped (NUL, \\x02): the stills show each as its control
    picture, so two such tokens never look alike."""
    import xml.etree.ElementTree as ET

    from teachspec.widgets.svg import escape

    text = "a\x00b\x02<c>&\x7f\td"
    ET.fromstring(f"<svg><text>{escape(text)}</text></svg>")
    assert escape(text) == "a\u2400b\u2402&lt;c&gt;&amp;\u2421\td"


@pytest.mark.parametrize("dot", [True, False], ids=["graphviz", "fallback"])
def test_every_view_draws_a_token_of_any_text(dot, monkeypatch):
    """Token text with every control character, markup and quotes: the radix tree (through the real `dot`, and
    without it) and the speculation view draw it as well-formed SVG that shows the characters as pictures."""
    import xml.etree.ElementTree as ET

    from teachspec.events import Bonus, RequestStart, Verify
    from teachspec.widgets import SpeculationView, svg

    if dot and shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed")
    if not dot:
        monkeypatch.setattr(svg.shutil, "which", lambda name: None)
    nasty = "".join(map(chr, range(32))) + "\x7f<&'\"]]>"
    log = EventLog()
    log.emit(RequestStart, 1, prompt_tokens=1, prompt=[0])
    log.emit(Verify, 1, step=0, position=1, n=1, ms=1.0)
    log.emit(Bonus, 1, step=0, position=1, token=1, p=0.5)
    log.emit(Insert, 1, node=1, parent=0, tokens=2, cached=0, ids=[0, 1])
    decode = {0: nasty, 1: "\x00"}.get
    for view in (RadixTreeView(log, decode=lambda ids: "".join(map(decode, ids))),
                 SpeculationView(log, decode=lambda ids: "".join(map(decode, ids)))):
        drawn = view.to_svg()
        ET.fromstring(drawn)
        assert "\u2400" in drawn, type(view).__name__


def test_a_long_chain_replays_in_about_the_time_of_a_bushy_tree_of_as_many_nodes():
    """A chain of nodes (one long conversation, turn after turn) used to cost each insert a walk to the root: 16,000
    nodes took over a minute. Now the view's bookkeeping stops a row below what it can draw. Measured as a ratio in
    one run, so a busy machine slows both alike; at 6,000 nodes the old view took 7x the bushy tree's time."""
    import time

    def replay_seconds(parent_of) -> float:
        log = EventLog()
        for i in range(1, 6001):
            log.emit(Insert, 1, node=i, parent=parent_of(i), tokens=1, cached=0)
        start = time.perf_counter()
        view = RadixTreeView(log)
        seconds = time.perf_counter() - start
        assert view.snapshot().meta["nodes"] == 6000
        return seconds

    bushy = min(replay_seconds(lambda i: (i - 1) // 4) for _ in range(2))
    chain = min(replay_seconds(lambda i: i - 1) for _ in range(2))
    assert chain < 2 * bushy, (chain, bushy)
