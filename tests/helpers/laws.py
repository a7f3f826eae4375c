"""A real model's exact law of its next tokens, by enumeration, and a chi-square test of sampled outcomes against
it: how the engine's sampled output is held to the target's law (tests/speculative/test_eagle.py and
test_draft_vocab.py)."""

from scipy.stats import chisquare

from teachspec import kv
from teachspec.sampling import SamplingParams, warp

def target_law(pair, prompt: list[int], params: SamplingParams, m: int) -> dict[tuple, float]:
    """The exact law of the target's next m tokens under `params`, by enumeration."""
    law = {(): 1.0}
    for _ in range(m):
        grown = {}
        for seq, pr in law.items():
            p = warp(kv.forward(pair.target, prompt + list(seq), kv.new_cache(pair.target), 1, pair.vocab_size),
                     params)[0].double()
            for x in p.nonzero().flatten().tolist():
                grown[seq + (x,)] = pr * float(p[x])
        law = grown
    total = sum(law.values())
    return {o: v / total for o, v in law.items()}


def follows(law: dict[tuple, float], counts: dict[tuple, int]) -> float:
    """The chi-square p-value of `counts` against `law`, outcomes expected fewer than 5 times pooled."""
    n = sum(counts.values())
    outcomes = sorted(law, key=law.get, reverse=True)
    keep = [o for o in outcomes if n * law[o] >= 5]
    rest = [o for o in outcomes if o not in keep]
    obs = [counts[o] for o in keep] + ([sum(counts[o] for o in rest)] if rest else [])
    exp = [n * law[o] for o in keep] + ([n * sum(law[o] for o in rest)] if rest else [])
    return chisquare(obs, exp).pvalue
