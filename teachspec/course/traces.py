"""Re-record the traces that ship beside the notebooks, so a lecturer can step through every demo with no model.

    teachspec traces [--pair tiny] [--out traces]        # from a checkout: --out notebooks/traces

Each trace is an `EventLog` saved with `EventLog.save`; a notebook replays one with

    SpeculationView(EventLog.load("traces/speculation.jsonl"))      or RadixTreeView(...)

The recordings are seeded, so re-recording with the same pair and library versions gives the same events (the
timestamps differ).
"""

from __future__ import annotations

import sys
from pathlib import Path

from teachspec import workloads
from teachspec.chat import Chat
from teachspec.engine import Engine
from teachspec.events import EventLog

PROMPT = "Return a new dictionary"


def speculation(pair) -> EventLog:
    """Lecture 2: one sampled generation with the draft model, k = 4, the top alternatives recorded."""
    engine = Engine(pair, record_top=3, cache_tokens=0)
    engine.generate(PROMPT, max_new_tokens=40, temperature=0.8, k=4, seed=0)
    return engine.events


def radix_shared(pair) -> EventLog:
    """Lecture 5: a shared system prompt, then few-shot questions (one-letter answers), then a three-turn chat, in
    one cache."""
    engine = Engine(pair, cache_tokens=8192)
    system = workloads.system_prompt(n_requests=4, system_tokens=120, question_tokens=20, max_new_tokens=8)
    engine.serve(system.requests, speculate=None, seed=0)
    shots = workloads.few_shot(n_questions=3, shots=3, example_tokens=60, question_tokens=40)
    engine.serve(shots.requests, speculate=None, seed=0)
    chat = Chat(engine, system=workloads.CHAT_SYSTEM)
    for message in ("What does dict.get return?", "And with a default?", "Thanks."):
        chat.say(message, max_new_tokens=12, speculate=None, seed=0)
    return engine.events


def radix_eviction(pair) -> EventLog:
    """Lecture 5: the same kind of traffic through a cache of 400 tokens: LRU leaves go first, locked ones never."""
    engine = Engine(pair, cache_tokens=400)
    shots = workloads.few_shot(n_questions=6, shots=2, example_tokens=80, question_tokens=40)
    engine.serve(shots.requests, speculate=None, seed=0)
    engine.serve(workloads.no_reuse(n_requests=3, prompt_tokens=120, max_new_tokens=8).requests, speculate=None,
                 seed=0)
    return engine.events


def together(pair) -> EventLog:
    """Lecture 7: a system-prompt workload served with speculation and prefix reuse, in lpm order."""
    engine = Engine(pair, cache_tokens=8192)
    system = workloads.system_prompt(n_requests=4, system_tokens=120, question_tokens=20, max_new_tokens=16)
    engine.serve(system.requests, schedule="lpm", speculate="model", k=3, seed=0)
    return engine.events


TRACES = {"speculation": speculation, "radix_shared": radix_shared, "radix_eviction": radix_eviction,
          "together": together}


def record(pair, out: Path) -> dict[str, Path]:
    """Record every trace with `pair` into `out`; returns name -> path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    return {name: make(pair).save(out / f"{name}.jsonl") for name, make in TRACES.items()}


def main(argv: list[str] | None = None) -> None:
    """`python -m teachspec.course.traces ...` is `teachspec traces ...`."""
    from teachspec.cli import main as teachspec

    teachspec(["traces", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()
