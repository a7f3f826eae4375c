"""`teachspec bench speculative --workloads NAME ...`: every drafter on one multi-request workload, side by side.

Suffix decoding (speculate="suffix") learns from the requests before: its guesses come from the request's own
tokens and from the outputs of every earlier request (teachspec/speculative/suffix.py). A benchmark of single
prompts cannot show that, so this one sends a workload's requests in order, one at a time, as an agent or a
coding tool would, to one engine per method:

    agentic       the example programs' generation calls over many inputs (program/examples.py, agent_requests):
                  the same frames again and again, branches that differ in one number
    code_edits    the same files rewritten with one change after another (workloads.code_edits)
    novel         openings of held-out documentation to continue (workloads.docs_completion): nothing repeats
                  across requests, where a drafter that learns has nothing to learn from

The methods, each at its registry's start k (teachspec/speculate.py) and each on an engine of its own, so that
the suffix cache of one never serves another. Each engine keeps its radix cache, as a server would: the
requests of a task share their frames and examples, every method finds the same prefixes cached, and what is
left to compare is the decoding:

    plain                 no drafter
    prompt lookup         the request's own context, last n tokens matched (speculate="ngram")
    suffix                the request's own suffix tree and the engine's tree of earlier outputs
    draft model           the pair's small model (speculate="model")
    EAGLE head            the feature-level head (speculate="eagle"), where the pair has one
    hybrid                suffix when its trees are confident, the draft model otherwise, step by step

Requests are interleaved method by method (the order rotating), so a noisy shared machine slows all alike, and
the table reports ratios to plain decoding measured in this one run. Greedy, EOS ignored: every method writes the
same tokens, which is checked before a number is printed. Per method: the speedup over whole requests, tokens per
second, tokens per target pass, alpha (accepted over judged guesses), the mean accepted length (guesses accepted
per speculative step) and where the time goes per new token (draft, target, the engine's own work).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

from teachspec.bench.table import table
from teachspec.busy import Watch, warning
from teachspec.engine import Engine
from teachspec.models.pair import Pair
from teachspec.speculate import DRAFTERS, start_k
from teachspec.stats import Stats
from teachspec.validate import check_int
from teachspec.workloads import Workload

METHODS = {"plain": None} | {d.title: d.name for d in DRAFTERS.values() if d.title}  # table name -> speculate


NAMES = ("agentic", "code_edits", "novel")


def check_names(names) -> tuple[str, ...]:
    """The workloads asked for, refused unless each is one of NAMES (and there is at least one), before anything
    runs."""
    if not isinstance(names, (list, tuple)) or not names:
        raise ValueError(f"workloads must be a non-empty list of names; use some of {list(NAMES)}, got {names!r}")
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        raise ValueError(f"workloads {unknown} are not workloads of this bench; use some of {list(NAMES)}")
    return tuple(names)


def workloads(names=NAMES, n_new: int = 96, scale: int = 1) -> dict[str, Workload]:
    """The workloads the module docstring names, `scale` times their default size."""
    from teachspec import workloads as w
    from teachspec.program.examples import agent_requests
    check_int("scale", scale, 1)
    make = {"agentic": lambda: agent_requests(6 * scale, n_new),
            "code_edits": lambda: w.code_edits(3 * scale, 4, max_new_tokens=n_new),
            "novel": lambda: w.docs_completion(12 * scale, 64, n_new)}
    return {name: make[name]() for name in check_names(names)}


@dataclass
class Tally:
    """One method's requests: wall time around each call, the tokens, the engine's statistics."""
    seconds: float = 0.0
    outputs: list = field(default_factory=list)
    stats: Stats = field(default_factory=Stats)


def methods_for(pair: Pair) -> dict[str, str | None]:
    """The methods this pair can run: no draft model, no draft model rows; no EAGLE head, no EAGLE row."""
    return {name: s for name, s in METHODS.items()
            if s is None or DRAFTERS[s].needs is None or getattr(pair, DRAFTERS[s].needs, None) is not None}


def run(pair: Pair, workload: Workload, progress=None) -> dict[str, Tally]:
    """Every method over the workload's requests, in order, interleaved request by request."""
    fixed = dataclasses.replace(pair, eos_token_id=None)  # every method writes max_new_tokens tokens
    methods = methods_for(pair)
    engines = {name: Engine(fixed) for name in methods}
    for name, engine in engines.items():  # warm up: first calls allocate; then forget what the engine learnt
        engine.generate("Warm up", 4, speculate=methods[name], k=start_k(methods[name]))
        engine.learnt.clear()  # (the radix cache keeps "Warm up": no workload's prompt starts so)
    runs = {name: Tally() for name in methods}
    names = list(methods)
    for i, job in enumerate(workload.requests):
        prompt = fixed.encode(job.prompt)
        for name in names[i % len(names):] + names[:i % len(names)]:
            speculate = methods[name]
            t0 = time.perf_counter()
            out = engines[name].generate(prompt, job.max_new_tokens, speculate=speculate, k=start_k(speculate))
            runs[name].seconds += time.perf_counter() - t0
            runs[name].outputs.append(out.tokens)
            runs[name].stats.add(out.stats)
        if progress is not None:
            progress.update(1)
    return runs


def summarise(runs: dict[str, Tally]) -> list[dict]:
    plain = runs["plain"]
    rows = []
    for name, r in runs.items():
        s, tokens = r.stats, sum(map(len, r.outputs))
        per = 1e3 / tokens
        row = {"method": name, "k": start_k(METHODS[name]) if METHODS[name] else 0,
               "speedup": plain.seconds / r.seconds, "tokens_per_s": tokens / r.seconds,
               "tokens_per_target_pass": s.new_tokens / s.target_passes,
               "time_split": {"draft_ms": s.draft_s * per, "target_ms": s.target_s * per,
                              "engine_ms": max(0.0, s.wall_s - s.draft_s - s.target_s) * per}}
        if s.drafts:
            row.update(alpha=s.alpha, mean_accepted=s.accepted / s.drafts)
        rows.append(row)
    return rows


def bench(pair: Pair, names=NAMES, n: int = 96, scale: int = 1,
          progress: bool = True) -> dict:
    """The benchmark over the workloads `names`; a JSON-able dict with a table per workload."""
    from tqdm.auto import tqdm

    chosen = workloads(names, n, scale)
    bar = tqdm(total=sum(len(w.requests) for w in chosen.values()), desc="bench workloads", disable=not progress)
    result = {"pair": pair.name, "device": str(pair.device), "new_tokens": n, "workloads": {}}
    watch = Watch()
    for name, workload in chosen.items():
        runs = run(pair, workload, bar)
        outputs = [r.outputs for r in runs.values()]
        result["workloads"][name] = {"description": workload.description, "requests": len(workload.requests),
                                     "greedy_outputs_identical": all(o == outputs[0] for o in outputs),
                                     "rows": summarise(runs)}
    result["machine"] = watch.stop().as_dict()
    bar.close()
    return result


def markdown(result: dict) -> str:
    lines = [f"pair {result['pair']} on {result['device']}, greedy, {result['new_tokens']} new tokens a request, "
             f"one request at a time in the workload's order, methods interleaved request by request"]
    for name, w in result["workloads"].items():
        lines += ["", f"**{name}**: {w['description']}, {w['requests']} requests (greedy outputs identical: "
                      f"{w['greedy_outputs_identical']})", ""]
        lines += table(["method", "k", "speedup", "tok/s", "tok/pass", "alpha", "mean accepted", "draft ms",
                        "target ms", "engine ms"],
                       [[r["method"], r["k"] or "", f"{r['speedup']:.2f}x", f"{r['tokens_per_s']:.0f}",
                         f"{r['tokens_per_target_pass']:.2f}", f"{r['alpha']:.2f}" if "alpha" in r else "",
                         f"{r['mean_accepted']:.2f}" if "mean_accepted" in r else "",
                         f"{r['time_split']['draft_ms']:.2f}", f"{r['time_split']['target_ms']:.2f}",
                         f"{r['time_split']['engine_ms']:.2f}"] for r in w["rows"]])
    lines += ["", "ms: per new token over whole requests (the prefill included): in draft passes (for suffix and "
                  "prompt lookup, their lookups), in target passes, and the engine's own work, the rest."]
    if warning(result.get("machine")):
        lines += ["", warning(result["machine"])]
    return "\n".join(lines)
