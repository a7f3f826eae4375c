"""The views' modules, and what a view accepts: no import cycle, one home per job, decoders of every kind.

- teachspec/widgets/*.py form no import cycle, counting imports inside functions too;
- building views from a trace (export.py), the frame state (frames.py), live following (live.py) and HTML
  (page.py) each live in their own module, and ReplayView (base.py) reaches them only through those;
- no widget module knows a `Plain` event: plain decoding is a Verify and a Bonus with no Draft, as the engine's
  k = 0 step emits it;
- `decode=` takes a tokenizer (checked for .decode before being called: calling one encodes), a Pair, a function
  or a pair's name, and `pair=` names the pair that recorded a trace;
- views of one log share a link, so they step together in the browser.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from helpers.models import TOKENIZER_DIR
from teachspec.events import Accept, Bonus, Draft, EventLog, RequestStart, Verify
from teachspec.widgets import RadixTreeView, SpeculationView, export_html
from teachspec.widgets.export import views_of
from teachspec.widgets.frames import Recorder, replay
from teachspec.widgets.text import TokenText, decoder

PACKAGE = Path(__file__).parents[2] / "teachspec" / "widgets"


def imports(path: Path) -> set[str]:
    """The teachspec.widgets modules `path` imports anywhere in it, by short name."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "teachspec.widgets":
                found.update(a.name for a in node.names if (PACKAGE / f"{a.name}.py").exists())
            elif node.module.startswith("teachspec.widgets."):
                found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[2] for a in node.names if a.name.startswith("teachspec.widgets."))
    return found - {path.stem}


GRAPH = {p.stem: imports(p) for p in PACKAGE.glob("*.py") if p.stem != "__init__"}


def test_the_widget_modules_form_no_import_cycle():
    done, path = set(), []

    def visit(module: str) -> None:
        if module in path:
            raise AssertionError(f"import cycle: {' -> '.join(path[path.index(module):] + [module])}")
        if module in done:
            return
        path.append(module)
        for other in GRAPH.get(module, ()):
            visit(other)
        path.pop()
        done.add(module)

    for module in GRAPH:
        visit(module)


def test_the_cycle_check_can_fail():
    GRAPH["page"].add("base")  # page.py importing base.py would close base -> page -> base
    try:
        with pytest.raises(AssertionError, match="import cycle"):
            test_the_widget_modules_form_no_import_cycle()
    finally:
        GRAPH["page"].discard("base")


def test_each_job_has_its_own_home():
    assert GRAPH["frames"] == set() and GRAPH["page"] == set()        # the frame state; a view as HTML
    assert GRAPH["live"] == set()                                     # following a live log
    assert GRAPH["base"] == {"frames", "live", "page", "text"}        # the transport, built on those
    assert {"speculation", "radix", "page", "base"} <= GRAPH["export"]  # views of a trace, and export_html
    assert not any("export" in deps for name, deps in GRAPH.items())  # nothing below imports the top


def test_no_widget_module_knows_the_retired_plain_event():
    for path in PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text())
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
            a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        assert "Plain" not in names, path.name


def test_plain_decoding_is_a_verify_and_a_bonus_with_no_draft():
    log = EventLog()
    log.emit(RequestStart, 0, prompt_tokens=2, prompt=[1, 2])
    for step in range(3):
        log.emit(Verify, 0, step=step, position=2 + step, n=1, ms=2.0)
        log.emit(Bonus, 0, step=step, position=2 + step, token=10 + step, p=0.5)
    view = SpeculationView(log)
    items = view.snapshot().items.values()
    assert [i["kind"] for i in items if i["kind"] != "step"] == ["prompt", "plain", "plain", "plain"]
    assert view.running.passes == 3 and view.running.emitted == 3 and view.running.tokens_per_pass == 1
    assert any("plain decoding" in f["caption"] for f in view.frames)
    # the same Verify after a Draft is the target pass of a speculative step, and the Bonus a bonus
    log.emit(Draft, 0, step=3, position=5, tokens=[7], q=[0.9], drafter="model", ms=1.0)
    log.emit(Verify, 0, step=3, position=5, n=2, ms=2.0)
    log.emit(Accept, 0, step=3, position=5, i=0, token=7, p=0.9, q=0.9, u=0.1)
    log.emit(Bonus, 0, step=3, position=6, token=8, p=0.5)
    view = SpeculationView(log)
    assert [i["kind"] for i in view.snapshot().items.values() if i["kind"] != "step"][-2:] == ["accepted", "bonus"]
    assert view.running.passes == 4 and view.running.emitted == 5


# -- the frame state on its own ----------------------------------------------------------------------------------

def test_the_recorder_keeps_only_what_changed_and_replays_to_its_state():
    r = Recorder()
    r.put({"key": "a", "v": 1})
    r.put({"key": "b", "v": 1})
    r.record(0, "two", {"n": 2})
    r.replace({"a": {"key": "a", "v": 2}, "c": {"key": "c", "v": 1}})
    frame = r.record(3, "changed", {"n": 2})
    assert frame == {"event": 3, "caption": "changed", "put": [{"key": "a", "v": 2}, {"key": "c", "v": 1}],
                     "drop": ["b"]}  # no meta: it did not change
    assert replay(r.frames) == r.snapshot()


# -- decoders ----------------------------------------------------------------------------------------------------

class Tokenizerish:
    """Like a transformers tokenizer: callable (to encode) and with a .decode."""

    def __call__(self, text):
        raise AssertionError("the view called the tokenizer, which encodes, instead of its .decode")

    def decode(self, ids):
        return "".join(chr(96 + i) for i in ids)


@pytest.mark.parametrize("decode", [Tokenizerish(), Tokenizerish().decode, lambda ids: "".join(chr(96 + i) for i in ids)],
                         ids=["tokenizer", "method", "function"])
def test_decode_takes_a_tokenizer_a_pair_or_a_function(decode):
    assert TokenText(decode).many([1, 2, 3]) == "abc"


def test_a_real_tokenizer_and_a_pair_name_decode_to_the_same_text():
    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER_DIR)
    ids = tokenizer.encode("def main():\n    return")
    assert TokenText(tokenizer).many(ids) == tokenizer.decode(ids)  # not tokenizer(ids), which would encode
    assert decoder("tiny").__self__ is decoder("tiny").__self__  # a name's tokenizer is loaded once
    with pytest.raises(ValueError, match="no pair named 'nope'"):
        decoder("nope")


def test_a_replay_finds_its_tokenizer_from_the_pair_that_recorded_it(tmp_path):
    traces = Path(__file__).parents[2] / "notebooks" / "traces"
    for trace in traces.glob("*.jsonl"):  # every committed trace names its pair, so any replay decodes
        assert EventLog.load(trace).pair == "tiny", f"{trace.name}: re-record it with `teachspec traces`"
    trace = traces / "together.jsonl"
    log = EventLog.load(trace)
    first = lambda view: next(i for i in view.snapshot().items.values() if i["kind"] == "accepted")  # noqa: E731
    own = SpeculationView(log)  # no decode=, no pair=: the trace's own pair
    assert isinstance(first(own)["text"], str)
    assert first(SpeculationView(log, pair="tiny"))["text"] == first(own)["text"]
    log.pair = None  # a log that does not know which pair recorded it shows token ids
    assert first(SpeculationView(log))["text"] is None
    page = export_html(trace, tmp_path / "page.html").read_text()  # what a lecturer exports: text, not '#199'
    assert json.dumps(first(own)["text"], ensure_ascii=False)[1:-1].replace("<", "\\u003c") in page


def test_views_of_one_log_are_linked_and_of_different_logs_are_not():
    log = EventLog.load(Path(__file__).parents[2] / "notebooks" / "traces" / "together.jsonl")
    spec, tree = views_of(log)
    assert spec.link == tree.link == RadixTreeView(log).link
    assert SpeculationView(EventLog()).link != spec.link
    nodes = [i for i in tree.snapshot().items.values() if not i.get("stub") and i["parent"] is not None]
    assert nodes and all(isinstance(n["offset"], int) and n["requests"] for n in nodes)  # what links node to text


def test_a_hand_built_trees_nodes_are_labelled_with_their_tokens():
    """A RadixCache used on its own (no engine, no request to recover text from): its Insert events carry the
    tokens, so the view's nodes show text, not just a count."""
    from teachspec import EventLog, RadixCache, load_pair
    from teachspec.widgets import RadixTreeView

    pair = load_pair("tiny")
    log = EventLog()
    tree = RadixCache(events=log)
    system = pair.encode("You are a helpful assistant.")
    tree.insert(system + pair.encode(" Hello"), [None] * (len(system) + len(pair.encode(" Hello"))))
    tree.insert(system + pair.encode(" Goodbye"), [None] * (len(system) + len(pair.encode(" Goodbye"))))
    items = RadixTreeView(log, decode=pair).snapshot().items
    texts = sorted(i["text"] for i in items.values() if i.get("text"))
    assert "You are a helpful assistant." in texts and " Hello" in texts and " Goodbye" in texts
