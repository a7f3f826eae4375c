"""SpeculationView: watch the text grow one speculation step at a time.

Every step plays in frames, one per event:

    Draft      the draft's k guesses appear, pending                         "tok drafted"
    Verify     one target pass scores all k + 1 positions
    Accept     a guess kept: u < min(1, p/q)                                 "tok accepted"
    Reject     the first guess refused: u >= p/q; it stays, struck through  "tok rejected"
    Resample   its replacement, drawn from norm(max(0, p - q)); the guesses after the rejection are dropped
                                                                             "tok resampled"
    Bonus      all k kept, so the target's pass already gave p at k + 1: one more token for free
                                                                             "tok bonus"

Plain decoding is the same step with k = 0: a Verify of one position, then a Bonus with no Draft before it, shown
as "tok plain" (one target pass, one token).

A tree step (`tree=`) has a TreeDraft instead of a Draft: a tree of guesses, most of which never reach the text.
Only what the step emits does: the accepted path, one Accept per level, then the resampled or bonus token. A
position where the rule refused children before it moved on (or gave up and resampled) gets ONE rejected mark,
"tok rejected" with `siblings`: every child refused there, in the order tried, each with its node, p', q' and u
(p' is the residual the siblings before it left). The guesses never tried are not shown at all; TokenTreeView
(token_tree.py) draws the whole tree.

Each step is also one item of its own, kind "step": its k, its draft and target times and the tokens it yielded.
The browser brackets the step's tokens together and draws the steps on a time lane under the text, the draft
passes and the one target pass of each, beside the target passes plain decoding would have spent on the same
tokens (widgets/speculation.js).

Clicking a token shows its p and q as bars over the top alternatives (recorded when the engine runs with
`record_top` > 0), the uniform u and the decision. The strip above the text holds the running numbers of
measure.py: alpha, tokens per target pass, and the speedup the formula predicts against the one measured. It
changes once a step, when the step is complete, so its numbers never count half a step.

    view = SpeculationView(engine.events, decode=pair)              replay a finished log
    view = SpeculationView.live(engine.events, decode=pair)         follow a generation as it runs
"""

from __future__ import annotations

from teachspec.events import Accept, Bonus, Draft, Event, Finish, Reject, RequestStart, Resample, TreeDraft, Verify
from teachspec.widgets import assets, svg
from teachspec.widgets.base import ReplayView
from teachspec.widgets.measure import Running, tree_depth


class SpeculationView(ReplayView):
    _esm = assets.module("helpers.js", "player.js", "speculation.js")
    _css = assets.stylesheet("teachspec.css")

    nothing = "No speculation in this log yet: generate with an Engine whose events are this log."

    def __init__(self, log=None, decode=None, interval: float = 0.05, pair=None):
        self.running = Running()
        self._stats: dict = {}                                 # the strip: running numbers at the last finished step
        self._step_now: tuple[int, int] | None = None          # (request, step) of the latest speculation event
        self._pending: dict[tuple[int, int, int], str] = {}    # (request, step, i) -> key of a guess not yet judged
        self._drafted: set[tuple[int, int]] = set()            # steps that guessed: their last token is a bonus
        self._trees: dict[tuple[int, int], dict] = {}          # tree steps: their path's end, their rejected marks
        self._serial = 0
        super().__init__(log, decode, interval, pair)

    # -- the state machine ---------------------------------------------------------------------------------------

    def _step(self, e: Event, index: int) -> str | None:
        speculation = isinstance(e, (Draft, TreeDraft, Verify, Accept, Reject, Resample, Bonus))
        if speculation:
            if (e.request, e.step) != self._step_now:  # the previous step is complete: update the strip
                self._stats = self.running.as_dict()
                self._step_now = (e.request, e.step)
            self.running.add(e)
        elif isinstance(e, Finish):
            self._stats = self.running.as_dict()
        caption = self._tokens(e)
        if speculation:
            self._unit(e)
        return caption

    def _tokens(self, e: Event) -> str | None:
        """Change the text's tokens for one event; say what happened."""
        word = self._word

        if isinstance(e, RequestStart):
            self._drop_pending()
            self._add(kind="prompt", request=e.request, n=len(e.prompt), ids=e.prompt[:32],
                      text=self.text.many(e.prompt))
            return f"request {e.request} starts with a prompt of {len(e.prompt)} tokens"
        if isinstance(e, Draft):
            self._drop_pending()
            self._drafted.add((e.request, e.step))
            for i, (token, q) in enumerate(zip(e.tokens, e.q)):
                self._pending[(e.request, e.step, i)] = self._add(
                    kind="drafted", request=e.request, step=e.step, i=i, position=e.position + i, token=token,
                    text=self.text.one(token), q=round(q, 5))
            guesses = " ".join(word(t) for t in e.tokens)
            return f"step {e.step}: the {e.drafter} drafter guesses {len(e.tokens)} tokens: {guesses} ({e.ms:.1f} ms)"
        if isinstance(e, TreeDraft):  # no chips yet: only the path the target accepts will enter the text
            self._drop_pending()
            self._drafted.add((e.request, e.step))
            # the tree's parents (to name a refused child's next sibling), the end of its accepted path so far, and
            # its rejected marks: position -> the mark's key
            self._trees[(e.request, e.step)] = {"parents": e.parents, "leaf": 0, "marks": {}}
            return (f"step {e.step}: the {e.drafter} drafter guesses a tree of {len(e.tokens) - 1} tokens after "
                    f"{word(e.tokens[0])}, {tree_depth(e.parents)} deep ({e.ms:.1f} ms); only the path the target "
                    f"accepts enters the text")
        if isinstance(e, Verify) and (e.request, e.step) in self._trees:
            return f"step {e.step}: ONE target pass scores all {e.n} nodes of the tree ({e.ms:.1f} ms)"
        if isinstance(e, Verify) and (e.request, e.step) not in self._drafted:
            return f"step {e.step}: one target pass, no guesses: plain decoding ({e.ms:.1f} ms)"
        if isinstance(e, Verify):
            return f"step {e.step}: ONE target pass scores all {e.n} positions ({e.ms:.1f} ms)"
        if isinstance(e, (Accept, Reject)) and (e.request, e.step) in self._trees:
            return self._tree_judged(e)
        if isinstance(e, (Accept, Reject)):
            verdict = "accepted" if isinstance(e, Accept) else "rejected"
            self._judged(e, kind=verdict, p=round(e.p, 5), q=round(e.q, 5), u=round(e.u, 5),
                         top_p=self.text.top(e.top_p), top_q=self.text.top(e.top_q))
            ratio = e.p / e.q if e.q > 0 else float("inf")
            sign = "<" if isinstance(e, Accept) else ">="
            return (f"guess {e.i} {word(e.token)} {verdict}: u = {e.u:.3g} {sign} "
                    f"min(1, p/q) = min(1, {e.p:.3g}/{e.q:.3g}) = {min(1.0, ratio):.3g}")
        if isinstance(e, Resample) and (e.request, e.step) in self._trees:
            self._new_token(e, "resampled", node=e.i, q=round(e.q, 5), top_residual=self.text.top(e.top_residual))
            return (f"every child of node {e.i} was refused: {word(e.token)} is drawn from the last residual in its "
                    f"place")
        if isinstance(e, Bonus) and (e.request, e.step) in self._trees:
            leaf = self._trees[(e.request, e.step)]["leaf"]
            self._new_token(e, "bonus", node=leaf, top_p=self.text.top(e.top_p))
            return f"the accepted path reached a leaf: the bonus token {word(e.token)} comes free from the same pass"
        if isinstance(e, Resample):
            self._drop_pending(after=(e.request, e.step, e.i))
            self._new_token(e, "resampled", i=e.i, q=round(e.q, 5), top_residual=self.text.top(e.top_residual))
            return f"{word(e.token)} drawn from the residual norm(max(0, p - q)) in its place; later guesses dropped"
        if isinstance(e, Bonus) and (e.request, e.step) in self._drafted:
            self._new_token(e, "bonus", top_p=self.text.top(e.top_p))
            return f"all guesses kept: the bonus token {word(e.token)} comes free from the same target pass"
        if isinstance(e, Bonus):  # a Bonus with no draft before it is a k = 0 step: plain decoding
            self._new_token(e, "plain", top_p=self.text.top(e.top_p))
            return f"plain decoding: one target pass, one token {word(e.token)}"
        if isinstance(e, Finish):
            self._drop_pending()  # guesses cut by the token budget or an EOS are never judged
            return f"request {e.request} finished ({e.reason}): {e.new_tokens} new tokens in {e.ms:.0f} ms"
        return None  # radix cache events and the prefill: not this view's business

    def _tree_judged(self, e: Accept | Reject) -> str:
        """A child the multi-draft rule tried: an accepted one enters the text, a refused one joins the rejected
        mark of its position (one per position, however many siblings were refused there)."""
        tree, word = self._trees[(e.request, e.step)], self._word
        # 4 significant digits: a residual's p' is often tiny, and the ratio must read as the rule used it
        numbers = {name: float(f"{getattr(e, name):.4g}") for name in ("p", "q", "u")}
        ratio = e.p / e.q if e.q > 0 else float("inf")
        rule = f"min(1, p/q) = min(1, {e.p:.3g}/{e.q:.3g}) = {min(1.0, ratio):.3g}"
        if isinstance(e, Accept):
            tree["leaf"] = e.i
            self._add(kind="accepted", request=e.request, step=e.step, node=e.i, position=e.position,
                      token=e.token, text=self.text.one(e.token), **numbers)
            return f"node {e.i} {word(e.token)} accepted: u = {e.u:.3g} < {rule}"
        sibling = {"node": e.i, "token": e.token, "text": self.text.one(e.token), **numbers}
        key = tree["marks"].get(e.position)
        if key is None:
            tree["marks"][e.position] = self._add(kind="rejected", request=e.request, step=e.step,
                                                  position=e.position, siblings=[sibling])
        else:
            mark = self.items[key]
            self._put({**mark, "siblings": mark["siblings"] + [sibling]})
        parents = tree["parents"]
        later = [j for j in range(e.i + 1, len(parents)) if parents[j] == parents[e.i]]
        then = (f"node {later[0]}, its next sibling, is judged against the residual" if later else
                "no sibling is left: a token is drawn from the residual")
        return f"node {e.i} {word(e.token)} rejected: u = {e.u:.3g} >= {rule}; {then}"

    def _unit(self, e: Draft | TreeDraft | Verify | Accept | Reject | Resample | Bonus) -> None:
        """The step's own item: what it guessed, what it cost and what it yielded, so far."""
        key = f"s{e.request}.{e.step}"
        unit = dict(self.items.get(key) or {"key": key, "kind": "step", "request": e.request, "step": e.step,
                                            "drafted": 0, "accepted": 0, "emitted": 0, "draft_ms": 0.0,
                                            "verify_ms": 0.0})
        if isinstance(e, Draft):
            unit["drafted"], unit["draft_ms"], unit["drafter"] = len(e.tokens), round(e.ms, 3), e.drafter
        elif isinstance(e, TreeDraft):  # drafted: its guesses, as for a chain; depth: the positions they cover
            unit.update(drafted=len(e.tokens) - 1, depth=tree_depth(e.parents), tree=True, draft_ms=round(e.ms, 3),
                        drafter=e.drafter)
        elif isinstance(e, Verify):
            unit["verify_ms"], unit["n"] = round(e.ms, 3), e.n
        elif isinstance(e, Accept):
            unit["accepted"] += 1
        if isinstance(e, (Accept, Resample, Bonus)):
            unit["emitted"] += 1
        self._put(unit)

    def _new_token(self, e: Resample | Bonus, kind: str, **extra) -> None:
        self._add(kind=kind, request=e.request, step=e.step, position=e.position, token=e.token,
                  text=self.text.one(e.token), p=round(e.p, 5), **extra)

    def _add(self, **item) -> str:
        key = f"t{self._serial}"
        self._put({"key": key, "order": self._serial, **item})
        self._serial += 1
        return key

    def _judged(self, e: Accept | Reject, **verdict) -> None:
        """The pending guess e judges, replaced by a judged copy."""
        key = self._pending.pop((e.request, e.step, e.i), None)
        if key is None:  # a trace without its Draft events: the guess appears as it is judged
            key = self._add(request=e.request, step=e.step, i=e.i, position=e.position, token=e.token,
                            text=self.text.one(e.token))
        self._put({**self.items[key], **verdict})

    def _drop_pending(self, after: tuple[int, int, int] | None = None) -> None:
        """Forget guesses that will never be judged: all of them, or those of one step after position i."""
        for slot in list(self._pending):
            if after is None or (slot[:2] == after[:2] and slot[2] > after[2]):
                self._drop(self._pending.pop(slot))

    def _word(self, token: int) -> str:
        text = self.text.one(token)
        return f"#{token}" if text is None else repr(text)

    def _meta(self) -> dict:
        return self._stats

    # -- a static picture ----------------------------------------------------------------------------------------

    def to_svg(self, frame: int | None = None) -> str:
        """The text at frame `frame` (the newest when None) as SVG, for a page that cannot run the widget."""
        return svg.text_svg(self.snapshot(frame))
