"""TokenTreeView: one tree of guesses at a time, how one target pass checked it, and which path survived.

With `tree=` the engine drafts a tree instead of a chain (SpecInfer, Miao et al. 2024; Medusa, Cai et al. 2024):
node 0, the root, is the last committed token, and every other node guesses the token after its parent. One
target pass scores every node, because the *tree attention mask* lets node i see the context and its own
ancestors (itself included) and nothing of its siblings or cousins (`kv.tree_mask`). Then the multi-draft rule
walks down from the root, trying each node's children in order (speculative/tree.py):

    accept child x with probability min(1, p'(x) / q'(x))   (u < p'/q': the rule moves down to x)
    on a rejection p' <- norm(max(0, p' - q'))              (the next sibling is judged against the residual)

Each tree step plays in frames, one per event of the step (events.py):

    TreeDraft   the tree appears, every guess waiting; the mask for it on the right       "drafted"
    Verify      ONE target pass over all n nodes
    Accept      a child kept: its edge joins the accepted path                            "accepted"
    Reject      a child refused, marked with u >= p/q (p is the residual after any rejected siblings)
                                                                                          "rejected"
    Resample    every child of node i refused: a token drawn from the last residual, hung under node i
                                                                                          "resampled"
    Bonus       the path reached a leaf: a token drawn from p at the leaf, for free       "bonus"

When the step ends, the guesses never tried (under a rejected node, or after an accepted sibling) are greyed
"untried". A Finish before the step's end (the token budget, an EOS) does the same.

The mask is the small grid beside the tree: a row per node (the queries of the pass), a column per key: the last
`CONTEXT` committed tokens before the root, then the nodes. A cell is "1" where the row's node may attend: every
context token, and its own ancestors, itself included. It is the tail of `kv.tree_mask(model, n_ctx, n_ctx - 1,
parents, range(1, n))`, the root being the one committed token not cached yet (tests/widgets/test_widgets_token_tree.py
compares the two). The committed tokens come from the log too: the prompt (RequestStart) and each step's
Accept, Resample and Bonus tokens.

The layout is layout.py's tidy layout turned on its side, so a path reads left to right like the text: a node's
column is its depth, each leaf takes the next row, a parent sits level with the middle of its children. Only tree
steps make frames; chain and plain steps of the same log only extend the committed text.

    view = TokenTreeView(engine.events, decode=pair)               replay a finished log
    view = TokenTreeView.live(engine.events, decode=pair)          follow a generation as it runs
    view.to_svg()                                                  the step on screen as a still picture (svg.py)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from teachspec.events import Accept, Bonus, Event, Finish, Reject, RequestStart, Resample, TreeDraft, Verify
from teachspec.widgets import assets, layout, svg
from teachspec.widgets.base import ReplayView
from teachspec.widgets.text import describe

CONTEXT = 2  # committed tokens before the root shown as the mask's first columns; every node sees the rest too


@dataclass(slots=True)
class TreeStep:
    """The tree step on screen, as its events have told it so far."""
    request: int
    step: int
    index: int                             # its number among the view's tree steps, from 0
    position: int                          # the root's position in the sequence
    parents: list[int]
    tokens: list[int]
    drafter: str
    draft_ms: float
    context: list[int | None]              # the committed tokens before the root (None: not in the log)
    states: list[str] = field(default_factory=list)  # per node: root, drafted, accepted, rejected, untried
    judged: dict[int, dict] = field(default_factory=dict)  # node -> its p, q, u and verdict lines
    path: list[int] = field(default_factory=list)  # the accepted nodes, root excluded, top down
    final: dict | None = None              # the resampled or bonus token, and the node it hangs under
    verify_ms: float | None = None
    done: bool = False

    @property
    def depth(self) -> list[int]:
        depth = [0] * len(self.parents)
        for i in range(1, len(self.parents)):
            depth[i] = depth[self.parents[i]] + 1
        return depth


@dataclass(slots=True)
class _Kids:
    children: list[int]  # all that layout.place reads of a node


class TokenTreeView(ReplayView):
    _esm = assets.module("helpers.js", "player.js", "token_tree.js")
    _css = assets.stylesheet("teachspec.css")
    wide = True  # its tree and its mask need a page's whole width, never half of it (page.py)

    nothing = ("No tree of guesses in this log yet: generate with tree=(2, 2), tree='dynamic' or tree='adaptive' "
               "on an Engine whose events are this log.")

    def __init__(self, log=None, decode=None, interval: float = 0.05, pair=None):
        self._sequences: dict[int, list[int]] = {}  # request -> its committed tokens so far: the mask's context
        self._now: TreeStep | None = None           # the step on screen
        self._totals = {"steps": 0, "emitted": 0, "accepted": 0}  # over the finished tree steps
        super().__init__(log, decode, interval, pair)

    # -- the state machine ---------------------------------------------------------------------------------------

    def _step(self, e: Event, index: int) -> str | None:
        if isinstance(e, RequestStart):
            self._sequences[e.request] = list(e.prompt)
            return None
        if isinstance(e, TreeDraft):
            caption = self._draft(e, index)
        else:
            if isinstance(e, (Accept, Resample, Bonus)) and e.request in self._sequences:
                self._sequences[e.request].append(e.token)  # committed: the context of later steps
            caption = self._judge(e, index)
        if caption is not None:
            self._replace(self._drawn())
        return caption

    def _draft(self, e: TreeDraft, index: int) -> str:
        self._end()
        if len(e.parents) != len(e.tokens) or not e.parents or e.parents[0] != -1 or \
                any(not 0 <= p < i for i, p in enumerate(e.parents[1:], start=1)):
            raise ValueError(f"{describe(e, index)}: a tree needs one parent per token, -1 for the root and every "
                             f"other parent numbered before its child")
        sequence = self._sequences.get(e.request)
        known = sequence is not None and len(sequence) == e.position + 1  # its last token is the root
        tail = min(CONTEXT, e.position)
        context = sequence[e.position - tail:e.position] if known else [None] * tail
        self._now = TreeStep(e.request, e.step, self._totals["steps"], e.position, list(e.parents),
                             list(e.tokens), e.drafter, e.ms, context, ["root"] + ["drafted"] * (len(e.parents) - 1))
        guesses = len(e.parents) - 1
        return (f"tree step {self._now.index + 1} (request {e.request}, step {e.step}): the {e.drafter} drafter "
                f"guesses a tree of {guesses} tokens after {self._word(e.tokens[0])} ({e.ms:.1f} ms)")

    def _judge(self, e: Event, index: int) -> str | None:
        """An event of the step on screen (others are not this view's business): what it did, in words."""
        now = self._now
        if now is None or now.done or e.request != now.request:
            return None
        if isinstance(e, Finish):
            self._end()
            return f"request {e.request} finished ({e.reason}) before the step ended: its other guesses go untried"
        if getattr(e, "step", None) != now.step:
            return None
        if isinstance(e, Verify):
            now.verify_ms = e.ms
            return (f"ONE target pass scores all {e.n} nodes at once, each seeing the context and its own "
                    f"ancestors only (the mask) ({e.ms:.1f} ms)")
        if isinstance(e, (Accept, Reject)):
            return self._child(e, index)
        if isinstance(e, Resample):
            self._node(e.i, e, index)
            now.final = {"kind": "resampled", "token": e.token, "at": e.i, "p": _short(e.p)}
            self._end()
            return (f"every child of node {e.i} was rejected: {self._word(e.token)} is drawn from the last residual "
                    f"instead; {_tokens(len(now.path) + 1)} from one target pass")
        if isinstance(e, Bonus):
            at = now.path[-1] if now.path else 0
            now.final = {"kind": "bonus", "token": e.token, "at": at, "p": _short(e.p)}
            self._end()
            return (f"node {at} is a leaf: the bonus token {self._word(e.token)} comes free from the target's p "
                    f"after it; {_tokens(len(now.path) + 1)} from one target pass")
        return None

    def _child(self, e: Accept | Reject, index: int) -> str:
        now = self._now
        self._node(e.i, e, index)
        if now.tokens[e.i] != e.token:
            raise ValueError(f"{describe(e, index)}: node {e.i} of the drafted tree holds token {now.tokens[e.i]}, "
                             f"not {e.token}")
        accepted = isinstance(e, Accept)
        refused = sum(now.states[c] == "rejected" for c, p in enumerate(now.parents) if p == now.parents[e.i])
        ratio = e.p / e.q if e.q > 0 else math.inf
        sign = "<" if accepted else "≥"
        now.states[e.i] = "accepted" if accepted else "rejected"
        now.judged[e.i] = {"p": _short(e.p), "q": _short(e.q), "u": _short(e.u),
                           "verdict": [f"p/q {_ratio(ratio)}", f"u {e.u:.3g} {sign} p/q"]}  # as the box reads
        if accepted:
            now.path.append(e.i)
        residual = " (p is the residual its rejected siblings left)" if refused else ""
        verdict = "accepted" if accepted else "rejected"
        return (f"node {e.i} {self._word(e.token)} {verdict}: u = {e.u:.3g} {sign} min(1, p/q) = "
                f"min(1, {e.p:.3g}/{e.q:.3g}) = {min(1.0, ratio):.3g}{residual}")

    def _node(self, i: int, e: Event, index: int) -> None:
        if not 0 <= i < len(self._now.parents):
            raise ValueError(f"{describe(e, index)} names node {i}, and the step's tree has nodes 0 .. "
                             f"{len(self._now.parents) - 1}; did the view miss its TreeDraft?")

    def _end(self) -> None:
        """The step on screen is over: the guesses nobody tried are greyed, and the totals count it."""
        now = self._now
        if now is None or now.done:
            return
        now.states = ["untried" if s == "drafted" else s for s in now.states]
        now.done = True
        self._totals = {"steps": self._totals["steps"] + 1,
                        "emitted": self._totals["emitted"] + len(now.path) + (now.final is not None),
                        "accepted": self._totals["accepted"] + len(now.path)}

    def _word(self, token: int) -> str:
        text = self.text.one(token)
        return f"#{token}" if text is None else repr(text)

    # -- what the browser draws ----------------------------------------------------------------------------------

    def _drawn(self) -> dict[str, dict]:
        """The items of the step on screen: the step, each node where the layout puts it, the final token, the
        mask."""
        now = self._now
        parents, depth = now.parents, now.depth
        n = len(parents)
        spots = _place(parents + ([now.final["at"]] if now.final else []))
        items = {"step": {"key": "step", "kind": "step", "request": now.request, "step": now.step,
                          "index": now.index, "position": now.position, "drafter": now.drafter, "nodes": n,
                          "draft_ms": round(now.draft_ms, 3),
                          "verify_ms": None if now.verify_ms is None else round(now.verify_ms, 3)}}
        for i in range(n):
            x, y = spots[i]
            items[f"n{i}"] = {"key": f"n{i}", "kind": "node", "i": i, "parent": parents[i], "depth": depth[i],
                              "token": now.tokens[i], "text": self.text.one(now.tokens[i]), "state": now.states[i],
                              "x": x, "y": y, **now.judged.get(i, {})}
        if now.final:
            x, y = spots[n]
            items["final"] = {"key": "final", **now.final, "text": self.text.one(now.final["token"]), "x": x,
                              "y": y}
        context = [[t, None if t is None else self.text.one(t)] for t in now.context]  # [token, text]
        items["mask"] = {"key": "mask", "kind": "mask", "context": context, "cells": _mask(parents, len(context))}
        return items

    def _meta(self) -> dict:
        return dict(self._totals)

    # -- a static picture ----------------------------------------------------------------------------------------

    def to_svg(self, frame: int | None = None) -> str:
        """The tree step at frame `frame` as SVG: the newest when None, i.e. the last tree step, or the one under
        way while a live view follows a generation. Its tree, verdicts, p/q ratios and u, final token and mask."""
        return svg.token_tree_svg(self.snapshot(frame))


# -- the pictures' arithmetic --------------------------------------------------------------------------------------

def _mask(parents: list[int], context: int) -> list[str]:
    """The tree attention mask, one string per node (the query): "1" per context column, then "1" at each node
    it may attend to (its ancestors and itself), "0" elsewhere."""
    rows = []
    for i in range(len(parents)):
        seen, j = set(), i
        while j >= 0:
            seen.add(j)
            j = parents[j]
        rows.append("1" * context + "".join("1" if j in seen else "0" for j in range(len(parents))))
    return rows


def _place(parents: list[int]) -> list[tuple[int, float]]:
    """(column, row) of every node: layout.py's tidy layout turned on its side, its depth as the column and its
    place among the leaves as the row."""
    children = [_Kids([]) for _ in parents]
    for i, p in enumerate(parents[1:], start=1):
        children[p].children.append(i)
    spots, _ = layout.place(dict(enumerate(children)), layout.Fold(set(range(len(parents))), {}))
    return [(spots[i].y, spots[i].x) for i in range(len(parents))]


def _short(x: float) -> float:
    return float(f"{x:.4g}")


def _tokens(n: int) -> str:
    return f"{n} token{'s' * (n != 1)}"


def _ratio(ratio: float) -> str:
    return "∞" if math.isinf(ratio) else f"{ratio:.3g}"  # q = 0: a guess the draft could not have made
