"""Measuring speculation from its events: the numbers in the stats strip and the charts.

Per step (one draft, one target pass; plain decoding is a step with no draft) the log says how many tokens were
guessed, how many of them the target judged and accepted, and how many tokens came out. From the running sums:

    alpha       accepted / judged guesses. A guess after the first rejection is never judged (the step stops
                there), so it is not counted; this is the per-guess acceptance rate the formula assumes.
                Stats.alpha is the same ratio, so a chart and a printed Stats agree on the same steps
                (Stats.decoding.alpha leaves out the first step, which also reads the prompt).
    tokens/pass emitted tokens / target passes: the Eq. (1) quantity, (1 - alpha^(k+1)) / (1 - alpha) predicted
    c           draft time per drafted token / target time per pass (Leviathan et al.'s cost ratio)
    predicted   theory.speedup(alpha, k, c) with k the mean draft length, rounded
    measured    what plain decoding would have cost, one target pass per token at this run's mean pass time,
                divided by what the run spent in draft and target passes: the quantity Theorem 3.8 predicts.

A tree step (`tree=`: a TreeDraft, one Verify over all its nodes) counts as Stats counts it: its k is the tree's
depth, the positions it guessed, and a position is judged once however many siblings the rule tried there (the
Accept and Reject events of one position), accepted when one of them was. So alpha is the chance the rule moves
one level down, the chain formula reads the tree as a chain whose every guess gets several tries, and tokens per
pass stays what it is for every step: the Accept, Resample and Bonus tokens per Verify. The rejected siblings
are in `judged` once per position, never in `emitted`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from teachspec import theory
from teachspec.events import Accept, Bonus, Draft, Event, Reject, Resample, TreeDraft, Verify


@dataclass(slots=True)
class Step:
    request: int
    step: int
    t: float = 0.0                 # when its target pass ended (seconds since the log began)
    drafted: int = 0               # k, the positions guessed: a chain's length, a tree's depth
    nodes: int = 0                 # a tree step's guesses (its nodes less the root); 0 for a chain
    judged: int = 0                # positions judged (a tree's rejected siblings share theirs)
    accepted: int = 0
    emitted: int = 0               # tokens this step added to the text, 1 .. k + 1
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    accepted_at: list[bool] = field(default_factory=list)  # per draft position: was that guess accepted
    first: int = 0                 # the sequence position of the first guess


def steps(events: Iterable[Event]) -> list[Step]:
    """One Step per (request, step) in the log, in order."""
    by_key: dict[tuple[int, int], Step] = {}
    judged_at: dict[tuple[int, int], set[int]] = {}  # the positions each step has judged so far
    for e in events:
        if not isinstance(e, (Draft, TreeDraft, Verify, Accept, Reject, Resample, Bonus)):
            continue
        s = by_key.setdefault((e.request, e.step), Step(e.request, e.step))
        if isinstance(e, Draft):
            s.drafted, s.draft_ms, s.first = len(e.tokens), e.ms, e.position
            s.accepted_at = [False] * len(e.tokens)
        elif isinstance(e, TreeDraft):  # its position is the root's, the last committed token
            s.drafted, s.nodes, s.draft_ms, s.first = tree_depth(e.parents), len(e.parents) - 1, e.ms, e.position + 1
            s.accepted_at = [False] * s.drafted
        elif isinstance(e, Verify):  # a target pass, whether or not guesses came before it
            s.verify_ms, s.t = e.ms, e.t
        if isinstance(e, (Accept, Reject)):
            seen = judged_at.setdefault((e.request, e.step), set())
            s.judged += e.position not in seen
            seen.add(e.position)
        if isinstance(e, Accept):
            s.accepted += 1
            at = e.position - s.first if s.nodes else e.i  # a tree's Accept names its node: its depth tells
            if 0 <= at < len(s.accepted_at):
                s.accepted_at[at] = True
        if isinstance(e, (Accept, Resample, Bonus)):
            s.emitted += 1
    return list(by_key.values())


@dataclass(slots=True)
class Running:
    """Running sums over a log's speculation events, updated one event at a time."""
    drafts: int = 0                # steps that guessed at least one token
    drafted: int = 0               # positions guessed: a chain's length, a tree's depth
    judged: int = 0
    accepted: int = 0
    emitted: int = 0
    passes: int = 0                # target passes
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    _judging: tuple[int, int, int] | None = field(default=None, repr=False)  # (request, step, position) last judged

    def add(self, e: Event) -> None:
        if isinstance(e, (Draft, TreeDraft)):
            self.drafts += 1
            self.drafted += len(e.tokens) if isinstance(e, Draft) else tree_depth(e.parents)
            self.draft_ms += e.ms
        elif isinstance(e, Verify):  # a target pass, whether or not guesses came before it
            self.passes += 1
            self.verify_ms += e.ms
        if isinstance(e, (Accept, Reject)):
            # a tree's siblings at one position come one after another: the position is judged once
            where = (e.request, e.step, e.position)
            self.judged += where != self._judging
            self.accepted += isinstance(e, Accept)
            self._judging = where
        if isinstance(e, (Accept, Resample, Bonus)):
            self.emitted += 1

    @property
    def alpha(self) -> float | None:
        return self.accepted / self.judged if self.judged else None

    @property
    def tokens_per_pass(self) -> float | None:
        return self.emitted / self.passes if self.passes else None

    @property
    def k(self) -> float | None:
        """The mean draft length."""
        return self.drafted / self.drafts if self.drafts else None

    @property
    def c(self) -> float | None:
        if not (self.drafted and self.passes and self.verify_ms > 0):
            return None
        return (self.draft_ms / self.drafted) / (self.verify_ms / self.passes)

    @property
    def predicted(self) -> float | None:
        if self.alpha is None or self.c is None:
            return None
        return float(theory.speedup(self.alpha, max(1, round(self.k)), self.c))

    @property
    def measured(self) -> float | None:
        spent = self.draft_ms + self.verify_ms
        if not (self.passes and spent > 0):
            return None
        return self.emitted * (self.verify_ms / self.passes) / spent

    def as_dict(self) -> dict:
        """Every number, rounded for display; None where the log does not have what it needs yet."""
        out = {name: getattr(self, name) for name in ("drafts", "drafted", "judged", "accepted", "emitted", "passes")}
        for name in ("alpha", "tokens_per_pass", "k", "c", "predicted", "measured"):
            value = getattr(self, name)
            out[name] = None if value is None else round(value, 4)
        out["draft_ms"], out["verify_ms"] = round(self.draft_ms, 3), round(self.verify_ms, 3)
        return out


def tree_depth(parents: list[int]) -> int:
    """A tree's depth: the most guesses on one path down from the root (parents are numbered before children)."""
    depth = [0] * len(parents)
    for i in range(1, len(parents)):
        depth[i] = depth[parents[i]] + 1
    return max(depth)
