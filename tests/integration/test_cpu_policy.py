"""The CPU policy (teachspec/threads.py) and the busy-machine check (teachspec/busy.py), on this machine's own
scheduler: affinity and cgroup quota limits set for real in subprocesses, busy processes that really spin."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from teachspec import busy, threads
from teachspec.bench import contention

# A fresh interpreter: torch starts with its own default thread count, then the limit under test is put in place
# (after torch has started, so that only the policy can bring the count down), then load_pair runs.
LOAD_AFTER = textwrap.dedent("""
    import os, sys, torch
    before = torch.get_num_threads()
    {limit}
    from teachspec import load_pair
    from teachspec.threads import usable_cpus
    load_pair("tiny")
    print(before, torch.get_num_threads(), usable_cpus())
""")


def threads_before_and_after(limit: str, **env) -> tuple[int, int]:
    """torch's threads before the limit and after load_pair; the limit alone must account for the one thread
    (the policy also gives way to other processes' load, which on a shared machine could bring it to one)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", threads.THREADS_ENV,
                                                              threads.CGROUP_ENV)}
    run = subprocess.run([sys.executable, "-c", LOAD_AFTER.format(limit=limit)], capture_output=True, text=True,
                         timeout=300, env={**clean, **env})
    assert run.returncode == 0, run.stderr[-3000:]
    before, after, usable = map(int, run.stdout.split()[-3:])
    assert usable == 1
    return before, after


needs_two_cpus = pytest.mark.skipif(len(threads.affinity_cpus()) < 2, reason="needs a machine with two CPUs or more")


@needs_two_cpus
def test_an_affinity_of_one_cpu_leaves_torch_one_thread(tmp_path):
    cpu = min(threads.affinity_cpus())
    before, after = threads_before_and_after(f"os.sched_setaffinity(0, {{{cpu}}})",
                                             **{threads.CGROUP_ENV: str(tmp_path)})  # no quota in the way
    assert before >= 2, "torch started with one thread: the test would pass without the policy"
    assert after == 1


@needs_two_cpus
def test_a_cgroup_quota_of_one_cpu_leaves_torch_one_thread(tmp_path):
    (tmp_path / "cpu.max").write_text("100000 100000\n")  # cgroup v2: 100 ms of CPU time every 100 ms
    before, after = threads_before_and_after("", **{threads.CGROUP_ENV: str(tmp_path)})
    assert before >= 2, "torch started with one thread: the test would pass without the policy"
    assert after == 1


@pytest.mark.parametrize("files, cpus", [
    ({"cpu.max": "max 100000\n"}, None),                                        # v2, no limit
    ({"cpu.max": "150000 100000\n"}, 1.5),                                      # v2, one and a half CPUs
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),  # v1, no limit
    ({"cpu,cpuacct/cpu.cfs_quota_us": "200000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"}, 2.0),  # v1
    ({"cpu.max": "max 100000\n", "cpu/cpu.cfs_quota_us": "50000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 0.5),
    ({"cpu.max": "garbage\n"}, None),                                           # unreadable: not a limit
    ({}, None),                                                                 # no cgroups at all
])
def test_the_cgroup_quota_is_read_from_v1_and_v2_files(tmp_path, files, cpus):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert threads.cgroup_cpus(tmp_path) == cpus
    expected = len(threads.affinity_cpus()) if cpus is None else max(1, min(len(threads.affinity_cpus()), int(cpus)))
    assert threads.usable_cpus(tmp_path) == expected


@pytest.fixture
def chosen():
    """Put the user's choice (conftest sets 1) and torch's count back after a test that changes them."""
    saved, count = threads._chosen, torch.get_num_threads()
    yield
    threads.set_threads(saved or count)  # which also stops following the load
    threads._chosen = saved


def test_set_threads_and_the_environment_override_the_policy(monkeypatch, tmp_path, chosen):
    (tmp_path / "cpu.max").write_text("100000 100000\n")
    monkeypatch.setenv(threads.CGROUP_ENV, str(tmp_path))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert threads.set_threads(3) == 3 and torch.get_num_threads() == 3
    assert threads.use_cpu_policy() == 3  # the user's choice holds over a quota of one CPU
    monkeypatch.setenv(threads.THREADS_ENV, "2")
    threads._chosen = None
    assert threads.use_cpu_policy() == 2 and torch.get_num_threads() == 2
    monkeypatch.delenv(threads.THREADS_ENV)
    assert threads.set_threads(None) == 1 and torch.get_num_threads() == 1  # back to the policy: the quota


@pytest.mark.parametrize("n", [0, -1, 1.5, "2", True])
def test_set_threads_refuses_what_is_not_a_thread_count(n, chosen):
    with pytest.raises(ValueError, match=f"n must be a whole number of threads >= 1.*got {n!r}"):
        threads.set_threads(n)


def test_a_bad_threads_variable_is_named(monkeypatch, chosen):
    threads._chosen = None
    monkeypatch.setenv(threads.THREADS_ENV, "lots")
    with pytest.raises(ValueError, match="TEACHSPEC_THREADS='lots': give a whole number of threads >= 1"):
        threads.use_cpu_policy()


def test_set_threads_is_exported_lazily():
    run = subprocess.run([sys.executable, "-c", "import sys, teachspec; print('torch' in sys.modules); "
                          "print(teachspec.set_threads.__module__)"], capture_output=True, text=True, timeout=120)
    assert run.stdout.split() == ["False", "teachspec.threads"], run.stderr


# -- the busy-machine check -----------------------------------------------------------------------------------------

def test_a_check_says_busy_plainly_and_why():
    quiet = busy.Check(seconds=1.0, cpus=2, waited=0.02, load=5.0)  # the load is only a fallback
    assert not quiet.busy and busy.MESSAGE not in str(quiet) and busy.warning(quiet.as_dict()) == ""
    waited = busy.Check(seconds=1.0, cpus=2, waited=0.4)
    assert waited.busy and str(waited).startswith(busy.MESSAGE) and "waited for a CPU 40%" in str(waited)
    loaded = busy.Check(seconds=1.0, cpus=2, waited=None, load=3.0)
    assert loaded.busy and "load average 3.0 on 2 usable CPUs" in str(loaded)
    spread = busy.Check(seconds=1.0, cpus=2, waited=0.0).repeats([0.010, 0.011, 0.030])
    assert spread.busy and "repeats differed by 3.0x" in str(spread)
    assert busy.warning(spread.as_dict()).startswith(busy.MESSAGE)
    assert not busy.Check(seconds=1.0, cpus=2, waited=0.0).repeats([0.010, 0.012]).busy


@pytest.mark.skipif(busy.run_queue_ns() is None, reason="this OS does not report run-queue delays")
def test_a_watch_sees_processes_that_keep_every_cpu_busy():
    children = contention.start_busy(len(threads.affinity_cpus()), seconds=30)
    try:
        with busy.Watch() as watch:
            end = time.perf_counter() + 1.5
            while time.perf_counter() < end:  # one more runnable thread than there are CPUs
                pass
    finally:
        contention.stop_busy(children)
    assert watch.check.busy and watch.check.waited > busy.WAITED, watch.check


def test_a_busy_process_stops_by_itself():
    (child,) = contention.start_busy(1, seconds=0.5)
    assert child.wait(timeout=30) == 0
