"""`teachspec bench widgets`: what watching costs, an engine's tokens per second with live views attached.

A live view must not slow what it shows. Its subscriber only appends each event to a buffer; a timer thread
turns the buffer into frames and sends the new ones at most 20 times a second (live.py, base.py). This measures
the claim: the same seeded generation, alternately bare and followed by a SpeculationView and a RadixTreeView,
the median of `repeats` runs each (a median, not the best run: one run that the machine happened to favour
would otherwise set the bar for a whole column).

Three numbers, because a shared machine is noisy:
    wall   tokens per second as the student sees them; other programs' load moves it by a few percent
    cpu    tokens per CPU second of this process, the views' thread and its final flush included: what the views
           add, with the time other programs take away left out
    work   the CPU time the views' timer thread spent following (`view.work_s`), as a share of a bare run's
           time: the views' own cost, counted where it is spent, the least noisy of the three

    cost = live_overhead(pair, "def main():", max_new_tokens=64)
    print(cost)        # bare ... tok/s, live ... tok/s: watching costs ...% (...% of CPU time)

The goal is a cost of at most 10%. The runs are watched (`teachspec.busy`): when other programs kept the CPUs
busy, or the bare runs disagreed among themselves, the line says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from statistics import median

from teachspec.busy import Check, Watch
from teachspec.engine import Engine
from teachspec.events import EventLog
from teachspec.models.pair import Pair
from teachspec.widgets.radix import RadixTreeView
from teachspec.widgets.speculation import SpeculationView


@dataclass(slots=True)
class Overhead:
    bare: float          # tokens per second with nobody watching
    live: float          # tokens per second with both views following the log
    bare_cpu: float      # tokens per CPU second, nobody watching
    live_cpu: float      # tokens per CPU second, watched, the views' own work included
    work: float          # the views' timer-thread CPU time over a bare run's wall time
    check: Check | None = None  # what the machine did meanwhile

    @property
    def cost(self) -> float:
        """The share of throughput the views take: 0.05 means 5% fewer tokens per second."""
        return 1 - self.live / self.bare

    @property
    def cpu_cost(self) -> float:
        """The share of the process's CPU time the views add, per token."""
        return 1 - self.live_cpu / self.bare_cpu

    def __str__(self) -> str:
        busy = f"; {self.check}" if self.check is not None and self.check.busy else ""
        return (f"bare {self.bare:.0f} tok/s, live {self.live:.0f} tok/s: watching costs {100 * self.cost:.1f}% "
                f"({100 * self.cpu_cost:.1f}% of CPU time; the views' own work {100 * self.work:.1f}%){busy}")


def live_overhead(pair: Pair, prompt: str | list[int], max_new_tokens: int = 64, repeats: int = 5,
                  **generate: object) -> Overhead:
    """Median-of-`repeats` tokens/s of `Engine(pair, record_top=5).generate(prompt, ...)`, bare and watched."""
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    generate = {"temperature": 1.0, "seed": 0, **generate}
    wall, cpu, work = {"bare": [], "live": []}, {"bare": [], "live": []}, []
    watch = Watch()
    for _ in range(repeats):
        for mode in wall:  # alternate, so a slow patch of the machine hurts both alike
            log = EventLog()
            views = [SpeculationView.live(log, decode=pair), RadixTreeView.live(log)] if mode == "live" else []
            start = time.process_time()  # every thread of this process: the views' worker too
            out = Engine(pair, events=log, record_top=5).generate(prompt, max_new_tokens, **generate)
            for view in views:
                view.detach()
            spent = time.process_time() - start
            wall[mode].append(out.stats.tokens_per_s)
            cpu[mode].append(out.stats.new_tokens / spent)
            if views:
                work.append(sum(view.work_s for view in views) / out.stats.new_tokens)  # seconds per token
    check = watch.stop().repeats([1 / tps for tps in wall["bare"]])  # the same bare run, repeated
    bare = median(wall["bare"])
    return Overhead(bare, median(wall["live"]), median(cpu["bare"]), median(cpu["live"]), median(work) * bare, check)
