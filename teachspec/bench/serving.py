"""`teachspec bench serving`: teachspec and vLLM on the same pair, the same prompts, greedy, in one run.

teachspec's methods decode the prompts first, interleaved prompt by prompt so machine noise hits them alike, with
no server running; then four vLLM servers on the bundled pair (`teachspec.serving.start_vllm`), one after
another and each alone on the machine: plain decoding, the pair's draft model at k = 3, prompt lookup at k = 3,
suffix decoding at k = 16 (the last only where vLLM's Python imports arctic-inference, which vLLM's method "suffix"
runs: teachspec.serving.launch.ARCTIC_INSTALL; without it the table says it was left out, and why).
(A server does not share the machine well: after each step its OpenMP threads spin a while, waiting for more
work, and slow whatever runs right after.) Every method decodes the same prompts one request at a time:

    teachspec   plain, draft model k = 3, draft model adaptive,    (the engine, radix cache off: every method
                suffix decoding k = 16                              computes its own prefill)
    vLLM        plain, draft model k = 3, prompt lookup k = 3,      (over HTTP; EOS ignored on both sides so every
                suffix decoding k = 16                              method decodes the same number of tokens)

Both suffix rows keep their tree of earlier outputs across the prompts (the engine's SuffixCache, vLLM's global
tree), with the same depth, factor and min_prob; they still guess differently at ties and on the prefill step
(vLLM guesses nothing there), tests/serving/test_suffix_oracle.py.

Reported per method: tokens per second of one request (new tokens over wall time, prefill included; for vLLM the
time includes the HTTP round trip), the speedup over teachspec's plain decoding, alpha and tokens per target pass
over the steps after the first (teachspec's from its Stats, vLLM's from its counters), and whether every greedy
output was identical to teachspec's plain one. Then what a serving engine is for: vLLM's throughput with 8 and
32 requests in flight at once (other prompts of the same kind), which one request at a time never shows. Last,
the four example programs on the draft-model server (a batch's runs in flight at once) against the local engine:
the same variables?, and each side's prefix-cache hit rate (vLLM's from its /metrics). teachspec's rows are
watched (`teachspec.busy`): when other programs kept the CPUs busy, the table says so.
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor

from teachspec.bench.program import batch_once
from teachspec.bench.table import table
from teachspec.busy import Watch, warning
from teachspec.engine import Engine
from teachspec.models.pair import Pair
from teachspec.program import run_batch
from teachspec.program.examples import EXAMPLES
from teachspec.serving import RemoteEngine, Watcher, launch, metrics, start_vllm, vllm_python
from teachspec.stats import Stats

SERVERS = {"vLLM plain": (None, 3), "vLLM draft model, k = 3": ("model", 3),  # name -> (speculate, k)
           "vLLM prompt lookup, k = 3": ("ngram", 3), "vLLM suffix decoding, k = 16": ("suffix", 16)}
LOCAL = {"teachspec plain": dict(speculate=None), "teachspec draft model, k = 3": dict(speculate="model", k=3),
         "teachspec draft model, adaptive": dict(speculate="model", k="adaptive"),
         "teachspec suffix decoding, k = 16": dict(speculate="suffix", k=16)}


def bench(pair: Pair, prompts: list[list[int]], batch_prompts: list[list[int]], n: int = 96,
          concurrency: tuple[int, ...] = (8, 32), progress: bool = True) -> dict:
    from tqdm.auto import tqdm

    result = {"pair": pair.name, "prompts": len(prompts), "new_tokens": n, "methods": {}, "batched": {},
              "programs": {}, "left_out": {}}
    why = _suffix_missing()
    servers = {name: sk for name, sk in SERVERS.items() if sk[0] != "suffix" or why is None}
    result["left_out"] = {name: why for name in SERVERS if name not in servers}
    bar = tqdm(total=len(prompts) * (len(LOCAL) + len(servers)), desc="bench serving", disable=not progress)
    watch = Watch()
    local = _teachspec(pair, prompts, n, bar)
    result["machine"] = watch.stop().as_dict()
    served = {}
    for name, (speculate, k) in servers.items():
        served[name] = _vllm(pair, speculate, k, prompts, batch_prompts, n, concurrency, bar)
    bar.close()
    reference = local["teachspec plain"]["outputs"]
    plain_s = local["teachspec plain"]["seconds"]
    for name, m in {**local, **served}.items():
        row = {"tokens_per_s": sum(map(len, m["outputs"])) / m["seconds"], "speedup": plain_s / m["seconds"],
               "identical": m["outputs"] == reference}
        if m["stats"] is not None and m["stats"].drafts:
            s = m["stats"]
            row.update(alpha=s.alpha, acceptance_per_position=s.acceptance_per_position,
                       tokens_per_target_pass=s.tokens_per_target_pass)
        result["methods"][name] = row
        if m.get("batched"):
            result["batched"][name] = m["batched"]
        result["programs"].update(m.get("programs", {}))
    result["all_identical"] = all(m["identical"] for m in result["methods"].values()) and all(
        r["identical"] for r in result["programs"].values())
    return result


def _suffix_missing() -> str | None:
    """Why vLLM's suffix decoding cannot run here (None when it can): start_vllm does not take it, or vLLM's
    Python cannot import arctic-inference."""
    if "suffix" not in launch.SPECULATE:
        return "teachspec.speculate does not mark the suffix drafter as one vLLM serves"
    why = launch.arctic_missing(vllm_python())
    return None if why is None else f"vLLM's Python cannot import arctic-inference ({why})"


def _teachspec(pair: Pair, prompts: list[list[int]], n: int, bar) -> dict:
    """teachspec's methods, interleaved prompt by prompt, with no server running (its OpenMP threads spin for a
    while after each step, which would slow whatever runs right after it)."""
    engine = Engine(dataclasses.replace(pair, eos_token_id=None), cache_tokens=0)  # n tokens, as ignore_eos
    for options in LOCAL.values():  # warm up: the first pass of each (kernels, allocations) is not timed
        engine.generate(prompts[0], 8, **options)
    out = {name: {"seconds": 0.0, "outputs": [], "stats": Stats()} for name in LOCAL}
    for ids in prompts:
        for name, options in LOCAL.items():
            t0 = time.perf_counter()
            g = engine.generate(ids, n, **options)
            out[name]["seconds"] += time.perf_counter() - t0
            out[name]["outputs"].append(g.tokens)
            out[name]["stats"].add(g.stats.decoding)
            bar.update()
    return out


def _vllm(pair: Pair, speculate: str | None, k: int, prompts: list[list[int]], batch_prompts: list[list[int]],
          n: int, concurrency: tuple[int, ...], bar) -> dict:
    """One vLLM server, alone on the machine: the prompts one request at a time, then `concurrency` at once, then
    (for the draft model) the example programs."""
    with start_vllm(pair.name, speculate=speculate, k=k) as server, Watcher(server) as watcher:
        remote = RemoteEngine(server, pair)
        remote.generate(prompts[0], 8, ignore_eos=True)  # warm up
        before = watcher.settle().counters
        out = {"seconds": 0.0, "outputs": [], "stats": None}
        for ids in prompts:
            t0 = time.perf_counter()
            out["outputs"].append(remote.generate(ids, n, ignore_eos=True).tokens)
            out["seconds"] += time.perf_counter() - t0
            bar.update()
        if speculate is not None:
            out["stats"] = metrics.stats(metrics.difference(watcher.settle().counters, before))
        if speculate != "ngram":
            out["batched"] = {c: _throughput(remote, batch_prompts[:c], n) for c in concurrency}
        if speculate == "model":
            out["programs"] = {name: _programs(pair, example, watcher, remote) for name, example in EXAMPLES.items()}
    return out


def _programs(pair: Pair, example: tuple, watcher: Watcher, remote: RemoteEngine) -> dict:
    """One example program's batch on the server (its runs in flight at once) and on the local engine (greedy):
    the same variables?, and the prefix-cache hit rate each reports (the server's from its own counters)."""
    program, make_arguments, _ = example
    arguments = make_arguments(encode=pair)
    local = batch_once(pair, program, arguments, cache_tokens=8192, speculate=None, k=0)  # the engine's default cache
    before = watcher.settle().counters
    t0 = time.perf_counter()
    there = run_batch(program, arguments, engine=remote)
    seconds = time.perf_counter() - t0
    spent = metrics.difference(watcher.settle().counters, before)
    return {"runs": len(arguments), "identical": [s.variables for s in there] == local["outputs"],
            "server_hit_rate": spent["prefix_hits"] / spent["prefix_queries"] if spent["prefix_queries"] else 0.0,
            "local_hit_rate": local["cached_tokens"] / local["prompt_tokens"] if local["prompt_tokens"] else 0.0,
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
             f"request at a time; teachspec's methods interleaved prompt by prompt, then each vLLM server alone", ""]
    lines += table(["engine, method", "tokens/s (one request)", "vs teachspec plain", "alpha", "tokens per target pass",
                    "identical to teachspec plain"],
                   [[name, f"{m['tokens_per_s']:.0f}", f"{m['speedup']:.2f}x",
                     f"{m['alpha']:.2f}" if "alpha" in m else "",
                     f"{m['tokens_per_target_pass']:.2f}" if "tokens_per_target_pass" in m else "", m["identical"]]
                    for name, m in result["methods"].items()])
    lines += [""] + table(["vLLM, many requests at once", "requests in flight", "tokens/s (all requests)"],
                          [[name, c, f"{row['tokens_per_s']:.0f}"]
                           for name, rows in result["batched"].items() for c, row in rows.items()])
    lines += [""] + table(["program on the server (vLLM, draft model)", "runs", "same variables as teachspec",
                           "prefix-cache hit rate, vLLM's /metrics", "teachspec's radix tree"],
                          [[name, r["runs"], r["identical"], f"{r['server_hit_rate']:.1%}",
                            f"{r['local_hit_rate']:.1%}"] for name, r in result.get("programs", {}).items()])
    lines += [""] * bool(result.get("left_out")) + [f"left out: {name}: {why}"
                                                    for name, why in result.get("left_out", {}).items()]
    lines += ["", f"every greedy output identical across the engines: {result['all_identical']}"]
    if warning(result.get("machine")):
        lines += ["", warning(result["machine"])]
    return "\n".join(lines)
