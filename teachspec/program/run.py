"""Running a program: `run` executes it once, `run_batch` once per set of arguments, on one engine.

A program is a plain Python function whose first parameter is the state:

    def classify(s, question):
        s += EXAMPLES + "Question: " + question + "\\nAnswer:"
        s += select("answer", [" yes", " no"])

    state = run(classify, engine=engine, question="Is a list mutable?")
    state["answer"]

Calls run eagerly, one after another, on the engine: Python's own `if` and `for` are the control flow, and a
program can read a variable the moment its call has returned. SGLang runs the calls of many programs
concurrently and batches them on the GPU; on the local engine they run in order, and what they share is the radix
tree: all the runs of a batch go through one engine, so the worked examples every question starts with are
computed once.

The engine can also be a server (`teachspec.serving.RemoteEngine`: vLLM's OpenAI-compatible endpoint). Then
`run_batch` sends its runs concurrently, `concurrency` at a time, and the server batches their requests into its
model steps as SGLang's runtime does; its prefix cache plays the radix tree's part.
"""

from __future__ import annotations

import inspect
import itertools
from concurrent.futures import ThreadPoolExecutor

from teachspec.engine import Engine
from teachspec.program.state import Run, State
from teachspec.speculate import Speculation

_run_ids = itertools.count()  # a run's id in the trace: ProgramStep and ProgramSpan events carry it


def run(program, /, *, engine: Engine, speculate: str | None = "model", k=2, seed: int | None = 0,
        **arguments) -> State:
    """Run `program(s, **arguments)` on `engine` and return its final state.

    Every gen decodes with `speculate` and `k` (Engine.generate's options; None for plain decoding) and a seed
    derived from `seed` (None: unseeded). These four names are the runner's; a program's own parameters need
    other names."""
    name = _check(program, engine, arguments, speculate, k)
    state = State(Run(engine, name, next(_run_ids), speculate, k, seed))
    program(state, **arguments)
    return state


def run_batch(program, arguments: list[dict], /, *, engine: Engine, speculate: str | None = "model", k=2,
              seed: int | None = 0, progress: bool = False, concurrency: int = 8) -> list[State]:
    """Run `program` once per dict of arguments on one engine; return the final states in the order given.

    On the local engine the runs go one after another; on a server `concurrency` of them are in flight at once.
    Every argument set is checked against the program's parameters before the first run starts."""
    if not isinstance(arguments, (list, tuple)) or not all(isinstance(a, dict) for a in arguments):
        raise TypeError(f"arguments must be a list of dicts, one per run, got {type(arguments).__name__}")
    for a in arguments:
        _check(program, engine, a, speculate, k)
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"concurrency must be an int >= 1 (runs in flight at once on a server), got {concurrency!r}")
    from tqdm.auto import tqdm

    bar = tqdm(total=len(arguments), desc=getattr(program, "__name__", "program"), disable=not progress)

    def one(a: dict) -> State:
        state = run(program, engine=engine, speculate=speculate, k=k, seed=seed, **a)
        bar.update()
        return state

    if isinstance(engine, Engine):
        states = [one(a) for a in arguments]
    else:
        with ThreadPoolExecutor(max_workers=min(concurrency, len(arguments) or 1)) as pool:
            states = list(pool.map(one, arguments))
    bar.close()
    return states


def _check(program, engine, arguments: dict, speculate, k) -> str:
    if not callable(program):
        raise TypeError(f"program must be a function whose first parameter is the state, got "
                        f"{type(program).__name__}")
    if not isinstance(engine, Engine) and not all(hasattr(engine, a) for a in ("generate", "score", "events", "pair")):
        raise TypeError(f"engine must be a teachspec Engine, or a server's (teachspec.serving.RemoteEngine), got "
                        f"{type(engine).__name__}")
    Speculation(speculate, k)  # refuses a name that is not a drafter, a k that is no draft length nor policy
    name = getattr(program, "__name__", type(program).__name__)
    try:
        inspect.signature(program).bind(None, **arguments)
    except TypeError as e:
        raise TypeError(f"{name}{inspect.signature(program)} cannot take the arguments {sorted(arguments)}: "
                        f"{e}") from None
    return name
