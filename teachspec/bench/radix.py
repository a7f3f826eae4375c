"""`teachspec bench radix`: what prefix reuse buys, per workload, measured side by side in one run.

For each workload the same requests run with the radix cache off, and on under three schedules (fcfs, lpm, dfs),
each configuration on a fresh engine, the configurations interleaved over a few rounds so that machine noise hits
them alike. Reported per configuration:

- throughput: requests' total wall time, and the ratio of the cache-off time to it;
- hit rate: prompt tokens served from the cache / prompt tokens, against the best any order could reach
  (`workloads.best_hit_rate`: every distinct prefix computed once);
- prefill tokens computed and saved; the peak of cached tokens, which never exceeds the budget;
- cache time: the share of the wall time spent inside the cache itself (match, lock, assembling the cached KV,
  eviction, insertion), timed around those calls. On the no-reuse control it is all the cache adds, measured
  directly rather than read off a throughput ratio that machine noise moves by a few percent.

The run is watched (`teachspec.busy`): when other programs kept the CPUs busy, the table says so.

Multi-turn chat runs turn by turn through `Chat` (a turn's prompt only exists once the previous reply does), so
its order is fixed and only on/off is compared.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from teachspec import workloads as wl
from teachspec.bench.table import table
from teachspec.busy import Watch, warning
from teachspec.chat import Chat
from teachspec.engine import Engine
from teachspec.models.pair import Pair
from teachspec.radix.schedule import SCHEDULES



@dataclass
class BenchRun:
    seconds: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    new_tokens: int = 0
    peak_cached: int = 0
    cache_s: float = 0.0
    outputs: list | None = None


def serve_once(pair: Pair, requests, cache_tokens: int, schedule: str, speculate, k) -> BenchRun:
    engine = Engine(pair, cache_tokens=cache_tokens)
    run = BenchRun(outputs=[])
    peak = 0

    def watch(event):
        nonlocal peak
        if engine.radix is not None:
            peak = max(peak, engine.radix.total_size)

    engine.events.subscribe(watch)
    t0 = time.perf_counter()
    outs = engine.serve(requests, schedule=schedule if cache_tokens else "fcfs", speculate=speculate, k=k)
    run.seconds = time.perf_counter() - t0
    for out in outs:
        run.prompt_tokens += out.stats.prompt_tokens
        run.cached_tokens += out.stats.cached_tokens
        run.new_tokens += out.stats.new_tokens
        run.cache_s += out.stats.cache_s
        run.outputs.append(out.tokens)
    run.peak_cached = peak
    return run


def chat_once(pair: Pair, conversations, cache_tokens: int, speculate, k) -> BenchRun:
    """Conversations advance one turn each, round robin, as concurrent users would."""
    engine = Engine(pair, cache_tokens=cache_tokens)
    chats = [Chat(engine, system=c.system) for c in conversations]
    run = BenchRun(outputs=[[] for _ in chats])
    t0 = time.perf_counter()
    for turn in range(max(len(c.messages) for c in conversations)):
        for chat, conv, out in zip(chats, conversations, run.outputs):
            if turn < len(conv.messages):
                g = chat.say(conv.messages[turn], conv.max_new_tokens, speculate=speculate, k=k)
                run.prompt_tokens += g.stats.prompt_tokens
                run.cached_tokens += g.stats.cached_tokens
                run.new_tokens += g.stats.new_tokens
                run.cache_s += g.stats.cache_s
                out.append(g.tokens)
                if engine.radix is not None:
                    run.peak_cached = max(run.peak_cached, engine.radix.total_size)
    run.seconds = time.perf_counter() - t0
    return run


def check_workloads(names) -> None:
    """Refuse names that are not workloads, before anything runs."""
    unknown = [n for n in names if n not in wl.WORKLOADS]
    if unknown:
        raise ValueError(f"workloads {unknown} are not workloads; use some of {list(wl.WORKLOADS)}")


def bench(pair: Pair, names=("system_prompt", "few_shot", "multi_turn", "tree_of_thought", "no_reuse"),
          cache_tokens: int = 16384, rounds: int = 3, speculate=None, k=2, progress: bool = True) -> dict:
    from tqdm.auto import tqdm

    import dataclasses
    check_workloads(names)
    fixed = dataclasses.replace(pair, eos_token_id=None)  # equal work with the cache on and off
    result = {"device": str(pair.device), "pair": pair.name, "cache_tokens": cache_tokens, "rounds": rounds,
              "speculate": speculate, "workloads": {}}
    configs = [("off", 0, "fcfs")] + [(s, cache_tokens, s) for s in SCHEDULES]
    bar = tqdm(total=len(names) * rounds * len(configs), desc="bench radix", disable=not progress)
    watch = Watch()
    for name in names:
        workload = wl.get(name)
        runs: dict[str, BenchRun] = {}
        for r in range(rounds):
            for label, budget, schedule in configs[r % len(configs):] + configs[:r % len(configs)]:
                if workload.conversations and schedule != "fcfs":
                    bar.update(1)
                    continue
                if workload.conversations:
                    run = chat_once(fixed, workload.conversations, budget, speculate, k)
                else:
                    run = serve_once(fixed, workload.requests, budget, schedule, speculate, k)
                total = runs.setdefault(label, BenchRun(outputs=run.outputs))
                total.seconds += run.seconds
                total.cache_s += run.cache_s
                total.prompt_tokens, total.cached_tokens = run.prompt_tokens, run.cached_tokens
                total.new_tokens = run.new_tokens
                total.peak_cached = max(total.peak_cached, run.peak_cached)
                bar.update(1)
        best = wl.best_hit_rate(workload.tokens(fixed))
        off = runs["off"]
        rows = []
        for label, run in runs.items():
            rows.append({
                "config": "cache off" if label == "off" else f"cache on, {label}",
                "seconds": round(run.seconds / rounds, 4),
                "throughput_ratio": off.seconds / run.seconds,
                "hit_rate": run.cached_tokens / run.prompt_tokens if run.prompt_tokens else 0.0,
                "prefill_computed": run.prompt_tokens - run.cached_tokens,
                "prefill_saved": run.cached_tokens,
                "peak_cached_tokens": run.peak_cached,
                "cache_time_share": run.cache_s / run.seconds,
                "outputs_identical_to_cache_off": run.outputs == off.outputs,
            })
        result["workloads"][name] = {"description": workload.description, "best_hit_rate": best,
                                     "prompt_tokens": off.prompt_tokens, "rows": rows}
    result["machine"] = watch.stop().as_dict()
    bar.close()
    return result


def markdown(result: dict) -> str:
    lines = [f"device {result['device']}, pair {result['pair']}, budget {result['cache_tokens']} tokens, "
             f"mean of {result['rounds']} interleaved rounds, speculation: {result['speculate']}"]
    for name, w in result["workloads"].items():
        best = w["best_hit_rate"]
        lines += ["", f"**{name}**: {w['description']} ({w['prompt_tokens']} prompt tokens"
                  + (f", best possible hit rate {best:.1%})" if best is not None else ")"), ""]
        lines += table(["config", "throughput vs off", "hit rate", "of best", "prefill computed", "saved",
                        "peak cached", "cache time", "same outputs"],
                       [[r["config"], f"{r['throughput_ratio']:.2f}x", f"{r['hit_rate']:.1%}",
                         f"{r['hit_rate'] / best:.0%}" if best else "", r["prefill_computed"], r["prefill_saved"],
                         r["peak_cached_tokens"], f"{r['cache_time_share']:.2%}",
                         r["outputs_identical_to_cache_off"]] for r in w["rows"]])
    if warning(result.get("machine")):
        lines += ["", warning(result["machine"])]
    return "\n".join(lines)
