"""Was the machine busy while we measured? A timing taken while other programs held the CPUs is not a lesson.

On a shared machine a measurement can come out upside down: under one busy neighbour, `teachspec demo` once reported
a 0.98x speedup against a 1.53x prediction, and "a pass over k positions costs about one" printed 0.34x. So every
timing the package prints is taken inside a `Watch`, which looks at the machine while it measures:

    waited   the time this process's threads were ready to run but had no CPU (Linux: the run-queue delay in
             /proc/self/task/*/schedstat), as a share of the wall time. A quiet machine keeps it near 0.
    load     where the OS does not report that delay: the 1-minute load average over the CPUs this process may
             use (`threads.usable_cpus`); more runnable threads than CPUs means somebody waited.
    spread   given the times of repeats of one measurement: the slowest over the fastest. Repeats of the same
             work should agree; when they do not, the machine moved under them.

    with Watch() as watch:
        ...                                   # time something
    watch.check.repeats(times)                # optional: the repeats' times
    if watch.check.busy:
        print(watch.check)                    # this machine was busy: these times are not reliable; rerun (...)

or, around a longer stretch, `watch = Watch()` ... `check = watch.stop()`.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from teachspec.threads import run_queue_ns, usable_cpus

MESSAGE = "this machine was busy: these times are not reliable; rerun"
WAITED = 0.10  # busy when the threads waited for a CPU longer than a tenth of the wall time, in total
SPREAD = 1.5  # busy when the slowest repeat took half as long again as the fastest
LOAD = 0.5  # busy when the load average exceeds the usable CPUs by more than this (runnable threads)


@dataclass(slots=True)
class Check:
    """What the machine did while something was measured; `busy` says whether its times can be trusted."""

    seconds: float  # wall time watched
    cpus: int  # the CPUs this process may use
    waited: float | None = None  # run-queue delay / wall time (None: not reported by this OS)
    load: float | None = None  # 1-minute load average at the end (used only where `waited` is None)
    spread: float | None = None  # slowest / fastest repeat (None: no repeats given)

    def repeats(self, seconds: list[float]) -> Check:
        """Note the times of repeats of one measurement (two or more), for their spread; returns self."""
        times = [s for s in seconds if s > 0]
        if len(times) >= 2:
            self.spread = max(self.spread or 1.0, max(times) / min(times))
        return self

    @property
    def reasons(self) -> list[str]:
        why = []
        if self.waited is not None and self.waited > WAITED:
            why.append(f"its threads waited for a CPU {self.waited:.0%} of the time")
        if self.waited is None and self.load is not None and self.load > self.cpus + LOAD:
            why.append(f"load average {self.load:.1f} on {self.cpus} usable CPUs")
        if self.spread is not None and self.spread > SPREAD:
            why.append(f"repeats differed by {self.spread:.1f}x")
        return why

    @property
    def busy(self) -> bool:
        return bool(self.reasons)

    def as_dict(self) -> dict:
        return {**asdict(self), "busy": self.busy, "reasons": self.reasons}

    def __str__(self) -> str:
        if not self.busy:
            return f"the machine was quiet while measuring ({self.cpus} usable CPUs)"
        return f"{MESSAGE} ({'; '.join(self.reasons)})"


class Watch:
    """Watches the machine from when it is made until `stop()`, which returns the Check. As a context manager,
    `with Watch() as watch:` stops at the end of the block and leaves the Check in `watch.check`."""

    def __init__(self):
        self.check: Check | None = None
        self._start, self._waited = time.perf_counter(), run_queue_ns()

    def stop(self) -> Check:
        seconds = time.perf_counter() - self._start
        waited_ns = run_queue_ns()
        waited = None
        if waited_ns is not None and self._waited is not None and seconds > 0:
            waited = max(0, waited_ns - self._waited) / 1e9 / seconds
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        self.check = Check(seconds, usable_cpus(), waited, load)
        return self.check

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def warning(machine: dict | None) -> str:
    """The line a report prints under its figures: the warning when a Check's `as_dict()` says busy, else ""."""
    if not machine or not machine.get("busy"):
        return ""
    return f"{MESSAGE} ({'; '.join(machine['reasons'])})"
