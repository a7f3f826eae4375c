"""`teachspec demo`: watch speculative decoding decide, token by token, in the terminal.

The demo subscribes to the engine's event log (the same events the notebook widgets draw) and prints each
decision as it happens: accepted guesses in green, rejected ones struck through in red, the token resampled from
the residual in yellow, the bonus token in cyan. Then it runs plain decoding on the same prompt and prints both
timings side by side, and says so when the machine was too busy for them to mean anything (`teachspec.busy`).

It reports one yield per pass, `Stats.tokens_per_target_pass`: every token generated / every target pass, the
prefill's first token included (the quantity Eq. 1 predicts, under the same name in the views and the README).
`Stats.mean_acceptance_length`, vLLM's name for the same ratio counted over speculation steps alone, is not
printed beside it: two numbers that sound alike and differ would only confuse.
"""

from __future__ import annotations

import sys

from teachspec import threads
from teachspec.busy import Watch
from teachspec.decode import generate
from teachspec.engine import Engine
from teachspec.events import Accept, Bonus, Reject, Resample
from teachspec.theory import speedup

COLOURS = {Accept: "\033[32m", Reject: "\033[9;31m", Resample: "\033[33m", Bonus: "\033[36m"}
RESET = "\033[0m"


def legend(colour: bool) -> str:
    names = {Accept: "accepted", Reject: "rejected", Resample: "resampled", Bonus: "bonus"}
    return "  ".join(paint(n, cls, colour) for cls, n in names.items())


def paint(text: str, cls, colour: bool) -> str:
    if not colour:
        return {Reject: f"[-{text}-]", Resample: f"[+{text}+]", Bonus: f"{{{text}}}"}.get(cls, text)
    return f"{COLOURS[cls]}{text}{RESET}"


def run(pair, prompt: str, max_new_tokens: int, temperature: float, k, speculate: str, seed: int,
        colour: bool, out=sys.stdout) -> None:
    # The first passes of a model allocate memory and pick kernels for each new shape: warm both paths up, so that
    # neither timing below pays for it.
    Engine(pair, cache_tokens=0).generate(prompt, 8, temperature=temperature, speculate=speculate, k=k, seed=seed)
    generate(prompt, 8, temperature=temperature, seed=seed, pair=pair)
    engine = Engine(pair)

    def show(event):
        if type(event) in COLOURS:
            out.write(paint(pair.decode([event.token]), type(event), colour))
            out.flush()

    print(legend(colour), file=out)
    print(prompt, end="", file=out)
    unsubscribe = engine.events.subscribe(show)
    with Watch() as watch:
        spec = engine.generate(prompt, max_new_tokens, temperature=temperature, speculate=speculate, k=k,
                               seed=seed)
        unsubscribe()
        plain = generate(prompt, max_new_tokens, temperature=temperature, seed=seed, pair=pair)
    s, p = spec.stats, plain.stats
    c = (s.draft_s / s.draft_passes) / (p.target_s / p.target_passes) if s.draft_passes else 0.0
    k_mean = s.drafted / s.drafts if s.drafts else 0
    print("\n", file=out)
    label = f"speculative ({speculate}, k={k}):" if speculate else "the engine, no drafter:"
    print(f"{label} {s.new_tokens} tokens in {s.wall_s:.3f} s, "
          f"{s.tokens_per_s:.0f} tokens/s, {s.target_passes} target passes, {s.tokens_per_target_pass:.2f} "
          f"tokens per target pass", file=out)
    print(f"plain decoding:          {p.new_tokens} tokens in {p.wall_s:.3f} s, {p.tokens_per_s:.0f} tokens/s, "
          f"{p.target_passes} target passes", file=out)
    if temperature == 0:
        print(f"identical to plain greedy decoding: {spec.tokens == plain.tokens}", file=out)
    print(f"alpha {s.alpha:.2f}, c {c:.2f}, "
          f"measured speedup {p.wall_s / s.wall_s * s.new_tokens / max(1, p.new_tokens):.2f}x, "
          f"formula at k={round(k_mean)}: {speedup(min(1.0, s.alpha), round(k_mean), c):.2f}x"
          if s.drafted else "nothing was drafted", file=out)
    if watch.check.busy:
        print(watch.check, file=out)
    if watch.check.busy or threads.history():  # the thread count followed the load: say what it did and why
        print(threads.describe(), file=out)
