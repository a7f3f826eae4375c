"""Draft-length policies: how many tokens to guess at the next step.

Guessing more tokens pays only while they are likely to be accepted and cheap to draft. Four policies:

- `Constant(k)`: the papers' setting.
- `Heuristic(k)`: transformers' old default schedule: k + 2 after a step where every guess was accepted,
  max(1, k - 1) after one with a rejection.
- `Confidence(k_max, threshold)`: draft up to k_max but stop after a guess the draft itself gives q < threshold
  (transformers' assistant_confidence_threshold).
- `Adaptive(k_max)`: estimate the acceptance and the costs online and pick the k with the best expected tokens
  per second, Leviathan et al. (2023) Theorem 3.8 generalised in two ways the papers' assumptions do not cover:

      speedup(k) = E(k) * t_verify(0) / (k * t_draft + t_verify(k)),   E(k) = 1 + h_1 + h_1 h_2 + ... + h_1 ... h_k

  * h_i is the chance that guess i is accepted once guesses 1 .. i-1 were, measured position by position. With
    h_i = alpha everywhere E(k) is Eq. (1), (1 - alpha^(k+1)) / (1 - alpha); but acceptances are not always
    independent: a prompt-lookup guess that starts a copied stretch is usually followed by more accepted ones
    (with the bundled pair, h_1 ~ 0.4 and h_2..8 ~ 0.5-0.9), and one constant alpha would undervalue long drafts.
  * t_verify(k), the target pass over k + 1 positions, is measured rather than assumed constant. One position is
    a matrix-vector product and two or more a matrix-matrix product, which a CPU times quite differently, so
    t_verify(0) is its own estimate and k >= 1 follow a least-squares line through the measured k's.

  With t_verify constant and h_i = alpha this is exactly the paper's (1 - alpha^(k+1)) / ((1 - alpha)(k c + 1)),
  c = t_draft / t_verify. k = 0 (plain decoding) is a candidate, so when guessing does not pay the policy stops
  guessing; every `probe_every` steps it tries a k next to the best, to notice when that changes.

A cold `Adaptive` policy knows nothing, so it starts from a good fixed choice, `start` (per drafter: its `start_k`
in the drafter registry, teachspec/speculate.py, the best constant k of the bench runs), and its warm-up stays next
to it (start, its neighbours, start again): a cold engine is never much worse than that constant k while it learns.
The engine keeps one policy per drafter and sampling setting for all its requests (`Engine.adaptive`), so what one
request measured, the next starts from. The drafter's first proposal of a request also reads the prompt (a draft
model's prefill, the EAGLE head's first entries), so the engine reports no drafting time for it (`draft_s=None`):
timed, it would make drafting look dear at the start of every request, and the policy would spend the request
unlearning it.

Every policy answers `next_k()` before a step and hears `update(...)` after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from teachspec.validate import check_int


class Constant:
    stop_below = None

    def __init__(self, k: int = 2):
        self.k = check_int("k", k, 0)

    def next_k(self) -> int:
        return self.k

    def update(self, k: int, accepted: int, draft_s: float | None, target_s: float | None) -> None:
        pass

    def __repr__(self) -> str:
        return f"Constant(k={self.k})"


class Heuristic(Constant):
    def __init__(self, k: int = 4, k_max: int = 16):
        super().__init__(k)
        self.k_max = check_int("k_max", k_max, 1)

    def update(self, k: int, accepted: int, draft_s: float | None, target_s: float | None) -> None:
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
    probe_every: int = 16  # try a k next to the best this often, so the estimates around it stay fresh
    start: int = 3  # a good constant k to start from, cold (the drafter's `start_k`)
    # first steps: start (the first also reads the prompt, so its pass is not timed), then its neighbours, so that
    # a line through the pass times has a slope; None: (start, start, start - 1, start, start + 1, start)
    warmup: tuple[int, ...] | None = None
    stop_below = None
    # running sums, decayed each step (acceptance: each step that guessed): guesses judged and accepted at each
    # draft position, draft seconds and passes, verify time per k
    judged_at: list[float] = field(default_factory=list)
    accepted_at: list[float] = field(default_factory=list)
    draft_s: float = 0.0
    draft_passes: float = 0.0
    verify: dict[int, list[float]] = field(default_factory=dict)  # k -> [decayed seconds, decayed count]
    steps: int = 0
    last_k: int = 0

    def __post_init__(self):
        check_int("k_max", self.k_max, 1)
        check_int("start", self.start, 0)
        if not 0 < self.decay < 1:
            raise ValueError(f"decay must be in (0, 1), got {self.decay!r}")
        if self.warmup is None:
            s = min(self.start, self.k_max)
            self.warmup = (s, s, max(0, s - 1), s, min(self.k_max, s + 1), s)

    @classmethod
    def cold(cls, start_k: int, **kwargs) -> Adaptive:
        """A new policy starting from a drafter's good constant k (its `start_k` in the registry)."""
        return cls(start=start_k, **kwargs)

    @property
    def alpha(self) -> float:
        """Accepted / judged guesses over all positions: every judged guess is a Bernoulli(alpha) trial."""
        judged = sum(self.judged_at)
        return sum(self.accepted_at) / judged if judged else 0.5

    def acceptance(self) -> list[float]:
        """h_1 .. h_k_max. Each position's rate is shrunk towards the one before it by one pseudo-guess, so a
        position rarely reached borrows its neighbour's rate instead of swinging on two or three guesses."""
        h, prior = [], 0.5
        for i in range(self.k_max):
            judged = self.judged_at[i] if i < len(self.judged_at) else 0.0
            accepted = self.accepted_at[i] if i < len(self.accepted_at) else 0.0
            prior = (accepted + prior) / (judged + 1)
            h.append(prior)
        return h

    def expected_tokens(self, k: int) -> float:
        """E(k) = 1 + h_1 + h_1 h_2 + ... + h_1 ... h_k: guess i + 1 counts only if guesses 1 .. i were accepted."""
        total, run = 1.0, 1.0
        for h in self.acceptance()[:k]:
            run *= h
            total += run
        return total

    def t_verify(self, k: int) -> float:
        """Seconds of a target pass over k + 1 positions: measured for k = 0, a least-squares line through the
        measured k >= 1 otherwise."""
        if k == 0 and self.verify.get(0, [0.0, 0.0])[1] > 0:
            s, n = self.verify[0]
            return s / n
        pts = [(kk, s / n, n) for kk, (s, n) in self.verify.items() if n > 0 and kk > 0]
        if not pts:
            return 1.0
        w = sum(n for _, _, n in pts)
        mk = sum(kk * n for kk, _, n in pts) / w
        mt = sum(t * n for _, t, n in pts) / w
        var = sum(n * (kk - mk) ** 2 for kk, _, n in pts)
        slope = max(0.0, sum(n * (kk - mk) * (t - mt) for kk, t, n in pts) / var) if var > 0 else 0.0
        return max(1e-9, mt + slope * (k - mk))

    def predicted_speedup(self, k: int) -> float:
        return self.predicted_speedups()[k]

    def predicted_speedups(self) -> list[float]:
        """predicted_speedup(k) for k = 0 .. k_max, every estimate read once (a step's choice: tens of us)."""
        t_draft = self.draft_s / self.draft_passes if self.draft_passes else 0.0
        t_verify = [self.t_verify(k) for k in range(self.k_max + 1)]
        out, total, run = [], 1.0, 1.0
        for k, h in enumerate([None] + self.acceptance()):
            if k:
                run *= h
                total += run  # E(k)
            out.append(total * t_verify[0] / (k * t_draft + t_verify[k]))
        return out

    def next_k(self) -> int:
        if self.steps < len(self.warmup):
            k = min(self.warmup[self.steps], self.k_max)
        else:
            speedups = self.predicted_speedups()
            k = max(range(self.k_max + 1), key=speedups.__getitem__)
            if self.steps % self.probe_every == 0:
                # now and then try a neighbour, above and below in turn: the estimates of a k no longer chosen
                # would go stale, and one unlucky timing could hold the policy at the wrong k for good
                k = min(self.k_max, k + 1) if self.steps // self.probe_every % 2 else max(0, k - 1)
        self.last_k = k
        return k

    def update(self, k: int, accepted: int, draft_s: float | None, target_s: float | None) -> None:
        """One step: k guesses, `accepted` of them accepted, drafted in `draft_s` seconds (None: the drafting also
        read the prompt, so it says nothing about a guess's cost), verified in `target_s` (None: the pass also read
        the prompt)."""
        d = self.decay
        self.steps += 1
        self.draft_s, self.draft_passes = d * self.draft_s, d * self.draft_passes
        for v in self.verify.values():
            v[0] *= d
            v[1] *= d
        if k > 0:
            # acceptance is forgotten only as guesses are judged: a plain step says nothing about it, and forgetting
            # it there would pull a policy that stopped guessing back towards the prior, and to guessing again
            self.judged_at = [d * x for x in self.judged_at]
            self.accepted_at = [d * x for x in self.accepted_at]
            # guesses 1 .. accepted were accepted; the next one, if there was one, was judged and rejected
            judged = min(k, accepted + 1)
            while len(self.judged_at) < judged:
                self.judged_at.append(0.0)
                self.accepted_at.append(0.0)
            for i in range(judged):
                self.judged_at[i] += 1
                self.accepted_at[i] += i < accepted
            if draft_s is not None:
                self.draft_s += draft_s
                self.draft_passes += k
        if target_s is not None:  # None: the pass also read a prompt, so it says nothing about verifying k guesses
            s, n = self.verify.get(k, [0.0, 0.0])
            self.verify[k] = [s + target_s, n + 1]

    def __repr__(self) -> str:
        return f"Adaptive(k_max={self.k_max}, alpha~{self.alpha:.2f}, k={self.last_k})"


Policy = Constant | Adaptive  # what a step asks how many tokens to guess: next_k(), stop_below, update(...)


def make_policy(k) -> Policy:
    """`k` as the engine's API takes it: an int (constant), a policy name, or a policy object."""
    if isinstance(k, (Constant, Adaptive)):
        return k
    if isinstance(k, str):
        named = {"adaptive": Adaptive, "heuristic": Heuristic, "confidence": Confidence}
        if k not in named:
            raise ValueError(f"k={k!r} is not a draft-length policy; use an int >= 0 or one of {sorted(named)}")
        return named[k]()
    return Constant(check_int("k", k, 0))
