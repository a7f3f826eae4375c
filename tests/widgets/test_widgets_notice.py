"""A live view says when the machine is too busy for the times it shows (its tokens/s, its pass times)."""

import time

from teachspec import Engine, load_pair
from teachspec.bench import contention
from teachspec.busy import MESSAGE
from teachspec.threads import affinity_cpus
from teachspec.widgets import SpeculationView


def test_a_live_view_following_a_generation_on_a_busy_machine_says_so():
    engine = Engine(load_pair("tiny"), cache_tokens=0)
    view = SpeculationView.live(engine.events)
    children = contention.start_busy(len(affinity_cpus()) + 1, seconds=60)  # more runnable threads than CPUs
    try:
        end = time.perf_counter() + 3.0
        while time.perf_counter() < end:
            engine.generate("def parse(path):", 24, speculate="model", k=2)
        view.flush()
    finally:
        contention.stop_busy(children)
        view.detach()
    assert view.notice.startswith(MESSAGE), view.notice
