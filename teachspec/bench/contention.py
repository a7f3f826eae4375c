"""`teachspec bench contention`: decoding next to busy processes, with the thread policy and with torch's default.

Students run the course on shared machines: a JupyterHub node, a Binder container, a laptop compiling something.
torch starts one thread per CPU it sees, and each forward pass ends at a barrier where every thread waits for the
slowest. When another process holds one of those CPUs, one thread of every pass waits for it, and a pass that took
12-15 ms took 145-272 ms. The policy of `teachspec.threads` asks for no more threads than the CPUs this process may
really use, and follows the load as it changes; this benchmark measures what that buys.

For 0, 1 and 2 busy processes (each a Python loop in a child process, spinning on one CPU) and two thread settings,

    policy          `threads.use_cpu_policy()`, decided with the busy processes already running, then following
    torch default   one thread per CPU of the machine (`os.cpu_count()`), what torch starts with

it times plain decoding and speculative decoding (the draft model, constant k) on the same prompt, interleaved,
and reports tokens per second (the median of the repeats), the measured speedup, and both as a share of the same
setting's value with no busy process. Then the case the policy at load cannot see (`arrival`): the engine is built
and warmed up on a quiet machine, ONE busy process starts, the same runs are timed, it stops, and plain runs are
timed one by one until they are back to quiet speed. The goals on a 2-CPU machine with one busy process, whether
it came before or after the pair loaded: plain decoding within 2x of its quiet speed, the speedup within 15% of its
quiet value, and quiet speed again within a few requests after it leaves.

A busy process stops by itself after `busy_seconds`, or as soon as the process that started it is gone, so an
interrupted benchmark leaves nothing spinning.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from statistics import median

import torch

from teachspec.bench.table import table
from teachspec.busy import Watch, warning
from teachspec.engine import Engine
from teachspec.models.pair import Pair
from teachspec.threads import run_queue_ns, set_threads
from teachspec.validate import check_int

PROMPT = 'The "with" statement is used to'
SETTINGS = ("policy", "torch default")

# A child that spins on one CPU until its deadline, or until its parent is gone (its parent id changes); Ctrl-C in
# the terminal reaches it too, and ends it without a traceback.
SPIN = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_DFL)
end, parent = time.monotonic() + float(sys.argv[1]), int(sys.argv[2])
while time.monotonic() < end and os.getppid() == parent:
    for _ in range(100_000):
        pass
"""


def start_busy(n: int, seconds: float) -> list[subprocess.Popen]:
    """`n` child processes, each keeping one CPU busy for at most `seconds`."""
    return [subprocess.Popen([sys.executable, "-c", SPIN, str(seconds), str(os.getpid())]) for _ in range(n)]


def stop_busy(children: list[subprocess.Popen]) -> None:
    for child in children:
        child.terminate()
    for child in children:
        child.wait()


def timed(engine: Engine, n: int, speculate: str | None, k: int) -> tuple[float, float | None, int]:
    """Seconds per new token of one greedy generation, the seconds this process's threads waited for a CPU
    meanwhile (None where the OS does not say), and the threads torch ran at its end."""
    before = run_queue_ns()
    out = engine.generate(PROMPT, n, speculate=speculate, k=k, seed=0)
    after = run_queue_ns()
    waited = (after - before) / 1e9 if before is not None and after is not None else None
    return out.stats.wall_s / out.stats.new_tokens, waited, torch.get_num_threads()


def summary(runs: dict[str, list], n: int) -> dict:
    """Median tokens/s of the plain and speculative runs, the speedup, the share of the time the threads waited
    for a CPU, and the thread counts the runs ended on."""
    plain = median(t for t, _, _ in runs["plain"])  # seconds per token
    spec = median(t for t, _, _ in runs["speculative"])
    both = runs["plain"] + runs["speculative"]
    waits = [w for _, w, _ in both]
    waited = None if None in waits else sum(waits) / (n * sum(t for t, _, _ in both))
    counts = sorted({c for _, _, c in both})
    return {"threads": "/".join(map(str, counts)), "plain_tokens_per_s": 1 / plain,
            "speculative_tokens_per_s": 1 / spec, "speedup": plain / spec, "waited": waited}


def measure(engine: Engine, settings: dict[str, int | None], n: int, repeats: int, k: int) -> dict[str, dict]:
    """Plain and speculative decoding under each thread setting, interleaved `repeats` times; per setting what
    `summary` reports."""
    runs = {s: {"plain": [], "speculative": []} for s in settings}
    for setting in settings:  # warm-up: each thread count's first passes pick their kernels
        set_threads(settings[setting])  # None: the policy, decided now, following
        timed(engine, 4, None, k)
        timed(engine, 4, "model", k)
    for r in range(repeats):
        order = list(settings) if r % 2 == 0 else list(settings)[::-1]  # so that drift hits every setting alike
        for setting in order:
            set_threads(settings[setting])  # None: the policy, decided now, following
            for method in ("plain", "speculative") if r % 2 == 0 else ("speculative", "plain"):
                runs[setting][method].append(timed(engine, n, "model" if method == "speculative" else None, k))
    return {setting: summary(runs[setting], n) for setting in settings}


def arrival(engine: Engine, n: int, repeats: int, k: int, busy_seconds: float, after: int = 8) -> dict:
    """The policy on a quiet machine, then ONE busy process arriving after the engine is built, then leaving:
    quiet and busy `summary`s, and the plain tokens/s of the `after` requests that follow its leaving."""
    set_threads(None)  # the policy, decided now, on the quiet machine
    timed(engine, 4, None, k)
    timed(engine, 4, "model", k)
    phases = {}
    for phase in ("quiet", "busy"):
        children = start_busy(1 if phase == "busy" else 0, busy_seconds)
        try:
            runs = {"plain": [], "speculative": []}
            for r in range(repeats):
                for method in ("plain", "speculative") if r % 2 == 0 else ("speculative", "plain"):
                    runs[method].append(timed(engine, n, "model" if method == "speculative" else None, k))
            phases[phase] = summary(runs, n)
        finally:
            stop_busy(children)
    left = [timed(engine, n, None, k) for _ in range(after)]
    quiet = phases["quiet"]["plain_tokens_per_s"]
    shares = [1 / t / quiet for t, _, _ in left]
    back = next((i + 1 for i in range(len(shares)) if min(shares[i:]) >= 0.9), None)
    return {**phases, "after": {"plain_of_quiet": shares, "threads": [c for _, _, c in left],
                                "back_after_requests": back}}


def bench(pair: Pair, busy=(0, 1, 2), new_tokens: int = 64, repeats: int = 3, k: int = 2,
          busy_seconds: float = 600.0, progress: bool = True) -> dict:
    """The whole benchmark; a JSON-able dict with one row per (busy processes, thread setting), and the arrival
    case (`arrival`) as rows of its own."""
    from tqdm.auto import tqdm

    from teachspec import threads

    for name, value, least in (("new_tokens", new_tokens, 1), ("repeats", repeats, 1), ("k", k, 1)):
        check_int(name, value, least)
    busy = [check_int("busy", b, 0) for b in busy]
    if pair.draft is None:
        raise ValueError("bench contention times speculative decoding with the draft model, and this pair has "
                         "none; load one with --target and --draft, or use the bundled pair")
    fixed = dataclasses.replace(pair, eos_token_id=None)  # every run decodes exactly new_tokens tokens
    engine = Engine(fixed, cache_tokens=0)  # no prefix cache: every run computes its own prefill
    chosen = threads._chosen
    result = {"pair": pair.name, "cpus": os.cpu_count(), "new_tokens": new_tokens, "repeats": repeats, "k": k,
              "rows": [], "machine": None, "after": None}
    bar = tqdm(total=len(busy) + 1, desc="bench contention", disable=not progress)
    try:
        for n_busy in busy:
            children = start_busy(n_busy, busy_seconds)
            try:
                time.sleep(0.2 if n_busy else 0)  # let them start spinning before the policy looks
                watch = Watch()
                measured = measure(engine, {"policy": None, "torch default": os.cpu_count() or 1}, new_tokens,
                                   repeats, k)
                check = watch.stop()
            finally:
                stop_busy(children)
            if n_busy == 0:
                result["machine"] = check.as_dict()  # only the quiet rows must be undisturbed
            for setting, row in measured.items():
                result["rows"].append({"busy": n_busy, "setting": setting, **row})
            bar.update(1)
        came = arrival(engine, new_tokens, repeats, k, busy_seconds)
        for phase, n_busy in (("quiet", 0), ("busy", 1)):
            result["rows"].append({"busy": n_busy, "setting": "policy, neighbour after load", **came[phase]})
        result["after"] = came["after"]
        bar.update(1)
    finally:
        set_threads(chosen)  # the count chosen before, or the policy again
        bar.close()
    quiet = {r["setting"]: r for r in result["rows"] if r["busy"] == 0}
    for row in result["rows"]:
        base = quiet.get(row["setting"])
        row["plain_of_quiet"] = row["plain_tokens_per_s"] / base["plain_tokens_per_s"] if base else None
        row["speedup_of_quiet"] = row["speedup"] / base["speedup"] if base else None
    return result


def markdown(result: dict) -> str:
    def share(x):
        return "" if x is None else f"{x:.2f}"

    lines = [f"pair {result['pair']}, {result['cpus']} CPUs, {result['new_tokens']} new tokens, median of "
             f"{result['repeats']} interleaved runs, speculation with the draft model at k={result['k']}", ""]
    lines += table(["busy processes", "threads", "plain tok/s", "speculative tok/s", "speedup", "plain, of quiet",
                    "speedup, of quiet", "waited for a CPU"],
                   [[r["busy"], f"{r['setting']}: {r['threads']}", f"{r['plain_tokens_per_s']:.0f}",
                     f"{r['speculative_tokens_per_s']:.0f}", f"{r['speedup']:.2f}x", share(r["plain_of_quiet"]),
                     share(r["speedup_of_quiet"]), "" if r["waited"] is None else f"{r['waited']:.0%}"]
                    for r in result["rows"]])
    after = result.get("after")
    if after:
        back = after["back_after_requests"]
        lines += ["", "after the neighbour left, plain decoding's next requests, of quiet speed (threads): " +
                  ", ".join(f"{x:.2f} ({c})" for x, c in zip(after["plain_of_quiet"], after["threads"])) + "; " +
                  (f"back within 10% from request {back}" if back else "not back within 10%")]
    if warning(result.get("machine")):
        lines += ["", "with no busy process: " + warning(result["machine"])]
    return "\n".join(lines)
