"""`teachspec bench serving`: teachspec and vLLM on the same pair, the same prompts, greedy, in one run.

Three vLLM servers are started side by side on the bundled pair (`teachspec.serving.start_vllm`): plain decoding,
the pair's draft model at k = 3, and prompt lookup at k = 3. Then, prompt by prompt, every method decodes the same
prompt in turn, one request at a time, so machine noise hits them alike:

    teachspec   plain, draft model k = 3, draft model adaptive     (the engine, radix cache off: every method
                                                                    computes its own prefill)
    vLLM        plain, draft model k = 3, prompt lookup k = 3       (over HTTP; EOS ignored on both sides so every
                                                                    method decodes the same number of tokens)

Reported per method: tokens per second of one request (new tokens over wall time, prefill included; for vLLM the
time includes the HTTP round trip), the speedup over teachspec's plain decoding, alpha and tokens per target pass
over the steps after the first (teachspec's from its Stats, vLLM's from its counters), and whether every greedy
output was identical to teachspec's plain one. Then what a serving engine is for: vLLM's throughput with 8 and
32 requests in flight at once (other prompts of the same kind), which one request at a time never shows. Last,
the four example programs on the draft-model server (a batch's runs in flight at once) against the local engine:
the same variables?, and each side's prefix-cache hit rate (vLLM's from its /metrics). The one-request rows are
watched (`teachspec.busy`): when other programs kept the CPUs busy, the table says so.
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor

from teachspec.busy import Watch, warning
from teachspec.engine import Engine
from teachspec.models.pair import Pair
from teachspec.program import run_batch
from teachspec.program.examples import EXAMPLES
from teachspec.serving import RemoteEngine, Watcher, metrics, start_vllm
from teachspec.stats import Stats

SERVERS = {"vLLM plain": None, "vLLM draft model, k = 3": "model", "vLLM prompt lookup, k = 3": "ngram"}
LOCAL = {"teachspec plain": dict(speculate=None), "teachspec draft model, k = 3": dict(speculate="model", k=3),
         "teachspec draft model, adaptive": dict(speculate="model", k="adaptive")}


def bench(pair: Pair, prompts: list[list[int]], batch_prompts: list[list[int]], n: int = 96,
          concurrency: tuple[int, ...] = (8, 32), progress: bool = True) -> dict:
    from tqdm.auto import tqdm

    result = {"pair": pair.name, "prompts": len(prompts), "new_tokens": n, "methods": {}, "batched": {}}
    started = {}
    try:
        for name, speculate in SERVERS.items():
            server = start_vllm(pair.name, speculate=speculate, k=3)
            started[name] = (server, Watcher(server).start(), RemoteEngine(server, pair))
        engine = Engine(dataclasses.replace(pair, eos_token_id=None), cache_tokens=0)  # n tokens, as ignore_eos
        for options in LOCAL.values():  # warm up: the first pass of each (kernels, allocations) is not timed
            engine.generate(prompts[0], 8, **options)
        for _, _, remote in started.values():
            remote.generate(prompts[0], 8, ignore_eos=True)
        times = {name: 0.0 for name in [*LOCAL, *SERVERS]}
        outputs = {name: [] for name in times}
        spent = {name: Stats() for name in LOCAL}
        counted = {name: watcher.settle().counters for name, (_, watcher, _) in started.items()}
        bar = tqdm(total=len(prompts) * len(times), desc="bench serving", disable=not progress)
        watch = Watch()
        for ids in prompts:
            for name, options in LOCAL.items():
                t0 = time.perf_counter()
                out = engine.generate(ids, n, **options)
                times[name] += time.perf_counter() - t0
                outputs[name].append(out.tokens)
                _add(spent[name], out.stats.decoding)
                bar.update()
            for name, (_, _, remote) in started.items():
                t0 = time.perf_counter()
                outputs[name].append(remote.generate(ids, n, ignore_eos=True).tokens)
                times[name] += time.perf_counter() - t0
                bar.update()
        bar.close()
        reference = outputs["teachspec plain"]
        for name in times:
            tokens = sum(len(o) for o in outputs[name])
            result["methods"][name] = {"tokens_per_s": tokens / times[name],
                                       "speedup": times["teachspec plain"] / times[name],
                                       "identical": outputs[name] == reference}
        numbers = {name: s for name, s in spent.items() if s.drafts}
        for name, (_, watcher, _) in started.items():
            if SERVERS[name]:
                numbers[name] = metrics.stats(metrics.difference(watcher.settle().counters, counted[name]))
        for name, s in numbers.items():
            result["methods"][name].update(alpha=s.alpha, acceptance_per_position=s.acceptance_per_position,
                                           tokens_per_target_pass=s.tokens_per_target_pass)
        result["machine"] = watch.stop().as_dict()
        for name in ("vLLM plain", "vLLM draft model, k = 3"):
            remote = started[name][2]
            result["batched"][name] = {c: _throughput(remote, batch_prompts[:c], n) for c in concurrency}
        server, watcher, remote = started["vLLM draft model, k = 3"]
        result["programs"] = {name: _programs(pair, example, watcher, remote) for name, example in EXAMPLES.items()}
    finally:
        for server, watcher, _ in started.values():
            watcher.stop()
            server.stop()
    result["all_identical"] = all(m["identical"] for m in result["methods"].values()) and all(
        r["identical"] for r in result["programs"].values())
    return result


def _add(total: Stats, s: Stats) -> None:
    for name in ("new_tokens", "target_passes", "drafts", "drafted", "accepted", "rejected"):
        setattr(total, name, getattr(total, name) + getattr(s, name))
    for i, (a, d) in enumerate(zip(s.accepted_per_position, s.drafted_per_position)):
        if i == len(total.accepted_per_position):
            total.accepted_per_position.append(0)
            total.drafted_per_position.append(0)
        total.accepted_per_position[i] += a
        total.drafted_per_position[i] += d


def _programs(pair: Pair, example: tuple, watcher: Watcher, remote: RemoteEngine) -> dict:
    """One example program's batch on the server (its runs in flight at once) and on the local engine (greedy):
    the same variables?, and the prefix-cache hit rate each reports (the server's from its own counters)."""
    program, make_arguments, _ = example
    arguments = make_arguments(encode=pair)
    local = run_batch(program, arguments, engine=Engine(pair), speculate=None)
    before = watcher.settle().counters
    t0 = time.perf_counter()
    there = run_batch(program, arguments, engine=remote)
    seconds = time.perf_counter() - t0
    spent = metrics.difference(watcher.settle().counters, before)
    calls = [c for s in local for c in s.run.calls]
    prompt = sum(c.prompt_tokens for c in calls)
    return {"runs": len(arguments), "identical": [s.variables for s in there] == [s.variables for s in local],
            "server_hit_rate": spent["prefix_hits"] / spent["prefix_queries"] if spent["prefix_queries"] else 0.0,
            "local_hit_rate": sum(c.cached_tokens for c in calls) / prompt if prompt else 0.0,
            "server_seconds": seconds}


def _throughput(remote: RemoteEngine, prompts: list[list[int]], n: int) -> dict:
    """All prompts sent at once, each its own request: tokens per second over the whole batch."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        outs = list(pool.map(lambda ids: remote.generate(ids, n, ignore_eos=True), prompts))
    seconds = time.perf_counter() - t0
    return {"requests": len(prompts), "tokens_per_s": sum(len(o.tokens) for o in outs) / seconds}


def markdown(result: dict) -> str:
    lines = [f"pair {result['pair']}, {result['prompts']} prompts x {result['new_tokens']} new tokens, greedy, one "
             f"request at a time, methods interleaved prompt by prompt", "",
             "| engine, method | tokens/s (one request) | vs teachspec plain | alpha | tokens per target pass | "
             "identical to teachspec plain |", "|---|---|---|---|---|---|"]
    for name, m in result["methods"].items():
        alpha = f"{m['alpha']:.2f}" if "alpha" in m else ""
        per_pass = f"{m['tokens_per_target_pass']:.2f}" if "tokens_per_target_pass" in m else ""
        lines.append(f"| {name} | {m['tokens_per_s']:.0f} | {m['speedup']:.2f}x | {alpha} | {per_pass} | "
                     f"{m['identical']} |")
    lines += ["", "| vLLM, many requests at once | requests in flight | tokens/s (all requests) |", "|---|---|---|"]
    for name, rows in result["batched"].items():
        for c, row in rows.items():
            lines.append(f"| {name} | {c} | {row['tokens_per_s']:.0f} |")
    lines += ["", "| program on the server (vLLM, draft model) | runs | same variables as teachspec | prefix-cache hit "
              "rate, vLLM's /metrics | teachspec's radix tree |", "|---|---|---|---|---|"]
    for name, r in result.get("programs", {}).items():
        lines.append(f"| {name} | {r['runs']} | {r['identical']} | {r['server_hit_rate']:.1%} | "
                     f"{r['local_hit_rate']:.1%} |")
    lines += ["", f"every greedy output identical across the engines: {result['all_identical']}"]
    if warning(result.get("machine")):
        lines += ["", warning(result["machine"])]
    return "\n".join(lines)
