"""How many CPU threads run the models: decided when a pair loads, then followed as the machine's load changes.

Why it matters. torch starts one intra-op thread per CPU it sees, and it sees the whole machine. A process held to
fewer CPUs (an affinity mask; a container's cgroup quota, as on Binder, JupyterHub and CI runners) or sharing them
with a busy neighbour then runs more threads than it has CPUs. Every forward pass ends at a barrier where each
thread waits for the slowest, and a thread that is not on a CPU is very slow: with one busy process on a 2-CPU
machine a target pass of the bundled pair took 145-272 ms on 2 threads against 12-15 ms on 1.

At load. `load_pair` asks for no more threads than this process may really use (`use_cpu_policy`):

    affinity     the CPUs the scheduler may run this process on (`os.sched_getaffinity`)
    quota        the cgroup's CPU time per period (v2 `cpu.max`, v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`),
                 the smallest on the way up the cgroup tree, rounded down: 1.5 CPUs' worth is 1 thread
    busy         the CPUs, of those it may run on, that other processes keep busy right now (Linux: /proc/stat)

and takes the smallest, at least 1.

While it runs. Neighbours come and go after the models have loaded (a notebook's kernel starts first), so the
engine calls `follow()` before every step, and every half second or more of wall time it judges the window since
the last judgement (`Governor.judge`) on two measurements, both free to read:

    others   CPUs' worth of time other processes used on our CPUs (/proc/stat, less this process's own CPU time)
    waited   the share of the window each of our threads spent ready to run with no CPU to run on (the run-queue
             delay in /proc/self/task/*/schedstat, per thread)

Fewer threads at once when the CPUs left over, usable - others, fall clearly below the threads we run (by 0.6 of
a CPU), or when our threads waited over a fifth of the time: staying costs several times the speed. More threads
only when the CPUs left over exceed the threads we run by 0.6 of a CPU for `calm` windows in a row. The gap
between the two thresholds keeps a neighbour near the line from flipping the count on noise, and each time a rise
is undone within `FLAP_S` seconds, the next rise waits twice as many windows. `history()` lists every change with
its reason, and `describe()` says what runs now and why.

`TEACHSPEC_THREADS=n` or `set_threads(n)` overrides all this (the count then stays put), and so does an
`OMP_NUM_THREADS` set before torch started (torch has already used it).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

THREADS_ENV = "TEACHSPEC_THREADS"  # a whole number: use exactly this many threads
CGROUP_ENV = "TEACHSPEC_CGROUP_ROOT"  # where the cgroup file system is mounted, if not at /sys/fs/cgroup
_chosen: int | None = None  # set by set_threads(n): the user's choice outranks the policy


# -- what this process may use --------------------------------------------------------------------------------------

def affinity_cpus() -> set[int]:
    """The CPUs the scheduler may run this process on (every CPU where the OS cannot say: macOS, Windows)."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def _cgroup_folders(root: Path) -> list[Path]:
    """The root, its v1 cpu controller folders, and under each the path of this process's cgroups and their
    parents: a quota set on any of them holds for this process."""
    paths = ["/"]
    try:  # "0::/user.slice/app.scope" (v2) or "4:cpu,cpuacct:/docker/abc" (v1)
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "" or "cpu" in controllers.split(","):
                paths.append(path)
    except (OSError, ValueError):
        pass  # no cgroups here (macOS, Windows) or none readable: only the root is looked at
    folders = []
    for base in (root, root / "cpu", root / "cpu,cpuacct", root / "cpuacct,cpu"):
        for path in paths:
            parts = Path(path.strip("/")).parts
            folders += [base.joinpath(*parts[:n]) for n in range(len(parts) + 1)]
    return [f for f in dict.fromkeys(folders) if f.is_dir()]


def _quota(folder: Path) -> float | None:
    """One cgroup's CPU quota in CPUs, or None where it sets none."""
    try:
        if (folder / "cpu.max").is_file():  # v2: "max 100000" (no limit) or "150000 100000" (1.5 CPUs)
            quota, period = (folder / "cpu.max").read_text().split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        if (folder / "cpu.cfs_quota_us").is_file():  # v1: -1 is no limit
            quota = int((folder / "cpu.cfs_quota_us").read_text())
            return None if quota < 0 else quota / int((folder / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError, ZeroDivisionError):
        return None  # unreadable or malformed: not a limit we can honour
    return None


def cgroup_cpus(root: str | Path | None = None) -> float | None:
    """This process's cgroup CPU quota in CPUs (the smallest on the way up), or None where there is none.

    `root` is where the cgroup file system is mounted: by default $TEACHSPEC_CGROUP_ROOT, else /sys/fs/cgroup."""
    root = Path(root or os.environ.get(CGROUP_ENV) or "/sys/fs/cgroup")
    quotas = [q for q in map(_quota, _cgroup_folders(root)) if q is not None]
    return min(quotas, default=None)


def usable_cpus(cgroup_root: str | Path | None = None) -> int:
    """How many CPUs this process may run on at once: its affinity, capped by its cgroup quota, at least 1."""
    cpus = len(affinity_cpus())
    quota = cgroup_cpus(cgroup_root)
    if quota is not None:
        cpus = min(cpus, math.floor(quota))
    return max(1, cpus)


# -- what the others use --------------------------------------------------------------------------------------------

def _cpu_times() -> dict[int, tuple[int, int]]:
    """CPU number -> (busy, total) clock ticks since boot, from /proc/stat; empty where there is none."""
    times = {}
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            name, *fields = line.split()
            if name.startswith("cpu") and name[3:].isdigit():
                ticks = [int(f) for f in fields[:8]]  # user nice system idle iowait irq softirq steal
                times[int(name[3:])] = (sum(ticks) - ticks[3] - ticks[4], sum(ticks))
    except (OSError, ValueError):
        return {}
    return times


def _others(before: dict, after: dict, own_s: float, seconds: float, cpus: set[int]) -> float | None:
    """CPUs' worth of time other processes used on `cpus` between two `_cpu_times()` readings `seconds` apart, in
    which this process used `own_s` seconds of CPU; None where the OS does not say."""
    shared = [c for c in cpus if c in before and c in after]
    total = sum(after[c][1] - before[c][1] for c in shared)
    if not shared or total <= 0 or seconds <= 0:
        return None
    busy = sum(after[c][0] - before[c][0] for c in shared) / total * len(shared)  # in CPUs
    return max(0.0, busy - own_s / seconds)


def busy_elsewhere(cpus: set[int] | None = None, seconds: float = 0.1) -> float | None:
    """How many CPUs' worth of time other processes used on `cpus` (default: those this process may run on) over
    the next `seconds`; None where the OS does not say (no /proc/stat)."""
    cpus = affinity_cpus() if cpus is None else cpus
    before, own = _cpu_times(), time.process_time()
    time.sleep(seconds)
    return _others(before, _cpu_times(), time.process_time() - own, seconds, cpus)


def run_queue_ns() -> int | None:
    """Nanoseconds this process's threads have spent runnable but not running, summed; None where unknown."""
    total, found = 0, False
    try:
        threads = os.listdir("/proc/self/task")
    except OSError:
        return None
    for tid in threads:
        try:  # "time on a CPU, time waiting for one, timeslices"
            total += int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[1])
            found = True
        except (OSError, IndexError, ValueError):
            continue  # the thread ended meanwhile, or no schedstat in this kernel
    return total if found else None


def policy_threads(cgroup_root: str | Path | None = None) -> int:
    """The threads the policy picks at load: `usable_cpus()`, less the CPUs that other processes keep busy now."""
    cpus = usable_cpus(cgroup_root)
    if cpus > 1:
        others = busy_elsewhere()
        if others is not None:  # 0.6 of a CPU taken costs a thread; 0.4 does not
            cpus = max(1, min(cpus, math.floor(len(affinity_cpus()) - others + 0.5)))
    return cpus


# -- following the load ----------------------------------------------------------------------------------------------

WINDOW_S = 0.5  # judge at most this often: long enough for /proc/stat's 10 ms ticks to say something
MARGIN = 0.6  # of a CPU: change only when the CPUs left over are this far from the threads we run
WAITED = 0.2  # fewer threads when each waited for a CPU over this share of the window
CALM = 2  # windows in a row that must ask for more threads before we take them
FLAP_S = 30.0  # a rise undone within this many seconds doubles the calm the next rise needs
MOST_CALM = 32


@dataclass(slots=True)
class Window:
    """What the machine did over one stretch of wall time."""

    seconds: float
    others: float | None  # CPUs' worth of time other processes used (None: the OS does not say)
    waited: float | None  # share of the window each of our threads waited for a CPU (None: not reported)


@dataclass(slots=True)
class Change:
    """One change of the thread count, and why."""

    at: float  # time.time()
    before: int
    after: int
    why: str


@dataclass
class Governor:
    """The thread count, judged window by window (module docstring). `judge` is pure: it reads no clock and no
    file, so its rule can be tested on any sequence of windows."""

    usable: int  # CPUs this process may use
    threads: int  # threads we run now
    calm: int = CALM  # windows in a row a rise needs now
    asking: int = 0  # windows in a row that asked for more
    rose_at: float | None = None  # when the last rise happened
    history: list[Change] = field(default_factory=list)
    last: Window | None = None  # the window judged last

    def judge(self, w: Window, now: float) -> int:
        """The thread count after window `w`, ending at `now` (seconds on any clock)."""
        self.last = w
        t, left = self.threads, None if w.others is None else self.usable - w.others
        if t > 1 and left is not None and left < t - MARGIN:
            why = f"other processes used {w.others:.2f} of {self.usable} CPUs, leaving {left:.2f}"
            return self._change(t, max(1, min(t - 1, math.floor(left + 0.5))), why, now)
        if t > 1 and w.waited is not None and w.waited > WAITED:
            why = f"each thread waited for a CPU {w.waited:.0%} of the time"
            return self._change(t, t - 1, why, now)
        if t < self.usable and left is not None and left > t + MARGIN:
            self.asking += 1
            if self.asking >= self.calm:
                why = (f"other processes used {w.others:.2f} of {self.usable} CPUs, leaving {left:.2f}, "
                       f"for {self.asking} windows in a row")
                return self._change(t, min(self.usable, math.floor(left + 1 - MARGIN)), why, now)
        else:
            self.asking = 0
        return t

    def _change(self, before: int, after: int, why: str, now: float) -> int:
        if after < before and self.rose_at is not None and now - self.rose_at < FLAP_S:
            self.calm = min(2 * self.calm, MOST_CALM)  # that rise did not hold: the next one waits longer
        elif after > before:
            if self.rose_at is not None and now - self.rose_at > 4 * FLAP_S:
                self.calm = CALM  # quiet for long: forgive the old flaps
            self.rose_at = now
        self.threads, self.asking = after, 0
        self.history.append(Change(time.time(), before, after, why))
        return after


class _Follower:
    """The process's one governor, and the readings that start its current window (torch's threads are one
    setting for the whole process, so one governor serves every engine in it)."""

    def __init__(self):
        self.governor: Governor | None = None  # None: the count was chosen, or no pair loaded yet
        self._start = 0.0
        self._readings = None

    def restart(self, threads: int | None) -> None:
        """Follow from `threads` on (None: stop following, the count was chosen)."""
        if threads is None:
            self.governor = None
            return
        usable = usable_cpus()
        history = self.governor.history if self.governor else []
        self.governor = Governor(usable, threads, history=history)
        self._start, self._readings = time.perf_counter(), self._read()

    @staticmethod
    def _read():
        return _cpu_times(), time.process_time(), run_queue_ns()

    def __call__(self) -> None:
        if self.governor is None or time.perf_counter() - self._start < WINDOW_S:
            return  # the common case: one clock read
        now, readings = time.perf_counter(), self._read()
        (cpu0, own0, wait0), (cpu1, own1, wait1) = self._readings, readings
        seconds = now - self._start
        waited = None if wait0 is None or wait1 is None else \
            max(0, wait1 - wait0) / 1e9 / seconds / self.governor.threads
        others = _others(cpu0, cpu1, own1 - own0, seconds, affinity_cpus())
        before = self.governor.threads
        after = self.governor.judge(Window(seconds, others, waited), now)
        if after != before:
            torch.set_num_threads(after)
        self._start, self._readings = now, readings


follow = _Follower()  # the engine calls follow() before every step


def history() -> list[Change]:
    """Every change the governor made in this process, oldest first."""
    return list(follow.governor.history) if follow.governor else []


def describe() -> str:
    """What runs now and why, in a sentence or three: for a curious student."""
    threads = torch.get_num_threads()
    g = follow.governor
    if g is None:
        why = ("set_threads(n)" if _chosen is not None else f"${THREADS_ENV}" if os.environ.get(THREADS_ENV)
               else "$OMP_NUM_THREADS" if os.environ.get("OMP_NUM_THREADS", "").strip() else "no pair loaded yet")
        return f"{threads} CPU threads, fixed by {why}: the count does not follow the machine's load."
    lines = [f"{threads} CPU threads of {g.usable} usable CPUs, following the machine's load."]
    if g.last is not None:
        seen = [f"{name} {value}" for name, value in
                (("other processes used", None if g.last.others is None else f"{g.last.others:.2f} CPUs"),
                 ("each thread waited for a CPU", None if g.last.waited is None else f"{g.last.waited:.0%} of it"))
                if value is not None]
        lines.append(f"Over the last {g.last.seconds:.1f} s: {'; '.join(seen) or 'the OS reports nothing'}.")
    for c in g.history[-3:]:
        lines.append(f"{time.strftime('%H:%M:%S', time.localtime(c.at))}: {c.before} -> {c.after} threads: {c.why}.")
    return "\n".join(lines)


# -- who decides -----------------------------------------------------------------------------------------------------

def _env_threads() -> int | None:
    value = os.environ.get(THREADS_ENV)
    if value is None or value.strip() == "":
        return None
    if not value.strip().isdigit() or int(value) < 1:
        raise ValueError(f"{THREADS_ENV}={value!r}: give a whole number of threads >= 1, or unset it to let "
                         f"teachspec choose from the CPUs this process may use")
    return int(value)


def set_threads(n: int | None) -> int:
    """Use `n` CPU threads for torch from now on, whatever the policy would pick; `None` returns to the policy.

    Returns the number of threads torch now uses."""
    global _chosen
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"n must be a whole number of threads >= 1, or None for the policy; got {n!r}")
    _chosen = n
    if n is None:
        return use_cpu_policy()
    follow.restart(None)
    torch.set_num_threads(n)
    return n


def use_cpu_policy(cgroup_root: str | Path | None = None) -> int:
    """Set torch's thread count by the policy (module docstring) unless someone chose it, and follow the load from
    there; returns the count. Chosen means `set_threads(n)`, then $TEACHSPEC_THREADS, then an $OMP_NUM_THREADS
    that torch read at start."""
    threads = _chosen if _chosen is not None else _env_threads()
    if threads is None and os.environ.get("OMP_NUM_THREADS", "").strip():
        follow.restart(None)
        return torch.get_num_threads()
    following = threads is None
    if following:
        threads = policy_threads(cgroup_root)
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    follow.restart(threads if following else None)
    return threads
