"""TokenTreeView: each tree step rebuilt from events alone, checked against the events and against kv.tree_mask.

A real run of the bundled pair with `tree=(2, 2)` at temperature 1 (some guesses accepted, some rejected, steps
ending in a resample and in a bonus), then at the end of every tree step: the node count, which nodes were
accepted, rejected or never tried, the p/q ratio and u written on each judged node, the resampled or bonus token,
and the mask's cells against the tail of `kv.tree_mask` for the same tree and context. The same frames from a saved
trace, the same state live as replayed, the browser's replay (forwards, then backwards) equal to Python's, and the
view in `views_of` and `export_html` when a trace drafted trees.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import fields
from pathlib import Path

import pytest

from teachspec import kv
from teachspec.engine import Engine
from teachspec.events import Accept, Bonus, EventLog, Reject, Resample, TreeDraft
from teachspec.models import load_pair
from teachspec.widgets import TokenTreeView, export_html
from teachspec.widgets.export import views_of
from teachspec.widgets.frames import replay
from teachspec.widgets.token_tree import CONTEXT

ROOT = Path(__file__).parents[2]
PROMPT = "def read(path):\n    with open(path) as"
SEED = 1  # with the bundled pair: rejections, resamples and bonuses (the first test checks it still is)


@pytest.fixture(scope="module")
def pair():
    return load_pair("tiny")


@pytest.fixture(scope="module")
def run(pair):
    """(engine, generation) of one sampled tree run."""
    engine = Engine(pair)
    generation = engine.generate(PROMPT, 16, tree=(2, 2), temperature=1, seed=SEED)
    return engine, generation


def tree_steps(log: EventLog) -> list[tuple[TreeDraft, list]]:
    """Each TreeDraft with the Accept, Reject, Resample and Bonus events of its step."""
    out = []
    for e in log:
        if isinstance(e, TreeDraft):
            out.append((e, []))
        elif isinstance(e, (Accept, Reject, Resample, Bonus)) and out and (e.request, e.step) == \
                (out[-1][0].request, out[-1][0].step):
            out[-1][1].append(e)
    return out


def end_frames(view: TokenTreeView) -> list[int]:
    """The last frame of each tree step, in order."""
    index = [None] * len(view.frames)
    current = None
    for n, frame in enumerate(view.frames):
        current = next((i["index"] for i in frame["put"] if i["key"] == "step"), current)
        index[n] = current
    return [n for n in range(len(index)) if n == len(index) - 1 or index[n + 1] != index[n]]


def step_ends(view: TokenTreeView) -> list:
    """The snapshot at the last frame of each tree step, in order."""
    return [view.snapshot(n) for n in end_frames(view)]


def nodes(snapshot) -> dict[int, dict]:
    return {item["i"]: item for item in snapshot.items.values() if item["kind"] == "node"}


# -- each step, against its events --------------------------------------------------------------------------------

def test_the_run_is_one_that_exercises_every_verdict(run):
    log = run[0].events
    assert len(log.of(TreeDraft)) >= 5
    assert log.of(Reject) and log.of(Resample) and log.of(Bonus), "pick a SEED with rejections and both endings"


def test_each_step_shows_its_nodes_verdicts_ratios_and_final_token(run, pair):
    engine, _ = run
    view = TokenTreeView(engine.events, decode=pair)
    steps = tree_steps(engine.events)
    ends = step_ends(view)
    assert len(ends) == len(steps)
    for k, ((draft, judged), end) in enumerate(zip(steps, ends)):
        shown = nodes(end)
        assert len(shown) == len(draft.parents), f"step {k}"
        assert [shown[i]["token"] for i in range(len(shown))] == draft.tokens
        assert [shown[i]["parent"] for i in range(len(shown))] == draft.parents
        assert shown[0]["text"] == pair.decode([draft.tokens[0]]) and shown[0]["state"] == "root"
        accepted = {e.i for e in judged if isinstance(e, Accept)}
        rejected = {e.i for e in judged if isinstance(e, Reject)}
        states = {i: item["state"] for i, item in shown.items() if i > 0}
        assert {i for i, s in states.items() if s == "accepted"} == accepted, f"step {k}"
        assert {i for i, s in states.items() if s == "rejected"} == rejected, f"step {k}"
        assert {i for i, s in states.items() if s == "untried"} == set(states) - accepted - rejected, f"step {k}"
        # the accepted nodes are one path down from the root, one per depth
        path = sorted(accepted, key=lambda i: shown[i]["depth"])
        assert [shown[i]["depth"] for i in path] == list(range(1, len(path) + 1))
        assert all(shown[i]["parent"] == (path[d - 1] if d else 0) for d, i in enumerate(path))
        for e in judged:
            if isinstance(e, (Accept, Reject)):
                ratio, rule = shown[e.i]["verdict"]  # the box's two lines under the token
                sign = "<" if isinstance(e, Accept) else "≥"
                assert (ratio, rule) == (f"p/q {e.p / e.q:.3g}", f"u {e.u:.3g} {sign} p/q"), (k, e)
                written = float(ratio.removeprefix("p/q "))
                assert written == pytest.approx(e.p / e.q, rel=5e-3, abs=1e-12)
                assert (e.u < written) == isinstance(e, Accept)  # the rule, read off the node
        final = end.items["final"]
        last = judged[-1]
        assert final["token"] == last.token
        if isinstance(last, Resample):
            assert final["kind"] == "resampled" and final["at"] == last.i
            assert {c for c, p in enumerate(draft.parents) if p == last.i} <= rejected  # every child refused
        else:
            assert final["kind"] == "bonus" and final["at"] == (path[-1] if path else 0)
            assert all(p != final["at"] for p in draft.parents)  # at a leaf


def test_the_mask_is_the_tail_of_kv_tree_mask(run, pair):
    engine, generation = run
    view = TokenTreeView(engine.events, decode=pair)
    sequence = list(generation.prompt) + list(generation.tokens)
    for (draft, _), end in zip(tree_steps(engine.events), step_ends(view)):
        n, n_ctx = len(draft.parents), draft.position + 1  # the root is the last committed token
        mask, _ = kv.tree_mask(pair.target, n_ctx, n_ctx - 1, tuple(draft.parents), range(1, n))
        allowed = (mask[0, 0] == 0)[:, n_ctx - 1 - CONTEXT:]  # (n, CONTEXT + n): the context's tail, then nodes
        shown = end.items["mask"]
        assert [[c == "1" for c in row] for row in shown["cells"]] == allowed.tolist()
        assert [t for t, _ in shown["context"]] == sequence[draft.position - CONTEXT:draft.position]
        assert sequence[draft.position] == draft.tokens[0]
        # the check can fail: a plain causal pass over the flattened tree would let siblings see each other
        causal = [[True] * CONTEXT + [j <= i for j in range(n)] for i in range(n)]
        assert causal != allowed.tolist()


def test_a_step_plays_draft_pass_verdicts_then_the_final_token(run, pair):
    engine, _ = run
    view = TokenTreeView(engine.events, decode=pair)
    draft, judged = tree_steps(engine.events)[0]
    captions = [f["caption"] for f in view.frames[:2 + len(judged)]]
    assert "guesses a tree of" in captions[0] and "ONE target pass" in captions[1]
    first = view.snapshot(0)
    assert {item["state"] for i, item in nodes(first).items() if i > 0} == {"drafted"}
    assert "final" not in first.items
    assert all(("accepted" if isinstance(e, Accept) else "rejected") in c or not isinstance(e, (Accept, Reject))
               for e, c in zip(judged, captions[2:]))
    assert view.meta["steps"] == len(engine.events.of(TreeDraft))


def test_the_still_picture_draws_each_step_its_verdicts_and_its_mask(run, pair):
    """to_svg, read back as XML: one box per node and one for the final token, each in its verdict's colours with
    the ratio and u the rule used, and the mask's cells filled exactly where kv.tree_mask lets the row attend."""
    import xml.etree.ElementTree as ET

    from teachspec.widgets.svg import MASK_OFF, MASK_ON, NODE_COLORS, token_label

    engine, _ = run
    view = TokenTreeView(engine.events, decode=pair)
    ns = "{http://www.w3.org/2000/svg}"
    steps = tree_steps(engine.events)
    frames = end_frames(view)
    assert len(frames) == len(steps)
    for k, ((draft, judged), frame) in enumerate(zip(steps, frames)):
        root = ET.fromstring(view.to_svg(frame=frame))
        assert next(root.iter(ns + "text")).text.startswith(f"tree step {k + 1} · request 0, step {draft.step}")
        boxes = {g.get("data-node"): g for g in root.iter(ns + "g") if g.get("data-node") is not None}
        assert len(boxes) == len(draft.parents) + 1, f"step {k}: every node, and the resampled or bonus token"
        verdicts = {e.i: e for e in judged if isinstance(e, (Accept, Reject))}
        for i in range(len(draft.parents)):
            e = verdicts.get(i)
            state = "root" if i == 0 else "untried" if e is None else "accepted" if isinstance(e, Accept) else \
                "rejected"
            box = boxes[str(i)]
            rect = box.find(ns + "rect")
            assert (box.get("data-state"), rect.get("fill"), rect.get("stroke")) == (state, *NODE_COLORS[state]), \
                f"step {k} node {i}"
            words = [t.text for t in box.iter(ns + "text")]
            assert words[1] == token_label(pair.decode([draft.tokens[i]]), draft.tokens[i]), (k, i, words)
            if e is not None:  # the ratio and the rule, as the widget's box writes them
                sign = "<" if isinstance(e, Accept) else "≥"
                assert words[-2:] == [f"p/q {e.p / e.q:.3g}", f"u {e.u:.3g} {sign} p/q"], (k, i, words)
        last = judged[-1]
        kind = "resampled" if isinstance(last, Resample) else "bonus"
        final = boxes["final"].find(ns + "rect")
        assert (boxes["final"].get("data-state"), final.get("fill")) == (kind, NODE_COLORS[kind][0])
        # the mask: a cell per (node, key), filled where kv.tree_mask lets the node attend, and nowhere else
        cells = {(int(r.get("data-row")), int(r.get("data-col"))): r.get("fill") for r in root.iter(ns + "rect")
                 if r.get("data-row") is not None}
        n, n_ctx = len(draft.parents), draft.position + 1
        assert len(cells) == n * (CONTEXT + n) and set(cells.values()) == {MASK_ON, MASK_OFF}
        drawn = [[cells[i, j] == MASK_ON for j in range(CONTEXT + n)] for i in range(n)]
        mask, _ = kv.tree_mask(pair.target, n_ctx, n_ctx - 1, tuple(draft.parents), range(1, n))
        assert drawn == (mask[0, 0] == 0)[:, n_ctx - 1 - CONTEXT:].tolist(), f"step {k}"
        causal = [[True] * CONTEXT + [j <= i for j in range(n)] for i in range(n)]
        assert drawn != causal  # a flattened causal pass would let siblings see each other: the picture says not
    assert view.to_svg() == view.to_svg(frame=len(view.frames) - 1)  # the newest frame: the last tree step
    assert "no tree of guesses" in TokenTreeView(EventLog()).to_svg()
    assert [token_label(t, 1) for t in ("\n  x", None, "", "abcdefghij")] == ["↵␣␣x", "#1", "∅", "abcdefg…"]
    with pytest.raises(ValueError, match="frame must be"):
        view.to_svg(frame=len(view.frames))


# -- one state, however the events arrive ------------------------------------------------------------------------

def test_a_saved_trace_replays_to_the_same_frames_and_steps_back_in_the_browser(run, pair, tmp_path):
    engine, _ = run
    path = engine.events.save(tmp_path / "tree.jsonl")
    view = TokenTreeView(EventLog.load(path), pair="tiny")
    assert view.frames == TokenTreeView(engine.events, decode=pair).frames
    forward = [view.snapshot(n) for n in range(len(view.frames))]
    for n in reversed(range(len(view.frames))):  # stepping back: every state again, from the frames alone
        assert replay(view.frames, n + 1) == forward[n]
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed: the browser's own replay is not checked")
    frames = tmp_path / "frames.json"
    frames.write_bytes(view.frames_json)
    done = subprocess.run([node, "tests/js/replay.mjs", str(frames)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr  # it replays forwards, then backwards, and compares the two
    states = json.loads(done.stdout)
    assert len(states) == len(forward)
    for n, state in enumerate(states):
        assert state == {"items": forward[n].items, "meta": forward[n].meta, "caption": forward[n].caption,
                         "event": forward[n].event}, f"frame {n}"


def test_a_live_view_holds_after_every_event_the_state_a_replay_of_those_events_has(run, pair):
    events = run[0].events.events
    live_log = EventLog()
    view = TokenTreeView.live(live_log, decode=pair, interval=3600)  # no timer fires: flushed by hand
    for n, event in enumerate(events, start=1):
        values = {f.name: getattr(event, f.name) for f in fields(event) if f.name not in ("t", "request")}
        live_log.emit(type(event), event.request, **values)
        view.flush()
        assert view.snapshot() == TokenTreeView(EventLog(events[:n]), decode=pair).snapshot(), f"after {n} events"
    view.detach()
    assert view.frames == TokenTreeView(EventLog(events), decode=pair).frames


# -- exported, and strict ------------------------------------------------------------------------------------------

def test_a_trace_with_trees_exports_its_token_tree_view_linked_to_the_others(run, tmp_path):
    path = run[0].events.save(tmp_path / "tree.jsonl")
    views = views_of(path, pair="tiny")
    assert [type(v).__name__ for v in views] == ["SpeculationView", "RadixTreeView", "TokenTreeView"]
    assert len({v.link for v in views}) == 1
    page = export_html(path, tmp_path / "tree.html", pair="tiny").read_text()
    assert "ts-token-tree" in page and "tree attention mask" in page and '"key":"mask"' in page
    chain = views_of(ROOT / "notebooks" / "traces" / "together.jsonl")  # no trees: the two views, as before
    assert [type(v).__name__ for v in chain] == ["SpeculationView", "RadixTreeView"]


def test_a_log_without_trees_makes_an_empty_view_that_says_how_to_get_one(pair):
    engine = Engine(pair)
    engine.generate(PROMPT, 6, k=2, seed=0)
    view = TokenTreeView(engine.events)
    assert view.frames == [] and "tree=(2, 2)" in view.empty


def test_events_that_do_not_fit_the_drafted_tree_are_refused(run):
    log = EventLog()
    draft, judged = tree_steps(run[0].events)[0]
    log.emit(TreeDraft, 0, step=0, position=draft.position, parents=draft.parents, tokens=draft.tokens,
             drafter="model", ms=1.0)
    log.emit(Accept, 0, step=0, position=draft.position + 1, i=9, token=5, p=0.5, q=0.5, u=0.1)
    with pytest.raises(ValueError, match="names node 9, and the step's tree has nodes 0 .. 6"):
        TokenTreeView(log)
    log.events[-1] = Accept(0.0, 0, step=0, position=draft.position + 1, i=1, token=draft.tokens[1] + 1, p=0.5,
                            q=0.5, u=0.1)
    with pytest.raises(ValueError, match=f"node 1 of the drafted tree holds token {draft.tokens[1]}"):
        TokenTreeView(log)


def test_a_dynamic_tree_shows_every_node_it_drafted(pair):
    engine = Engine(pair)
    engine.generate(PROMPT, 8, tree="dynamic", seed=0)
    view = TokenTreeView(engine.events, decode=pair)
    steps = tree_steps(engine.events)
    assert steps
    for (draft, judged), end in zip(steps, step_ends(view)):
        assert len(nodes(end)) == len(draft.parents)
        assert {i for i, n in nodes(end).items() if n["state"] == "accepted"} == \
            {e.i for e in judged if isinstance(e, Accept)}
