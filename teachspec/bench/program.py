"""`teachspec bench program`: what the radix tree buys a structured program, cache on against cache off.

Each example program of `teachspec.program.examples` runs as one batch (`run_batch`) on a fresh engine with the
cache off and on a fresh engine with it on, the two interleaved over a few rounds (alternating which goes first)
so that machine noise hits them alike. Reported per example:

- throughput: the batch's wall time with the cache off over its wall time with it on (same calls, same work);
- hit rate: prompt tokens served from the cache / prompt tokens the target had to see, over every call;
- whether every variable of every run came out the same with the cache on and off (greedy decoding).

The same `compare` runs the examples in notebook 8, on smaller arguments. The run is watched (`teachspec.busy`):
when other programs kept the CPUs busy, the table says so.
"""

from __future__ import annotations

import time

from teachspec.bench.table import table
from teachspec.busy import Watch, warning
from teachspec.engine import Engine
from teachspec.models.pair import Pair
from teachspec.program import run_batch
from teachspec.program.examples import EXAMPLES


def batch_once(pair: Pair, program, arguments: list[dict], cache_tokens: int, speculate, k) -> dict:
    engine = Engine(pair, cache_tokens=cache_tokens)
    t0 = time.perf_counter()
    states = run_batch(program, arguments, engine=engine, speculate=speculate, k=k)
    seconds = time.perf_counter() - t0
    calls = [c for s in states for c in s.run.calls]
    return {"seconds": seconds, "calls": sum(c.kind in ("gen", "select") for c in calls),
            "prompt_tokens": sum(c.prompt_tokens for c in calls),
            "cached_tokens": sum(c.cached_tokens for c in calls),
            "new_tokens": sum(c.new_tokens for c in calls),
            "outputs": [s.variables for s in states]}


def compare(pair: Pair, program, arguments: list[dict], rounds: int = 1, cache_tokens: int = 16384,
            speculate: str | None = "model", k=2, progress=None) -> dict:
    """Run `program` over `arguments` with the cache off and on, interleaved `rounds` times; the means."""
    total = {"off": [], "on": []}
    for r in range(rounds):
        for label in ("off", "on") if r % 2 == 0 else ("on", "off"):
            total[label].append(batch_once(pair, program, arguments, cache_tokens if label == "on" else 0,
                                           speculate, k))
            if progress is not None:
                progress.update(1)
    off, on = total["off"], total["on"]
    seconds_off, seconds_on = sum(x["seconds"] for x in off) / rounds, sum(x["seconds"] for x in on) / rounds
    return {"runs": len(arguments), "calls": on[0]["calls"], "prompt_tokens": on[0]["prompt_tokens"],
            "new_tokens": on[0]["new_tokens"], "seconds_off": round(seconds_off, 4),
            "seconds_on": round(seconds_on, 4), "throughput_ratio": seconds_off / seconds_on,
            "hit_rate": on[0]["cached_tokens"] / on[0]["prompt_tokens"] if on[0]["prompt_tokens"] else 0.0,
            "hit_rate_off": off[0]["cached_tokens"] / off[0]["prompt_tokens"] if off[0]["prompt_tokens"] else 0.0,
            "outputs_identical": all(x["outputs"] == off[0]["outputs"] for x in off + on)}


def check_examples(names) -> None:
    """Refuse names that are not example programs, before anything runs."""
    unknown = [n for n in names if n not in EXAMPLES]
    if unknown:
        raise ValueError(f"examples {unknown} are not example programs; use some of {list(EXAMPLES)}")


def bench(pair: Pair, names=tuple(EXAMPLES), rounds: int = 2, cache_tokens: int = 16384,
          speculate: str | None = "model", k=2, questions: int = 8, progress: bool = True) -> dict:
    from tqdm.auto import tqdm

    check_examples(names)
    result = {"device": str(pair.device), "pair": pair.name, "rounds": rounds, "cache_tokens": cache_tokens,
              "speculate": speculate, "k": k, "examples": {}}
    bar = tqdm(total=len(names) * rounds * 2, desc="bench program", disable=not progress)
    watch = Watch()
    for name in names:
        program, make_arguments, description = EXAMPLES[name]
        arguments = make_arguments(questions, encode=pair) if name == "classify" else make_arguments(encode=pair)
        result["examples"][name] = {"description": description,
                                    **compare(pair, program, arguments, rounds, cache_tokens, speculate, k, bar)}
    result["machine"] = watch.stop().as_dict()
    bar.close()
    return result


def markdown(result: dict) -> str:
    lines = [f"device {result['device']}, pair {result['pair']}, budget {result['cache_tokens']} tokens, mean of "
             f"{result['rounds']} interleaved rounds, speculation: {result['speculate']} (k={result['k']})", ""]
    lines += table(["program", "runs", "calls", "prompt tokens", "hit rate", "cache off (s)", "cache on (s)",
                    "throughput, on vs off", "same outputs"],
                   [[name, r["runs"], r["calls"], r["prompt_tokens"], f"{r['hit_rate']:.1%}", f"{r['seconds_off']:.2f}",
                     f"{r['seconds_on']:.2f}", f"{r['throughput_ratio']:.2f}x", r["outputs_identical"]]
                    for name, r in result["examples"].items()])
    if warning(result.get("machine")):
        lines += ["", warning(result["machine"])]
    return "\n".join(lines)
