"""Draft-length policies: how many tokens to guess at the next step.

Guessing more tokens pays only while they are likely to be accepted and cheap to draft. Four policies:

- `Constant(k)`: the papers' setting.
- `Heuristic(k)`: transformers' old default schedule: k + 2 after a step where every guess was accepted,
  max(1, k - 1) after one with a rejection.
- `Confidence(k_max, threshold)`: draft up to k_max but stop after a guess the draft itself gives q < threshold
  (transformers' assistant_confidence_threshold).
- `Adaptive(k_max)`: estimate alpha and the costs online and pick the k with the best expected tokens per second,
  Leviathan et al. (2023) Theorem 3.8 generalised to a target pass whose cost grows with the tokens it verifies:

      speedup(k) = E(alpha, k) * t_verify(0) / (k * t_draft + t_verify(k)),   E(alpha, k) = (1 - alpha^(k+1))/(1 - alpha)

  With t_verify constant this is exactly the paper's (1 - alpha^(k+1)) / ((1 - alpha)(k c + 1)), c = t_draft /
  t_verify. k = 0 (plain decoding) is a candidate, so when guessing does not pay the policy stops guessing, and
  probes k = 1 now and then to notice if that changes.

Every policy answers `next_k()` before a step and hears `update(...)` after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from teachspec.checks import check_int
from teachspec.theory import expected_tokens


class Constant:
    stop_below = None

    def __init__(self, k: int = 2):
        self.k = check_int("k", k, 0)

    def next_k(self) -> int:
        return self.k

    def update(self, k: int, accepted: int, draft_s: float, target_s: float) -> None:
        pass

    def __repr__(self) -> str:
        return f"Constant(k={self.k})"


class Heuristic(Constant):
    def __init__(self, k: int = 4, k_max: int = 16):
        super().__init__(k)
        self.k_max = check_int("k_max", k_max, 1)

    def update(self, k: int, accepted: int, draft_s: float, target_s: float) -> None:
        if k == 0:
            return
        self.k = min(self.k_max, self.k + 2) if accepted == k else max(1, self.k - 1)

    def __repr__(self) -> str:
        return f"Heuristic(k={self.k})"


class Confidence(Constant):
    def __init__(self, k_max: int = 8, threshold: float = 0.4):
        super().__init__(k_max)
        if not 0 <= threshold <= 1:
            raise ValueError(f"threshold must be in [0, 1], got {threshold!r}")
        self.stop_below = threshold

    def __repr__(self) -> str:
        return f"Confidence(k_max={self.k}, threshold={self.stop_below})"


@dataclass
class Adaptive:
    """Pick k by the cost model above, from exponentially weighted estimates (weight `decay` per step)."""

    k_max: int = 8
    decay: float = 0.98
    probe_every: int = 16  # when k = 0 wins, try k = 1 this often so alpha keeps being measured
    warmup: tuple[int, ...] = (1, 2, 3, 1, 2, 3)  # first steps: a few k's to fit how verify cost grows with k
    stop_below = None
    # running sums, decayed each step: accepted and judged guesses, draft seconds and passes, verify time per k
    accepted: float = 0.0
    judged: float = 0.0
    draft_s: float = 0.0
    draft_passes: float = 0.0
    verify: dict[int, list[float]] = field(default_factory=dict)  # k -> [decayed seconds, decayed count]
    steps: int = 0
    last_k: int = 0

    def __post_init__(self):
        check_int("k_max", self.k_max, 1)
        if not 0 < self.decay < 1:
            raise ValueError(f"decay must be in (0, 1), got {self.decay!r}")

    @property
    def alpha(self) -> float:
        # every judged guess is a Bernoulli(alpha) trial: accepted ones, plus the first rejection of each step
        return self.accepted / self.judged if self.judged else 0.5

    def t_verify(self, k: int) -> float:
        """Seconds of a target pass over k + 1 positions: a least-squares line through the measured k's."""
        pts = [(kk, s / n, n) for kk, (s, n) in self.verify.items() if n > 0]
        if not pts:
            return 1.0
        w = sum(n for _, _, n in pts)
        mk = sum(kk * n for kk, _, n in pts) / w
        mt = sum(t * n for _, t, n in pts) / w
        var = sum(n * (kk - mk) ** 2 for kk, _, n in pts)
        slope = max(0.0, sum(n * (kk - mk) * (t - mt) for kk, t, n in pts) / var) if var > 0 else 0.0
        return max(1e-9, mt + slope * (k - mk))

    def predicted_speedup(self, k: int) -> float:
        t_draft = self.draft_s / self.draft_passes if self.draft_passes else 0.0
        return expected_tokens(min(self.alpha, 1.0), k) * self.t_verify(0) / (k * t_draft + self.t_verify(k))

    def next_k(self) -> int:
        if self.steps < len(self.warmup):
            k = min(self.warmup[self.steps], self.k_max)
        else:
            k = max(range(self.k_max + 1), key=self.predicted_speedup)
            if k == 0 and self.steps % self.probe_every == 0:
                k = 1
        self.last_k = k
        return k

    def update(self, k: int, accepted: int, draft_s: float, target_s: float) -> None:
        d = self.decay
        self.steps += 1
        self.accepted, self.judged = d * self.accepted, d * self.judged
        self.draft_s, self.draft_passes = d * self.draft_s, d * self.draft_passes
        for v in self.verify.values():
            v[0] *= d
            v[1] *= d
        if k > 0:
            self.accepted += accepted
            self.judged += accepted + (1 if accepted < k else 0)
            self.draft_s += draft_s
            self.draft_passes += k
        s, n = self.verify.get(k, [0.0, 0.0])
        self.verify[k] = [s + target_s, n + 1]

    def __repr__(self) -> str:
        return f"Adaptive(k_max={self.k_max}, alpha~{self.alpha:.2f}, k={self.last_k})"


def make_policy(k) -> Constant | Adaptive:
    """`k` as the engine's API takes it: an int (constant), a policy name, or a policy object."""
    if isinstance(k, (Constant, Adaptive)):
        return k
    if isinstance(k, str):
        named = {"adaptive": Adaptive, "heuristic": Heuristic, "confidence": Confidence}
        if k not in named:
            raise ValueError(f"k={k!r} is not a draft-length policy; use an int >= 0 or one of {sorted(named)}")
        return named[k]()
    return Constant(check_int("k", k, 0))
