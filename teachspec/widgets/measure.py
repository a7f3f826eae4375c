"""Measuring speculation from its events: the numbers in the stats strip and the charts.

Per step (one draft, one target pass; plain decoding is a step with no draft) the log says how many tokens were guessed, how many of them the target
judged and accepted, and how many tokens came out. From the running sums:

    alpha       accepted / judged guesses. A guess after the first rejection is never judged (the step stops
                there), so it is not counted; this is the per-guess acceptance rate the formula assumes.
                Stats.alpha is the same ratio, so a chart and a printed Stats agree on the same steps
                (Stats.decoding.alpha leaves out the first step, which also reads the prompt).
    tokens/pass emitted tokens / target passes: the Eq. (1) quantity, (1 - alpha^(k+1)) / (1 - alpha) predicted
    c           draft time per drafted token / target time per pass (Leviathan et al.'s cost ratio)
    predicted   theory.speedup(alpha, k, c) with k the mean draft length, rounded
    measured    what plain decoding would have cost, one target pass per token at this run's mean pass time,
                divided by what the run spent in draft and target passes: the quantity Theorem 3.8 predicts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from teachspec import theory
from teachspec.events import Accept, Bonus, Draft, Event, Reject, Resample, Verify


@dataclass(slots=True)
class Step:
    request: int
    step: int
    t: float = 0.0                 # when its target pass ended (seconds since the log began)
    drafted: int = 0               # k, the guesses proposed
    judged: int = 0
    accepted: int = 0
    emitted: int = 0               # tokens this step added to the text, 1 .. k + 1
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    accepted_at: list[bool] = field(default_factory=list)  # per draft position: was that guess accepted


def steps(events: Iterable[Event]) -> list[Step]:
    """One Step per (request, step) in the log, in order."""
    by_key: dict[tuple[int, int], Step] = {}
    for e in events:
        if not isinstance(e, (Draft, Verify, Accept, Reject, Resample, Bonus)):
            continue
        s = by_key.setdefault((e.request, e.step), Step(e.request, e.step))
        if isinstance(e, Draft):
            s.drafted, s.draft_ms = len(e.tokens), e.ms
            s.accepted_at = [False] * len(e.tokens)
        elif isinstance(e, Verify):  # a target pass, whether or not guesses came before it
            s.verify_ms, s.t = e.ms, e.t
        if isinstance(e, (Accept, Reject)):
            s.judged += 1
        if isinstance(e, Accept):
            s.accepted += 1
            if e.i < len(s.accepted_at):
                s.accepted_at[e.i] = True
        if isinstance(e, (Accept, Resample, Bonus)):
            s.emitted += 1
    return list(by_key.values())


@dataclass(slots=True)
class Running:
    """Running sums over a log's speculation events, updated one event at a time."""
    drafts: int = 0                # steps that guessed at least one token
    drafted: int = 0
    judged: int = 0
    accepted: int = 0
    emitted: int = 0
    passes: int = 0                # target passes
    draft_ms: float = 0.0
    verify_ms: float = 0.0

    def add(self, e: Event) -> None:
        if isinstance(e, Draft):
            self.drafts += 1
            self.drafted += len(e.tokens)
            self.draft_ms += e.ms
        elif isinstance(e, Verify):  # a target pass, whether or not guesses came before it
            self.passes += 1
            self.verify_ms += e.ms
        if isinstance(e, (Accept, Reject)):
            self.judged += 1
            self.accepted += isinstance(e, Accept)
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
