"""What one generation measured: the numbers the papers and serving engines report.

For speculative decoding (Leviathan et al. 2023; vLLM's metrics):
- alpha, the acceptance rate: accepted / judged guesses, where a guess is judged if every guess before it was
  accepted (guesses after a rejection are thrown away unseen). That is the per-token acceptance probability the
  speedup formula assumes; accepted / drafted would count the unseen guesses as failures and understate it;
- mean acceptance length: 1 + accepted / drafts, the tokens a target pass yields counting the bonus (vLLM);
- tokens per target pass: all emitted tokens / target forward passes, the quantity the speedup formula predicts.
Plain decoding is the k = 0 case: one token per target pass, nothing drafted.
"""

from __future__ import annotations

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
        for name in ("alpha", "acceptance_per_position", "mean_acceptance_length", "tokens_per_target_pass",
                     "tokens_per_s"):
            out[name] = getattr(self, name)
        return out
