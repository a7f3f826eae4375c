"""Where the models run: a checked device, a sensible default dtype for it, and how many CPU threads to use.

The thread policy. torch starts one intra-op thread per CPU it sees, and it sees the whole machine. A process
held to fewer CPUs (an affinity mask; a container's cgroup quota, as on Binder, JupyterHub and CI runners) or
sharing them with a busy neighbour then runs more threads than it has CPUs. Every forward pass ends at a barrier
where each thread waits for the slowest, and a thread that is not on a CPU is very slow: with one busy process on
a 2-CPU machine a target pass of the bundled pair took 145-272 ms on 2 threads against 12-15 ms on 1. So
`load_pair` asks for no more threads than this process may really use (`use_cpu_policy`):

    affinity     the CPUs the scheduler may run this process on (`os.sched_getaffinity`)
    quota        the cgroup's CPU time per period (v2 `cpu.max`, v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`),
                 the smallest on the way up the cgroup tree, rounded down: 1.5 CPUs' worth is 1 thread
    busy         the CPUs, of those it may run on, that other processes keep busy right now (Linux: /proc/stat)

and takes the smallest, at least 1. `TEACHSPEC_THREADS=n` or `set_threads(n)` overrides it, and so does an
`OMP_NUM_THREADS` set before torch started (torch has already used it).
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import torch

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
          "bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float64": torch.float64}


def resolve_device(device: str | torch.device | None) -> torch.device:
    """A torch.device that exists on this machine, or a ValueError that says which ones do."""
    if device is None:
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device={device!r} is not a device name; use 'cpu', 'cuda', 'cuda:N' or 'mps'") from e
    available = ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if torch.backends.mps.is_available():
        available.append("mps")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device={device!r}: CUDA is not available on this machine; devices here: {available}")
        if (dev.index or 0) >= torch.cuda.device_count():
            raise ValueError(f"device={device!r}: there are {torch.cuda.device_count()} CUDA devices; "
                             f"devices here: {available}")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device={device!r}: MPS is not available on this machine; devices here: {available}")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device={device!r} is not supported; devices here: {available}")
    return dev


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """float32 on CPU (bfloat16 is slower there), bfloat16 on accelerators, unless asked otherwise."""
    if dtype is None:
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ValueError(f"dtype={dtype} is not supported; use one of {sorted(set(DTYPES))}")
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported; use one of {sorted(DTYPES)}")
    return DTYPES[dtype]


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on `device` to finish, so that a clock read next times it.

    A GPU runs kernels asynchronously: a forward pass returns as soon as its kernels are queued, and without this a
    timer would charge the pass's time to whatever next reads a result back. The CPU computes as it goes."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


# -- CPU threads ---------------------------------------------------------------------------------------------------

THREADS_ENV = "TEACHSPEC_THREADS"  # a whole number: use exactly this many threads
CGROUP_ENV = "TEACHSPEC_CGROUP_ROOT"  # where the cgroup file system is mounted, if not at /sys/fs/cgroup
_chosen: int | None = None  # set by set_threads(n): the user's choice outranks the policy


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


def busy_elsewhere(cpus: set[int] | None = None, seconds: float = 0.1) -> float | None:
    """How many CPUs' worth of time other processes used on `cpus` (default: those this process may run on) over
    the next `seconds`; None where the OS does not say (no /proc/stat)."""
    cpus = affinity_cpus() if cpus is None else cpus
    before, own = _cpu_times(), time.process_time()
    time.sleep(seconds)
    after, own = _cpu_times(), time.process_time() - own
    shared = [c for c in cpus if c in before and c in after]
    total = sum(after[c][1] - before[c][1] for c in shared)
    if not shared or total <= 0:
        return None
    busy = sum(after[c][0] - before[c][0] for c in shared) / total * len(shared)  # in CPUs
    return max(0.0, busy - own / seconds)


def policy_threads(cgroup_root: str | Path | None = None) -> int:
    """The threads the policy picks: `usable_cpus()`, less the CPUs that other processes keep busy now."""
    cpus = usable_cpus(cgroup_root)
    if cpus > 1:
        others = busy_elsewhere()
        if others is not None:  # 0.6 of a CPU taken costs a thread; 0.4 does not
            cpus = max(1, min(cpus, math.floor(len(affinity_cpus()) - others + 0.5)))
    return cpus


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
    torch.set_num_threads(n)
    return n


def use_cpu_policy(cgroup_root: str | Path | None = None) -> int:
    """Set torch's thread count by the policy (module docstring) unless someone chose it; returns the count.

    Chosen means `set_threads(n)`, then $TEACHSPEC_THREADS, then an $OMP_NUM_THREADS that torch read at start."""
    threads = _chosen if _chosen is not None else _env_threads()
    if threads is None and os.environ.get("OMP_NUM_THREADS", "").strip():
        return torch.get_num_threads()
    if threads is None:
        threads = policy_threads(cgroup_root)
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads
