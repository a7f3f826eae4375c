"""The views: rebuilt from events alone, the same live as replayed, throttled, and strict about bad traces."""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import fields

import pytest

from helpers.views import PROMPTS, noisy_pair, record
from teachspec.bench.widgets import live_overhead
from teachspec.engine import Engine
from teachspec.events import Accept, Draft, EventLog, Evict, Finish, Insert, Lock, Match, Reject, RequestStart, \
    Resample, TreeDraft, Verify
from teachspec.radix import RadixCache
from teachspec.widgets import RadixTreeView, SpeculationView, export_html
from teachspec.widgets.frames import replay
from teachspec.widgets.live import Throttle
from teachspec.widgets.measure import Running, steps


@pytest.fixture(scope="module")
def pair():
    return noisy_pair()


@pytest.fixture(scope="module")
def engine(pair):
    return record(pair)


def re_emit(log: EventLog, event) -> None:
    """Emit a copy of a recorded event into `log` (a new time stamp, every other field the same)."""
    values = {f.name: getattr(event, f.name) for f in fields(event) if f.name not in ("t", "request")}
    log.emit(type(event), event.request, **values)


def tokens(items: dict) -> list[dict]:
    """A SpeculationView's tokens (and prompts), without its step items."""
    return [item for item in items.values() if item["kind"] != "step"]


# -- one state, however the events arrive ------------------------------------------------------------------------

@pytest.mark.parametrize("View", [SpeculationView, RadixTreeView])
def test_a_live_view_holds_after_every_event_the_state_a_replay_of_those_events_has(engine, pair, View):
    events = engine.events.events
    live_log = EventLog()
    view = View.live(live_log, decode=pair, interval=3600)  # no timer fires: we flush by hand after each event
    for n, event in enumerate(events, start=1):
        re_emit(live_log, event)
        view.flush()
        replayed = View(EventLog(events[:n]), decode=pair)
        assert view.snapshot() == replayed.snapshot(), f"after {n} events"
        assert view.frames == replayed.frames and view.frames_json == replayed.frames_json
    view.detach()
    assert not view.following and view.frames == View(engine.events, decode=pair).frames


@pytest.mark.parametrize("View", [SpeculationView, RadixTreeView])
def test_frames_applied_in_order_give_every_snapshot_along_the_way(engine, pair, View):
    events = engine.events.events
    view = View(engine.events, decode=pair)
    for n in range(1, len(view.frames) + 1):
        upto = view.frames[n - 1]["event"] + 1
        assert replay(view.frames, n) == View(EventLog(events[:upto]), decode=pair).snapshot()


def test_the_speculation_view_text_is_the_generated_text(pair):
    engine = Engine(pair, record_top=4, cache_tokens=0)
    out = engine.generate(PROMPTS[0], 30, temperature=1.0, k=4, seed=3)
    view = SpeculationView(engine.events, decode=pair)
    items = sorted(tokens(view.snapshot().items), key=lambda item: item["order"])
    kinds = [item["kind"] for item in items]
    assert kinds[0] == "prompt" and items[0]["text"] == PROMPTS[0]
    assert {"accepted", "rejected", "resampled", "bonus"} <= set(kinds) and "drafted" not in kinds
    kept = [item for item in items if item["kind"] in ("accepted", "resampled", "bonus", "plain")]
    assert [item["token"] for item in kept] == out.tokens
    assert "".join(item["text"] for item in kept) == "".join(pair.decode([t]) for t in out.tokens)
    rejected = next(item for item in items if item["kind"] == "rejected")
    assert rejected["u"] >= min(1, rejected["p"] / rejected["q"]) and len(rejected["top_p"][0]) == 3
    meta = view.snapshot().meta
    assert meta["emitted"] == len(out.tokens) and meta["passes"] == out.stats.target_passes
    assert meta["accepted"] == out.stats.accepted and meta["drafted"] == out.stats.drafted
    assert 0 < meta["alpha"] < 1 and meta["predicted"] > 0 and meta["measured"] > 0


def test_a_step_plays_as_drafts_then_verdicts(pair):
    engine = Engine(pair, record_top=0, cache_tokens=0)
    engine.generate(PROMPTS[1], 8, temperature=1.0, k=3, seed=1)
    frames = SpeculationView(engine.events).frames
    draft = next(i for i, f in enumerate(frames) if "guesses" in f["caption"])
    assert [item["kind"] for item in frames[draft]["put"]] == ["drafted"] * 3 + ["step"]
    assert "ONE target pass" in frames[draft + 1]["caption"]
    assert frames[draft + 2]["put"][0]["kind"] in ("accepted", "rejected")
    assert frames[draft + 2]["put"][0]["text"] is None  # no decode given: the browser shows ids
    unit = frames[draft + 2]["put"][-1]  # the step as one item: its guesses, its passes' times, its tokens so far
    assert unit["kind"] == "step" and unit["drafted"] == 3 and unit["draft_ms"] > 0 and unit["verify_ms"] > 0


def test_plain_decoding_shows_plain_tokens(pair):
    engine = Engine(pair, cache_tokens=0)
    out = engine.generate(PROMPTS[0], 6, speculate=None)
    items = SpeculationView(engine.events).snapshot().items
    assert [item["kind"] for item in tokens(items)] == ["prompt"] + ["plain"] * len(out.tokens)
    steps = [item for item in items.values() if item["kind"] == "step"]
    assert len(steps) == len(out.tokens) and all(s["drafted"] == 0 and s["emitted"] == 1 for s in steps)


# -- a tree of guesses in the text -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tree_run(pair):
    """(engine, generation) of a sampled tree=(2, 2) run: accepted paths, refused siblings, resamples, bonuses."""
    engine = Engine(pair, cache_tokens=0)
    return engine, engine.generate(PROMPTS[0], 20, tree=(2, 2), temperature=1.0, seed=0)


def test_a_tree_step_brings_only_the_tokens_it_emitted_into_the_text(tree_run, pair):
    engine, out = tree_run
    log = engine.events
    refused: dict[tuple[int, int], list[tuple[int, int]]] = {}  # (step, position) -> (node, token) refused there
    for e in log.of(Reject):
        refused.setdefault((e.step, e.position), []).append((e.i, e.token))
    assert log.of(Resample) and any(len(nodes) > 1 for nodes in refused.values()), "a seed that refuses siblings"
    view = SpeculationView(log, decode=pair)
    items = sorted(tokens(view.snapshot().items), key=lambda item: item["order"])
    kept = [item for item in items if item["kind"] in ("accepted", "resampled", "bonus", "plain")]
    assert [item["token"] for item in kept] == out.tokens  # the text is the generation, and nothing else
    trees = {e.step for e in log.of(TreeDraft)}
    assert all(item["kind"] != "plain" for item in kept if item["step"] in trees)  # a tree step is no plain step
    assert [item["node"] for item in kept if item["kind"] == "accepted"] == [e.i for e in log.of(Accept)]
    # one rejected mark per position where siblings were refused, each sibling in it once, in the order tried
    marks = [item for item in items if item["kind"] == "rejected"]
    assert {(m["step"], m["position"]): [(s["node"], s["token"]) for s in m["siblings"]] for m in marks} == refused
    assert len(marks) == len(refused) and len(items) == 1 + len(out.tokens) + len(marks)  # untried: not shown
    for m in marks:  # before the token the step emitted at its position, and in no way a token of the text
        after = next(item for item in kept if item["order"] > m["order"])
        assert (after["step"], after["position"]) == (m["step"], m["position"]) and "token" not in m
        assert all(s["u"] >= min(1, s["p"] / s["q"]) for s in m["siblings"])
    units = {item["step"]: item for item in view.snapshot().items.values() if item["kind"] == "step"}
    for draft in log.of(TreeDraft):
        unit = units[draft.step]
        assert unit["tree"] and unit["drafted"] == len(draft.parents) - 1 and unit["draft_ms"] > 0
    assert sum(unit["emitted"] for unit in units.values()) == len(out.tokens)


def test_a_tree_run_counts_one_target_pass_per_tree_step_as_stats_does(tree_run, pair):
    engine, out = tree_run
    meta = SpeculationView(engine.events, decode=pair).snapshot().meta
    stats = out.stats
    assert (meta["emitted"], meta["passes"]) == (len(out.tokens), stats.target_passes)
    assert meta["tokens_per_pass"] == round(len(out.tokens) / stats.target_passes, 4)  # emitted per Verify
    # a position is judged once however many siblings were refused there: alpha is the chance to go one level down
    assert (meta["accepted"], meta["drafted"], meta["drafts"]) == (stats.accepted, stats.drafted, stats.drafts)
    assert meta["judged"] == stats.accepted + stats.rejected < stats.accepted + len(engine.events.of(Reject))
    assert meta["alpha"] == round(stats.alpha, 4) and meta["predicted"] > 0
    for s in steps(engine.events):
        draft = next((e for e in engine.events.of(TreeDraft) if e.step == s.step), None)
        if draft is None:  # the last token alone: a plain step
            assert s.drafted == 0 and s.emitted == 1
            continue
        judged = [e for e in engine.events if isinstance(e, (Accept, Reject)) and e.step == s.step]
        accepted = [e for e in judged if isinstance(e, Accept)]
        assert s.nodes == len(draft.parents) - 1 and s.judged == len({e.position for e in judged})
        assert s.accepted_at == [d < len(accepted) for d in range(s.drafted)]  # the path's levels, from the top
        assert s.emitted == len(accepted) + 1


def test_a_live_view_of_a_tree_run_holds_the_state_a_replay_has(tree_run, pair):
    events = tree_run[0].events.events
    live_log = EventLog()
    view = SpeculationView.live(live_log, decode=pair, interval=3600)  # flushed by hand
    for n, event in enumerate(events, start=1):
        re_emit(live_log, event)
        view.flush()
        assert view.snapshot() == SpeculationView(EventLog(events[:n]), decode=pair).snapshot(), f"after {n} events"
    view.detach()
    frames = view.frames
    for n in range(1, len(frames) + 1):  # and the frames alone, applied in order, give every state along the way
        assert replay(frames, n) == SpeculationView(EventLog(events[:frames[n - 1]["event"] + 1]),
                                                    decode=pair).snapshot()


def test_refused_siblings_share_one_mark_and_each_token_shows_once():
    log = EventLog()  # independent draws: nodes 1 and 2 both hold token 7, and both are refused
    log.emit(RequestStart, 0, prompt_tokens=2, prompt=[5, 6])
    log.emit(TreeDraft, 0, step=0, position=1, parents=[-1, 0, 0, 1], tokens=[6, 7, 7, 8], drafter="model", ms=1.0)
    log.emit(Verify, 0, step=0, position=2, n=4, ms=2.0)
    log.emit(Reject, 0, step=0, position=2, i=1, token=7, p=0.1, q=0.5, u=0.9)
    log.emit(Reject, 0, step=0, position=2, i=2, token=7, p=0.0, q=0.5, u=0.2)
    log.emit(Resample, 0, step=0, position=2, i=0, token=9, p=0.4, q=0.0)
    log.emit(Finish, 0, new_tokens=1, reason="length", ms=3.0)  # the strip counts a step once it is complete
    view = SpeculationView(log, decode=lambda ids: "".join(chr(ord("a") + i) for i in ids))
    items = sorted(tokens(view.snapshot().items), key=lambda item: item["order"])
    assert [item["kind"] for item in items] == ["prompt", "rejected", "resampled"]
    assert [s["node"] for s in items[1]["siblings"]] == [1, 2] and items[2]["node"] == 0
    captions = [f["caption"] for f in view.frames]
    assert "node 2, its next sibling, is judged against the residual" in captions[3]
    assert "no sibling is left" in captions[4] and "every child of node 0 was refused" in captions[5]
    import xml.etree.ElementTree as ET
    labels = [t.text for t in ET.fromstring(view.to_svg()).iter("{http://www.w3.org/2000/svg}text")]
    assert "h" in labels and "h | h" not in labels  # the refused token once, in one struck-through chip
    assert view.snapshot().meta["judged"] == 1 and view.snapshot().meta["alpha"] == 0  # one position, refused


def test_the_tree_view_rebuilds_the_engines_radix_tree(engine, pair):
    view = RadixTreeView(engine.events, decode=pair, budget=40)
    tree, seen = engine.radix, {}
    stack = [tree.root]
    while stack:
        node = stack.pop()
        seen[node.id] = (node.parent.id if node.parent else None, len(node.key), node.locks, list(node.key))
        stack.extend(node.children.values())
    assert seen.keys() == view.nodes.keys()
    for i, (parent, tokens, locks, key) in seen.items():
        mine = view.nodes[i]
        assert (mine.parent, mine.tokens, mine.locks) == (parent, tokens, locks)
        assert mine.ids is None or mine.ids == key  # text is recovered only where the log proves it
    assert sum(1 for n in view.nodes.values() if n.ids) >= len(view.nodes) // 2
    meta = view.snapshot().meta
    assert (meta["total"], meta["in_use"], meta["budget"]) == (tree.total_size, tree.protected_size, 40)
    assert meta["free"] == 40 - tree.total_size
    kinds = {f["caption"].split(":")[0] for f in view.frames}
    assert {"lookup", "insert", "split", "evict"} <= kinds


# -- live, throttled ---------------------------------------------------------------------------------------------

def test_throttle_coalesces_a_burst_into_a_few_batches_and_loses_nothing():
    batches = []
    throttle = Throttle(batches.append, interval=0.05)
    start = time.monotonic()
    for i in range(1000):
        throttle.add(i)
    throttle.close()  # hands over the rest
    elapsed = time.monotonic() - start
    assert [i for batch in batches for i in batch] == list(range(1000))
    assert len(batches) == throttle.flushes <= 2 + elapsed / 0.05


def test_a_live_view_sends_at_most_about_twenty_updates_a_second():
    log = EventLog()
    view = RadixTreeView.live(log)
    cache = RadixCache(events=log)
    sent = view.publishes
    start = time.monotonic()
    for i in range(250):  # 4 events each: 1000 events as fast as Python can emit them
        match = cache.match_prefix([i % 7, i % 5, i])
        cache.lock(match.node)
        cache.insert([i % 7, i % 5, i], [0, 0, 0])
        cache.unlock(match.node)
    view.detach()  # waits for the last batch
    elapsed = time.monotonic() - start
    assert len(log) >= 1000
    assert view.publishes - sent <= 2 + elapsed / 0.05 and view.publishes - sent < len(log) / 10
    assert view.snapshot() == RadixTreeView(log).snapshot()


def test_a_live_view_sends_each_frame_about_once_as_deltas_and_doubling_snapshots(engine, pair):
    """What reaches the browser while following: rebuilt from the messages, it is every frame, in order."""
    log = EventLog()
    view = SpeculationView.live(log, decode=pair, interval=0.002)
    sent = []  # what the comm publishes: no kernel here, so record it where it would leave the process
    view.comm.publish_msg = lambda msg_type, data=None, metadata=None, buffers=None, **keys: sent.append(
        (data, buffers))
    for event in engine.events:
        re_emit(log, event)
        time.sleep(0.0005)  # a fast engine: many batches
    view.detach()
    shown, wholes, deltas, size = [], 0, 0, 0
    for data, buffers in sent:
        if data["method"] == "update" and ["frames_json"] in data["buffer_paths"]:
            (whole,) = buffers
            shown, wholes, size = json.loads(bytes(whole)), wholes + 1, size + len(whole)
        elif data["method"] == "custom":
            (delta,) = buffers
            assert data["content"]["start"] == len(shown), "a delta must continue where the browser is"
            shown, deltas, size = shown + json.loads(bytes(delta)), deltas + 1, size + len(delta)
    assert shown == view.frames and deltas > 5
    assert wholes <= 2 + math.log2(len(view.frames_json))  # the snapshots double in size
    assert size < 5 * len(view.frames_json)  # not O(frames) bytes per update


def test_the_benchmark_measures_what_watching_costs(pair):
    cost = live_overhead(pair, "def main():", max_new_tokens=8, repeats=1, k=3)
    assert cost.bare > 0 and cost.live > 0 and cost.bare_cpu > 0 and cost.live_cpu > 0
    assert 0 < cost.work < 1  # the views did some work, in less time than the run itself
    assert "watching costs" in str(cost) and "the views' own work" in str(cost)


def test_attach_and_detach():
    log = EventLog()
    view = SpeculationView(log)
    assert view.empty.startswith("No speculation")
    view.attach(log)
    assert view.following and view.empty == "Waiting for events..."
    with pytest.raises(ValueError, match="already follows a log"):
        view.attach(log)
    log.emit(RequestStart, 0, prompt_tokens=2, prompt=[1, 2])
    view.detach()
    assert not view.following and len(view.frames) == 1
    log.emit(RequestStart, 1, prompt_tokens=1, prompt=[3])
    time.sleep(0.1)
    assert len(view.frames) == 1  # detached: later events are not shown


# -- without a kernel --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("View", [SpeculationView, RadixTreeView])
def test_a_view_exports_one_page_that_fetches_nothing_and_holds_its_frames(engine, pair, View, tmp_path):
    view = View(engine.events, decode=pair)
    page = view.to_html(tmp_path / "replay.html").read_text()
    (frames,) = re.findall(r'<script type="application/json" id="ts-\w+-frames">(.*?)</script>', page, re.DOTALL)
    code = page.replace(frames, "")  # the page itself, without the tokens' text
    assert not re.search(r"\b(src|href)\s*=|\bimport\s*\(|^\s*import\s", code, re.MULTILINE)  # loads nothing
    assert json.loads(frames) == view.frames and "</script" not in frames
    data, _ = view._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data  # the widget, where a widget manager runs
    assert 'id="ts-' in data["text/html"] and view._css in data["text/html"]  # the same player, elsewhere


def test_export_html_takes_a_trace_and_refuses_anything_else(engine, tmp_path):
    path = export_html(engine.events.save(tmp_path / "trace.jsonl"), tmp_path / "both.html")
    assert path.read_text().count('<script type="module">') == 2  # a SpeculationView and a RadixTreeView
    with pytest.raises(TypeError, match="views must be a view, a non-empty list of views, an EventLog or a trace"):
        export_html([], tmp_path / "none.html")


def test_the_tree_and_the_text_stand_side_by_side_in_a_notebook_and_on_a_page(engine, tmp_path):
    """At 1280 x 720 one above the other puts the text's focus below the screen (tests/browser/test_lecture_hall.py
    measures it); side by side, where the width allows, both are on screen."""
    from teachspec.widgets import TokenTreeView, side_by_side
    from teachspec.widgets.export import views_of
    from teachspec.widgets.radix import BESIDE

    spec, tree = views_of(engine.events)
    assert tree.columns == BESIDE  # narrow enough to stand beside the text
    box = side_by_side(tree, spec)
    assert list(box.children) == [tree, spec] and "ts-side-by-side" in box._dom_classes
    assert ".ts-side-by-side" in spec._css  # its layout is the views' own CSS, as an exported page's
    page = export_html([spec, tree, TokenTreeView(engine.events)], tmp_path / "three.html").read_text()
    assert page.count('<div class="ts-side-by-side">') == 1
    assert page.count('class="teachspec-export"') == 2 and page.count('class="teachspec-export ts-wide"') == 1
    with pytest.raises(TypeError, match="side_by_side takes views"):
        side_by_side()


# -- bad input ---------------------------------------------------------------------------------------------------

def test_an_empty_trace_makes_an_empty_view_that_says_so(tmp_path):
    empty = EventLog.load(EventLog().save(tmp_path / "empty.jsonl"))
    for view in (SpeculationView(empty), RadixTreeView(empty)):
        assert view.frames == [] and "No " in view.empty
        assert view.snapshot().items == {}
    assert "an empty tree" in RadixTreeView(empty).to_svg()


def test_a_trace_from_a_newer_format_is_refused(tmp_path):
    path = tmp_path / "new.jsonl"
    path.write_text('{"format": "teachspec-trace", "version": 99}\n')
    with pytest.raises(ValueError, match="version 99 trace.*upgrade teachspec"):
        SpeculationView(EventLog.load(path))


def cache_log() -> EventLog:
    log = EventLog()
    cache = RadixCache(events=log)
    cache.insert([1, 2, 3], [0, 0, 0])
    cache.insert([1, 2, 9], [0, 0, 0])
    cache.evict(1)
    return log  # Insert(node 1), Split(1 -> new 2), Insert(node 3), Evict(node 1 or 3)


@pytest.mark.parametrize("event, words", [
    (Evict(0.0, -1, node=7, parent=0, tokens=1), r"event 0 Evict\(node=7, parent=0, tokens=1\) names node 7.*"
                                                   r"no event inserted it"),
    (Match(0.0, -1, node=5, length=3, path=[0, 5]), r"event 0 Match.*names node 5"),
    (Lock(0.0, -1, node=2, locks=1, protected=2), r"event 0 Lock.*names node 2"),
    (Insert(0.0, -1, node=4, parent=9, tokens=2, cached=0), r"event 0 Insert.*names node 9"),
])
def test_events_for_nodes_the_view_never_saw_name_the_event(event, words):
    with pytest.raises(ValueError, match=words):
        RadixTreeView(EventLog([event]))


def test_a_node_used_after_its_eviction_names_the_eviction():
    log = cache_log()
    evicted = log.of(Evict)[0]
    log.events.append(Lock(1.0, -1, node=evicted.node, locks=1, protected=1))
    with pytest.raises(ValueError, match=rf"names node {evicted.node}.*evicted by event {len(log) - 2}"):
        RadixTreeView(log)


def test_inconsistent_events_are_refused():
    log = cache_log()
    log.events.append(Insert(1.0, -1, node=2, parent=0, tokens=1, cached=0))
    with pytest.raises(ValueError, match="node 2 already existed"):
        RadixTreeView(log)
    bad_lock = EventLog([Insert(0.0, -1, node=1, parent=0, tokens=2, cached=0),
                         Lock(0.0, -1, node=1, locks=3, protected=2)])
    with pytest.raises(ValueError, match="says node 1 has 3 locks, but the view counted 1"):
        RadixTreeView(bad_lock)


def test_a_live_view_shows_a_bad_event_instead_of_breaking_the_engine():
    log = EventLog()
    view = RadixTreeView.live(log, interval=0.01)
    log.emit(Evict, node=3, parent=0, tokens=1)  # the emitting side never sees the error
    time.sleep(0.2)
    assert "names node 3" in view.error and not view.following
    with pytest.raises(ValueError, match="names node 3"):
        view.flush()


def test_arguments_are_checked_with_errors_that_say_what_is_allowed():
    with pytest.raises(TypeError, match="log must be an EventLog"):
        SpeculationView([Draft(0.0, 0, step=0, position=0, tokens=[1], q=[1.0], drafter="x", ms=1.0)])
    with pytest.raises(ValueError, match="budget must be a number of tokens >= 0"):
        RadixTreeView(budget=-1)
    with pytest.raises(ValueError, match="max_nodes must be an int >= 2"):
        RadixTreeView(max_nodes=1)
    with pytest.raises(ValueError, match=r"columns must be an int >= 1 \(leaves side by side\), or None"):
        RadixTreeView(columns=0)
    with pytest.raises(ValueError, match="interval must be a number of seconds > 0"):
        SpeculationView(interval=0)
    with pytest.raises(TypeError, match="decode must be a function"):
        SpeculationView(decode=42)
    with pytest.raises(ValueError, match=r"frame must be None \(the newest\) or an int in \[0, 0\)"):
        RadixTreeView().to_svg(frame=3)


def test_a_trace_without_draft_events_still_shows_its_verdicts():
    log = EventLog([Accept(0.0, 0, step=0, position=3, i=0, token=5, p=0.5, q=0.5, u=0.1)])
    (item,) = tokens(SpeculationView(log).snapshot().items)
    assert item["kind"] == "accepted" and item["token"] == 5
