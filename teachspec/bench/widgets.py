"""`teachspec bench widgets`: what watching costs, an engine's tokens per second with live views attached.

A live view must not slow what it shows. Its subscriber only appends each event to a buffer; a timer thread
turns the buffer into frames and sends them at most 20 times a second (live.py). This measures the claim: the
same seeded generation, alternately bare and followed by a SpeculationView and a RadixTreeView, best of
`repeats` runs each (the best run is the least disturbed by whatever else the machine is doing).

    cost = live_overhead(pair, "def main():", max_new_tokens=64)
    print(cost)        # bare ... tok/s, live ... tok/s: watching costs ...%

The goal is a cost of at most 10%.
"""

from __future__ import annotations

from dataclasses import dataclass

from teachspec.engine import Engine
from teachspec.events import EventLog
from teachspec.models.pair import Pair
from teachspec.widgets.radix import RadixTreeView
from teachspec.widgets.speculation import SpeculationView


@dataclass(slots=True)
class Overhead:
    bare: float          # tokens per second with nobody watching
    live: float          # tokens per second with both views following the log

    @property
    def cost(self) -> float:
        """The share of throughput the views take: 0.05 means 5% fewer tokens per second."""
        return 1 - self.live / self.bare

    def __str__(self) -> str:
        return f"bare {self.bare:.0f} tok/s, live {self.live:.0f} tok/s: watching costs {100 * self.cost:.1f}%"


def live_overhead(pair: Pair, prompt: str | list[int], max_new_tokens: int = 64, repeats: int = 5,
                  **generate: object) -> Overhead:
    """Best-of-`repeats` tokens/s of `Engine(pair, record_top=5).generate(prompt, ...)`, bare and watched."""
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    generate = {"temperature": 1.0, "seed": 0, **generate}
    best = {"bare": 0.0, "live": 0.0}
    for _ in range(repeats):
        for mode in best:  # alternate, so a slow patch of the machine hurts both alike
            log = EventLog()
            views = [SpeculationView.live(log, decode=pair), RadixTreeView.live(log)] if mode == "live" else []
            out = Engine(pair, events=log, record_top=5).generate(prompt, max_new_tokens, **generate)
            for view in views:
                view.detach()
            best[mode] = max(best[mode], out.stats.tokens_per_s)
    return Overhead(best["bare"], best["live"])
