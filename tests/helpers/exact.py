"""The acceptance rule's exact law, by enumeration in float64: toy draft and target models (trigram tables that also
depend on the position), every draft a toy drafter can propose with its probability, and every accept/reject branch
of the rule, built from the same `acceptance_probability` and `residual` that `verify_batch` uses. `max_error` is the
largest gap between what repeated speculation steps emit and the target's own law (tests/speculative/
test_verify_exact.py, and test_verify_dtypes.py on low-precision tables); `make_table`'s tables also feed the tree
rule's enumeration (helpers/tree_law.py)."""

import itertools
from collections import defaultdict
from dataclasses import dataclass

import torch

from teachspec.speculative import acceptance_probability, point_mass, residual

torch.set_num_threads(1)

V = 5
PROMPT = (1, 3)
F64 = torch.float64


# -- toy models: trigram tables that also depend on the position -------------------------------------------------

def make_table(seed: int, vocab: int = V, zeros: float = 0.0, one_hot: bool = False, support: range | None = None,
               dtype: torch.dtype = F64, peak: int = 3) -> torch.Tensor:
    """(3, vocab, vocab, vocab) next-token distributions indexed by (len(context) % 3, second-to-last token, last
    token); float16/bfloat16 tables hold multiples of 1/64, exactly representable there."""
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(3, vocab, vocab, vocab, generator=g, dtype=F64) ** peak  # peaked, like a language model
    if support is not None:
        outside = torch.ones(vocab, dtype=torch.bool)
        outside[list(support)] = False
        w[..., outside] = 0.0
    if zeros:
        drop = torch.rand(w.shape, generator=g, dtype=F64) < zeros
        w[drop & (w < w.amax(-1, keepdim=True))] = 0.0  # every row keeps its largest entry
    if one_hot:
        w = torch.nn.functional.one_hot(w.argmax(-1), vocab).to(F64)
    w = w / w.sum(-1, keepdim=True)
    if dtype != F64:  # multiples of 1/64 summing to exactly 1: held exactly by float16 and bfloat16 too
        units = (w * 64).floor()
        units.scatter_add_(-1, w.argmax(-1, keepdim=True), 64 - units.sum(-1, keepdim=True))
        w = units / 64
    return w.to(dtype)


@dataclass
class ToyLM:
    table: torch.Tensor
    certain: bool = False  # a drafter that proposes its argmax and reports no q (q = None, a point mass)

    def __call__(self, context: tuple[int, ...]) -> torch.Tensor:
        return self.table[len(context) % 3, context[-2], context[-1]]  # (V,)


def target_probability(target: ToyLM, context: tuple[int, ...], seq: tuple[int, ...]) -> float:
    prob = 1.0
    for j, y in enumerate(seq):
        prob *= target(context + seq[:j])[y].item()
    return prob


# -- exact enumeration of the rule -----------------------------------------------------------------------------

def drafts_with_weights(drafter: ToyLM, context: tuple, k: int) -> list[tuple[tuple[int, ...], float]]:
    """Every draft of k tokens the drafter can propose, with its probability prod_i q_i(x_i)."""
    drafts = [((), 1.0)]
    for _ in range(k):
        grown = []
        for seq, weight in drafts:
            q = drafter(context + seq)
            if drafter.certain:
                grown.append((seq + (int(q.argmax()),), weight))
            else:
                grown += [(seq + (x,), weight * q[x].item()) for x in range(V) if q[x] > 0]
        drafts = grown
    return drafts


def step_outcomes(target, drafter, context, k, resample=residual) -> dict[tuple[int, ...], float]:
    """Probability of each token sequence one speculation step emits from `context`."""
    drafts = drafts_with_weights(drafter, context, k)
    x = torch.tensor([seq for seq, _ in drafts], dtype=torch.long).reshape(len(drafts), k)  # (D, k)
    p = torch.stack([torch.stack([target(context + seq[:i]) for i in range(k + 1)]) for seq, _ in drafts])
    if drafter.certain:
        q = point_mass(x, V, F64)  # what verify does with q = None
    elif k == 0:
        q = torch.zeros(len(drafts), 0, V, dtype=F64)
    else:
        q = torch.stack([torch.stack([drafter(context + seq[:i]) for i in range(k)]) for seq, _ in drafts])
    accept = acceptance_probability(p[:, :k], q, x).tolist()  # (D, k)
    after_reject = resample(p[:, :k], q).tolist()  # (D, k, V)
    bonus = p[:, k].tolist()  # (D, V)

    out = defaultdict(float)
    for d, (seq, weight) in enumerate(drafts):
        reach = weight  # probability of this draft with its first i tokens accepted
        for i in range(k):
            for y in range(V):
                out[seq[:i] + (y,)] += reach * (1 - accept[d][i]) * after_reject[d][i][y]
            reach *= accept[d][i]
        for y in range(V):
            out[seq + (y,)] += reach * bonus[d][y]
    return out


class Speculation:
    """Distribution of the first m tokens when speculation steps repeat until at least m tokens are out."""

    def __init__(self, target, drafter, k, resample=residual):
        self.target, self.drafter, self.k, self.resample = target, drafter, k, resample
        self.steps, self.joints = {}, {}

    def joint(self, context: tuple, m: int) -> dict[tuple[int, ...], float]:
        if (context, m) not in self.joints:
            if context not in self.steps:
                self.steps[context] = step_outcomes(self.target, self.drafter, context, self.k, self.resample)
            out = defaultdict(float)
            for emitted, prob in self.steps[context].items():
                if len(emitted) >= m:
                    out[emitted[:m]] += prob
                elif prob > 0:
                    for rest, prob_rest in self.joint(context + emitted, m - len(emitted)).items():
                        out[emitted + rest] += prob * prob_rest
            self.joints[(context, m)] = out
        return self.joints[(context, m)]


def max_error(target, drafter, k, resample=residual) -> float:
    spec = Speculation(target, drafter, k, resample)
    worst = 0.0
    for m in range(1, k + 2):
        joint = spec.joint(PROMPT, m)
        for seq in itertools.product(range(V), repeat=m):
            worst = max(worst, abs(joint.get(seq, 0.0) - target_probability(target, PROMPT, seq)))
    return worst
