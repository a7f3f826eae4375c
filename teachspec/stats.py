"""What one generation measured: the numbers the papers and serving engines report.

For speculative decoding (Leviathan et al. 2023; vLLM's metrics):
- alpha, the acceptance rate: accepted / judged guesses, where a guess is judged if every guess before it was
  accepted (guesses after a rejection are thrown away unseen). That is the per-token acceptance probability the
  speedup formula assumes; accepted / drafted would count the unseen guesses as failures and understate it;
- tokens per target pass: all emitted tokens / target forward passes, the quantity the speedup formula predicts;
  the name the demo, the views and the README use;
- mean acceptance length: vLLM's name for 1 + accepted / drafts, the same ratio counted over speculation steps
  alone (no prefill, no plain steps, no step cut short by a stop), so a little above tokens per target pass.
Plain decoding is the k = 0 case: one token per target pass, nothing drafted.

The first step of a generation also reads the prompt (both models' prefill) and yields the first token; serving
engines report it apart (time to first token) from the steps after it (time per output token). The speedup
formula describes only the steps after it, so `decoding` gives those alone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass
class Stats:
    new_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens served from the radix cache instead of computed
    target_passes: int = 0  # the prefill counts as one: it yields the first token
    draft_passes: int = 0
    drafts: int = 0  # speculation steps that proposed at least one token
    drafted: int = 0
    accepted: int = 0
    rejected: int = 0  # steps that ended in a rejection: each is one judged guess that failed
    accepted_per_position: list[int] = field(default_factory=list)  # index i: drafts whose token i was accepted
    drafted_per_position: list[int] = field(default_factory=list)  # index i: drafts that proposed a token i
    wall_s: float = 0.0
    target_s: float = 0.0  # time inside target forward passes
    draft_s: float = 0.0  # time inside draft proposals
    cache_s: float = 0.0  # time inside the radix cache: match, lock, assemble, evict, insert (its whole overhead)
    first_step: Stats | None = None  # the counters as the first step ended (`mark_first_step`)

    def add_step(self, k: int, accepted: int, emitted: int, target_s: float, draft_passes: int = 0,
                 draft_s: float = 0.0) -> None:
        """Count one step: its target pass and draft passes, and, when it guessed, its judged and accepted guesses.

        `k` is how many positions it guessed (a chain's length, a tree's depth), `accepted` how many of them
        verification accepted, `emitted` how many tokens the step kept after a stop or the budget cut it short: a
        guess accepted past the cut does not count, and a rejection past it was never seen."""
        self.target_passes += 1
        self.target_s += target_s
        self.draft_passes += draft_passes
        self.draft_s += draft_s
        if not k:
            return
        kept = min(accepted, emitted)
        self.drafts += 1
        self.drafted += k
        self.accepted += kept
        self.rejected += accepted < k and emitted > accepted
        while len(self.drafted_per_position) < k:
            self.drafted_per_position.append(0)
            self.accepted_per_position.append(0)
        for i in range(k):
            self.drafted_per_position[i] += 1
            self.accepted_per_position[i] += i < kept

    def add(self, other: Stats) -> None:
        """Count another generation's steps too: the sums over several requests (a benchmark's totals)."""
        for name in ("new_tokens", "prompt_tokens", "cached_tokens", "target_passes", "draft_passes", "drafts",
                     "drafted", "accepted", "rejected", "wall_s", "target_s", "draft_s", "cache_s"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for mine, theirs in ((self.accepted_per_position, other.accepted_per_position),
                             (self.drafted_per_position, other.drafted_per_position)):
            mine.extend([0] * (len(theirs) - len(mine)))
            for i, n in enumerate(theirs):
                mine[i] += n

    @classmethod
    def from_counters(cls, drafts: int, accepted: int, accepted_per_position: list[int],
                      draft_tokens: int | None = None) -> Stats:
        """The steps a serving engine counted (vLLM's spec_decode counters: teachspec.serving.metrics) as a Stats.

        Its counters are per step, not per token: drafts, guesses accepted, and per position i the drafts whose
        guess i was accepted. That is enough: guess i is judged only when guesses 0 .. i-1 were accepted, so
        judged = drafts + accepted_per_position[0] + ... + accepted_per_position[k-2], and the steps that ended in a
        rejection are the drafts that did not accept all k, drafts - accepted_per_position[k-1]. Only speculation
        steps are counted, each taken to guess k = len(accepted_per_position) tokens (true of a draft model; prompt
        lookup can guess fewer), so tokens per target pass is the mean acceptance length 1 + accepted / drafts."""
        k = len(accepted_per_position)
        return cls(new_tokens=drafts + accepted, target_passes=drafts, drafts=drafts,
                   drafted=draft_tokens if draft_tokens is not None else drafts * k, accepted=accepted,
                   rejected=drafts - (accepted_per_position[-1] if k else 0),
                   accepted_per_position=list(accepted_per_position), drafted_per_position=[drafts] * k)

    def mark_first_step(self, new_tokens: int, seconds: float) -> None:
        """Remember the counters now, as the first step ends with `new_tokens` committed, `seconds` in."""
        self.first_step = dataclasses.replace(self, new_tokens=new_tokens, wall_s=seconds, first_step=None,
                                              accepted_per_position=[], drafted_per_position=[])

    @property
    def decoding(self) -> Stats:
        """The steps after the first: every counter less what the first step had counted."""
        first = self.first_step or Stats()
        counted = ("new_tokens", "target_passes", "draft_passes", "drafts", "drafted", "accepted", "rejected",
                   "wall_s", "target_s", "draft_s")
        return dataclasses.replace(self, first_step=None, accepted_per_position=[], drafted_per_position=[],
                                   **{name: getattr(self, name) - getattr(first, name) for name in counted})

    @property
    def alpha(self) -> float:
        judged = self.accepted + self.rejected
        return self.accepted / judged if judged else float("nan")

    @property
    def acceptance_per_position(self) -> list[float]:
        return [a / d if d else float("nan") for a, d in zip(self.accepted_per_position, self.drafted_per_position)]

    @property
    def mean_acceptance_length(self) -> float:
        return 1 + self.accepted / self.drafts if self.drafts else float("nan")

    @property
    def tokens_per_target_pass(self) -> float:
        return self.new_tokens / self.target_passes if self.target_passes else float("nan")

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s else float("nan")

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items()}
        out["first_step"] = self.first_step.as_dict() if self.first_step is not None else None
        for name in ("alpha", "acceptance_per_position", "mean_acceptance_length", "tokens_per_target_pass",
                     "tokens_per_s"):
            out[name] = getattr(self, name)
        return out
