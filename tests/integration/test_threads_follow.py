"""The thread count follows the machine's load (teachspec/threads.py): the rule on made-up windows, where every
case can be set exactly, then for real, with a busy process that starts after the pair has loaded."""

from __future__ import annotations

import random

import pytest
import torch

from teachspec import threads
from teachspec.bench import contention
from teachspec.engine import Engine
from teachspec.models import load_pair
from teachspec.threads import Governor, Window


def run(g: Governor, windows: list[Window], seconds: float = 0.5) -> list[int]:
    """The thread count after each window, the windows `seconds` apart."""
    return [g.judge(w, (i + 1) * seconds) for i, w in enumerate(windows)]


# -- the rule --------------------------------------------------------------------------------------------------------

def test_a_neighbour_that_arrives_takes_a_thread_at_once_and_says_why():
    g = Governor(usable=2, threads=2)
    assert run(g, [Window(0.5, 0.05, 0.01), Window(0.5, 0.7, 0.3)]) == [2, 1]
    assert len(g.history) == 1 and (g.history[0].before, g.history[0].after) == (2, 1)
    assert "other processes used 0.70 of 2 CPUs" in g.history[0].why


def test_waiting_for_a_cpu_alone_takes_a_thread_where_the_os_does_not_report_the_others():
    g = Governor(usable=4, threads=4)
    assert run(g, [Window(0.5, None, 0.35), Window(0.5, None, 0.05)]) == [3, 3]
    assert "waited for a CPU 35%" in g.history[0].why


def test_a_neighbour_that_leaves_gives_the_thread_back_after_calm_windows_not_one():
    g = Governor(usable=2, threads=1)
    assert run(g, [Window(0.5, 1.0, 0.0), Window(0.5, 0.05, 0.0), Window(0.5, 0.05, 0.0)]) == [1, 1, 2]
    assert "for 2 windows in a row" in g.history[-1].why


def test_many_cpus_follow_how_many_the_others_take():
    g = Governor(usable=8, threads=8)
    assert run(g, [Window(0.5, 3.0, 0.4)]) == [5]  # 8 - 3 CPUs left
    assert run(g, [Window(0.5, 1.5, 0.0)] * 2) == [5, 6]  # 6.5 left: a rise keeps 0.6 of a CPU in reserve
    assert run(g, [Window(0.5, 0.1, 0.0)] * 2) == [6, 8]
    assert all(1 <= c.after <= 8 for c in g.history)


def test_never_below_one_thread_nor_above_the_usable_cpus():
    g = Governor(usable=2, threads=2)
    counts = run(g, [Window(0.5, 5.0, 0.9)] * 5 + [Window(0.5, 0.0, 0.0)] * 5)
    assert min(counts) == 1 and max(counts) == 2


def noisy(n: int, low: float, high: float, seed: int = 0) -> list[Window]:
    """A neighbour whose use wanders between `low` and `high` CPUs, and waits that come with it."""
    rng = random.Random(seed)
    return [Window(0.5, rng.uniform(low, high), rng.uniform(0.0, 0.25)) for _ in range(n)]


def test_noise_near_the_line_changes_the_count_rarely_and_ever_more_rarely():
    g = Governor(usable=2, threads=2)
    counts = run(g, noisy(2000, 0.25, 0.75))  # 1,000 s of a neighbour hovering at half a CPU
    changes = [i for i in range(1, len(counts)) if counts[i] != counts[i - 1]]
    assert len(changes) <= 12, changes
    assert g.calm > threads.CALM  # each rise undone soon after made the next one wait longer


def test_noise_inside_the_band_changes_nothing():
    for start in (1, 2):
        g = Governor(usable=2, threads=start)
        windows = [Window(0.5, 0.4 + 0.2 * x.others, 0.7 * x.waited) for x in noisy(1000, 0.0, 1.0, seed=start)]
        assert set(run(g, windows)) == {start}, g.history[:3]  # others in [0.4, 0.6], waits under a fifth


@pytest.mark.parametrize("mutation", ["no margin", "no calm", "no backoff"])
def test_each_guard_against_flapping_is_needed(monkeypatch, mutation):
    """The flapping test above fails when a guard is taken away: it can tell a governor that flaps."""
    if mutation == "no margin":
        monkeypatch.setattr(threads, "MARGIN", 0.0)
    elif mutation == "no calm":
        monkeypatch.setattr(threads, "CALM", 1)
        monkeypatch.setattr(threads, "MOST_CALM", 1)
    else:
        monkeypatch.setattr(threads, "MOST_CALM", threads.CALM)
    g = Governor(usable=2, threads=2, calm=threads.CALM)
    counts = run(g, noisy(2000, 0.25, 0.75))
    changes = sum(counts[i] != counts[i - 1] for i in range(1, len(counts)))
    assert changes > 12


# -- for real --------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_engine():
    return Engine(load_pair("tiny"), cache_tokens=0)


needs_two_cpus = pytest.mark.skipif(len(threads.affinity_cpus()) < 2 or threads.run_queue_ns() is None,
                                    reason="needs two CPUs and a kernel that reports run-queue delays")


@pytest.fixture
def following():
    """Follow the load from 2 threads, as load_pair does on a quiet 2-CPU machine; put the suite's choice back."""
    saved = threads._chosen
    threads._chosen = None
    threads.follow.restart(2)
    torch.set_num_threads(2)
    yield
    threads.set_threads(saved or 1)
    threads._chosen = saved


@needs_two_cpus
def test_a_neighbour_that_starts_after_load_pair_takes_a_thread_within_a_request_or_two(tiny_engine, following):
    children = contention.start_busy(2, seconds=60)  # two: on a machine that is busy already, one might not show
    try:
        counts = []
        for _ in range(6):
            tiny_engine.generate("The with statement", 48, speculate=None, seed=0)
            counts.append(torch.get_num_threads())
            if counts[-1] == 1:
                break
    finally:
        contention.stop_busy(children)
    assert counts[-1] == 1, counts
    change = threads.history()[-1]
    assert (change.before, change.after) == (2, 1) and "other processes used" in change.why
    assert "1 CPU threads of 2 usable CPUs, following the machine's load" in threads.describe()
    # and back up once it has gone, where nothing else keeps the machine busy
    for _ in range(12):
        tiny_engine.generate("The with statement", 48, speculate=None, seed=0)
        if torch.get_num_threads() == 2:
            break
    others = threads.busy_elsewhere(seconds=0.5)
    if others is not None and others < 0.3:
        assert torch.get_num_threads() == 2, threads.describe()


def test_a_chosen_count_is_never_followed(tiny_engine):
    threads.set_threads(1)
    assert threads.follow.governor is None
    children = contention.start_busy(1, seconds=30)
    try:
        tiny_engine.generate("The with statement", 16, speculate=None, seed=0)
    finally:
        contention.stop_busy(children)
    assert torch.get_num_threads() == 1 and "fixed by set_threads(n)" in threads.describe()
