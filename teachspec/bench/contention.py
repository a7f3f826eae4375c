"""`teachspec bench contention`: decoding next to busy processes, with the thread policy and with torch's default.

Students run the course on shared machines: a JupyterHub node, a Binder container, a laptop compiling something.
torch starts one thread per CPU it sees, and each forward pass ends at a barrier where every thread waits for the
slowest. When another process holds one of those CPUs, one thread of every pass waits for it, and a pass that took
12-15 ms took 145-272 ms. The policy of `teachspec.device` asks for no more threads than the CPUs this process may
really use; this benchmark measures what that buys.

For 0, 1 and 2 busy processes (each a Python loop in a child process, spinning on one CPU) and two thread settings,

    policy          `device.policy_threads()`, decided with the busy processes already running
    torch default   one thread per CPU of the machine (`os.cpu_count()`), what torch starts with

it times plain decoding and speculative decoding (the draft model, constant k) on the same prompt, interleaved,
and reports tokens per second (the median of the repeats), the measured speedup, and both as a share of the same
setting's value with no busy process. The goal on a 2-CPU machine with one busy process: plain decoding within 2x
of its quiet speed, and the speedup within 15% of its quiet value, under the policy.

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

from teachspec.busy import Watch, run_queue_ns, warning
from teachspec.checks import check_int
from teachspec.device import policy_threads
from teachspec.engine import Engine
from teachspec.models.pair import Pair

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


def timed(engine: Engine, n: int, speculate: str | None, k: int) -> tuple[float, float | None]:
    """Seconds per new token of one greedy generation, and the seconds this process's threads waited for a CPU
    meanwhile (None where the OS does not say)."""
    before = run_queue_ns()
    out = engine.generate(PROMPT, n, speculate=speculate, k=k, seed=0)
    after = run_queue_ns()
    waited = (after - before) / 1e9 if before is not None and after is not None else None
    return out.stats.wall_s / out.stats.new_tokens, waited


def measure(pair: Pair, threads: dict[str, int], n: int, repeats: int, k: int) -> dict[str, dict]:
    """Plain and speculative decoding under each thread setting, interleaved `repeats` times; per setting the
    median tokens/s of each, the measured speedup, and the share of the time its threads waited for a CPU."""
    engine = Engine(pair, cache_tokens=0)  # no prefix cache: every run computes its own prefill
    runs = {(s, m): [] for s in threads for m in ("plain", "speculative")}
    for count in threads.values():  # warm-up: each thread count's first passes pick their kernels
        torch.set_num_threads(count)
        timed(engine, 4, None, k)
        timed(engine, 4, "model", k)
    for r in range(repeats):
        order = list(threads) if r % 2 == 0 else list(threads)[::-1]  # so that drift hits every setting alike
        for setting in order:
            torch.set_num_threads(threads[setting])
            for method in ("plain", "speculative") if r % 2 == 0 else ("speculative", "plain"):
                runs[(setting, method)].append(timed(engine, n, "model" if method == "speculative" else None, k))
    out = {}
    for setting in threads:
        both = runs[(setting, "plain")] + runs[(setting, "speculative")]
        plain = median(t for t, _ in runs[(setting, "plain")])  # seconds per token
        spec = median(t for t, _ in runs[(setting, "speculative")])
        waits = [w for _, w in both]
        waited = None if None in waits else sum(waits) / (n * sum(t for t, _ in both))
        out[setting] = {"threads": threads[setting], "plain_tokens_per_s": 1 / plain,
                        "speculative_tokens_per_s": 1 / spec, "speedup": plain / spec, "waited": waited}
    return out


def bench(pair: Pair, busy=(0, 1, 2), new_tokens: int = 64, repeats: int = 3, k: int = 2,
          busy_seconds: float = 600.0, progress: bool = True) -> dict:
    """The whole benchmark; a JSON-able dict with one row per (busy processes, thread setting)."""
    from tqdm.auto import tqdm

    for name, value, least in (("new_tokens", new_tokens, 1), ("repeats", repeats, 1), ("k", k, 1)):
        check_int(name, value, least)
    busy = [check_int("busy", b, 0) for b in busy]
    if pair.draft is None:
        raise ValueError("bench contention times speculative decoding with the draft model, and this pair has "
                         "none; load one with --target and --draft, or use the bundled pair")
    fixed = dataclasses.replace(pair, eos_token_id=None)  # every run decodes exactly new_tokens tokens
    saved = torch.get_num_threads()
    result = {"pair": pair.name, "cpus": os.cpu_count(), "new_tokens": new_tokens, "repeats": repeats, "k": k,
              "rows": [], "machine": None}
    bar = tqdm(total=len(busy), desc="bench contention", disable=not progress)
    try:
        for n_busy in busy:
            children = start_busy(n_busy, busy_seconds)
            try:
                time.sleep(0.2 if n_busy else 0)  # let them start spinning before the policy looks
                threads = {"policy": policy_threads(), "torch default": os.cpu_count() or 1}
                watch = Watch()
                measured = measure(fixed, threads, new_tokens, repeats, k)
                check = watch.stop()
            finally:
                stop_busy(children)
            if n_busy == 0:
                result["machine"] = check.as_dict()  # only the quiet rows must be undisturbed
            for setting, row in measured.items():
                result["rows"].append({"busy": n_busy, "setting": setting, **row})
            bar.update(1)
    finally:
        torch.set_num_threads(saved)
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
             f"{result['repeats']} interleaved runs, speculation with the draft model at k={result['k']}", "",
             "| busy processes | threads | plain tok/s | speculative tok/s | speedup | plain, of quiet "
             "| speedup, of quiet | waited for a CPU |", "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        waited = "" if r["waited"] is None else f"{r['waited']:.0%}"
        lines.append(f"| {r['busy']} | {r['setting']}: {r['threads']} | {r['plain_tokens_per_s']:.0f} | "
                     f"{r['speculative_tokens_per_s']:.0f} | {r['speedup']:.2f}x | {share(r['plain_of_quiet'])} | "
                     f"{share(r['speedup_of_quiet'])} | {waited} |")
    if warning(result.get("machine")):
        lines += ["", "with no busy process: " + warning(result["machine"])]
    return "\n".join(lines)
