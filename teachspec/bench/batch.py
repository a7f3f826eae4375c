"""`teachspec bench batch`: where speculation stops paying as the batch grows, predicted here, measured on vLLM.

Lecture 13 predicts it from this engine's pass costs: with b requests in every pass, a step of draft length k costs
k draft passes over b positions and one target pass over b (k + 1), so (`theory.batch_speedup`)

    speedup(b) = E[tokens](alpha, k) / (k c_b + cost(b (k + 1)) / cost(b)),    c_b = `theory.batch_c`,

and past some b it falls below 1 (`theory.batch_crossover`). This bench checks that against a real serving engine:

    (a) this engine's pass costs (`pass_times`): one target pass over n positions on the requests' context, and
        one draft pass, the median of interleaved rounds, for every n = b m (b in `batches`, m = 1 .. k + 1); the
        same for b sequences of m positions on b copies of the context, a real batch (lecture 13, "one sequence
        is not a batch"); alpha and c from greedy runs, one request at a time (`measure_alpha_c`)
    (b) the predicted speedup at each b from either curve, the best k at each b (SmartSpec's goodput choice,
        arXiv:2406.14066) and the predicted crossover
    (c) vLLM's tokens per second, plain and with the pair's draft model at k, with b requests in flight at once,
        b growing until speculation has lost at two sizes in a row or the KV cache would not hold the batch
    (d) the measured crossover and predicted / measured

Where speculation crosses 1 between two measured batches is interpolated on log b (`crossing`), the same way for
every row, so a prediction is compared with a measurement at finer grain than the batches' doublings.

The two servers (plain, draft model) run side by side but never work at once: each round is one server's, and a
round begins only after a pause (SETTLE_S) in which the other's OpenMP threads, which spin a while after each step
waiting for more work, fall asleep; an idle vLLM server waits on its socket. So each batch size is measured in
alternating rounds, plain, draft, draft, plain, and drift in the machine weighs on both alike; a disturbance only
ever slows a round, so the faster of a server's rounds is its measure (lecture 12). Requests take the prompts in
turn (b may exceed their number: the prompts repeat), and greedy outputs must be identical in every round of both.

teachspec's measurements run before any server starts, each part watched (`teachspec.busy`).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import torch

from teachspec import kv, theory
from teachspec.bench.table import table
from teachspec.busy import Watch, warning
from teachspec.device import synchronize
from teachspec.engine import Engine
from teachspec.models.pair import BUNDLED, Pair
from teachspec.serving import RemoteEngine, VllmServer, metrics, start_vllm, vllm_python
from teachspec.stats import Stats

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)  # 128: the most sequences vLLM's CPU server runs at once by default
ROUNDS = 7          # rounds of every pass shape; the first warms up, the median of the rest counts
SETTLE_S = 1.0      # pause before each server round: the other server's OpenMP threads stop spinning
LOSSES = 2          # speculation losing at this many batch sizes in a row ends the sweep

Shape = tuple[str, int, int]  # ("target" or "draft", b sequences, m new positions in each)


# -- this engine: the pass costs, alpha and c ------------------------------------------------------------------------

def pass_times(pair: Pair, context: list[int], shapes: Iterable[Shape], rounds: int = ROUNDS) -> dict[Shape, list]:
    """ms of one pass over m new positions in each of b sequences, each sequence on its own copy of `context` (as
    a batch of b requests reads b caches), for every (model, b, m) in shapes: {shape: [ms of each timed round]}.

    The shapes take turns within every round, so a machine that drifts slows all of them alike; round 0 warms up
    and is dropped. The new tokens are random (which tokens does not change the time), and the logits of every
    new position are computed, as verification needs them. Lecture 13's cells time the same passes."""
    shapes = list(shapes)
    caches = {}  # (model, b) -> the context cached b times: (b, heads, len(context), head_dim) in every layer
    for name, b, _ in shapes:
        if (name, b) not in caches:
            model = getattr(pair, name)
            cache = kv.new_cache(model)
            kv.forward(model, context, cache, 1, pair.vocab_size)
            if b > 1:
                cache.batch_repeat_interleave(b)
            caches[name, b] = cache
    times = {shape: [] for shape in shapes}
    for r in range(rounds):
        for shape in shapes:
            name, b, m = shape
            model, cache = getattr(pair, name), caches[name, b]
            new = torch.randint(0, pair.vocab_size, (b, m), device=pair.device)  # (b, m)
            synchronize(pair.device)
            start = time.perf_counter()
            with torch.inference_mode():  # logits of every new position: (b, m, vocab)
                model(input_ids=new, use_cache=True, logits_to_keep=m, **{kv.cache_keyword(type(model)): cache})
            synchronize(pair.device)
            if r:
                times[shape].append(1e3 * (time.perf_counter() - start))
            kv.crop_to(cache, len(context))  # forget the new positions: every round starts from the context
    return times


def measure_alpha_c(pair: Pair, prompts: Sequence[list[int]], n: int, k: int) -> tuple[float, float]:
    """(alpha, c) from greedy runs of `prompts`, one request at a time, n tokens each, over the steps after the
    first (lecture 4): alpha = accepted / judged guesses with the draft model at k; c = a draft pass over a plain
    step's target pass (Leviathan et al.'s cost ratio). Lecture 13's first cell measures the same."""
    engine = Engine(dataclasses.replace(pair, eos_token_id=None), cache_tokens=0)  # n tokens each: EOS ignored
    engine.generate(prompts[0], 8, speculate="model", k=k)  # warm up: the first passes are not timed
    spec, plain = Stats(), Stats()
    for ids in prompts:
        spec.add(engine.generate(ids, n, speculate="model", k=k).stats.decoding)
        plain.add(engine.generate(ids, n, speculate=None).stats.decoding)
    return spec.alpha, (spec.draft_s / spec.draft_passes) / (plain.target_s / plain.target_passes)


def predict(pair: Pair, prompts: Sequence[list[int]], n: int, batches: Sequence[int], k: int) -> dict:
    """Part (a) and (b): alpha, c and both pass-cost curves measured here, and theory's speedup at each batch."""
    context_len = round(statistics.mean(map(len, prompts)) + n / 2)  # a request's context, midway through decoding
    context = (list(prompts[0]) * context_len)[:context_len]
    m_all = range(1, k + 2)  # k' + 1 positions per request for every k' = 0 .. k: the best k needs them all
    sizes = sorted({1, *batches})  # b = 1 too: c is measured there, and c_b scales it from there
    watch = Watch()
    alpha, c = measure_alpha_c(pair, prompts[:3], n, k)
    one = pass_times(pair, context, sorted({("target", 1, b * m) for b in sizes for m in m_all} |
                                           {("draft", 1, b) for b in sizes}))
    real = {}
    for b in sizes:  # one batch's caches at a time: 128 contexts of the bundled target take over 200 MB
        real |= pass_times(pair, context, [("target", b, m) for m in m_all] + [("draft", b, 1)])
    check = watch.stop()
    for name, times in (*one.items(), *real.items()):
        if name[0] == "target":
            check.repeats([min(times), max(times)])
    one_ms = {shape[2]: statistics.median(t) for shape, t in one.items() if shape[0] == "target"}  # n -> ms
    one_draft = {shape[2]: statistics.median(t) for shape, t in one.items() if shape[0] == "draft"}
    real_ms = {shape[1:]: statistics.median(t) for shape, t in real.items() if shape[0] == "target"}  # (b, m) -> ms
    real_draft = {shape[1]: statistics.median(t) for shape, t in real.items() if shape[0] == "draft"}
    plain_batch = {b: real_ms[b, 1] for b in sizes}  # r -> a plain pass of r requests: a function of r alone
    rows = []
    for b in batches:
        def batch_cost(positions: int, b: int = b) -> float:  # this batch's pass over b m positions, m of each
            return real_ms[b, positions // b]

        c_one, c_real = theory.batch_c(c, b, one_ms.get, one_draft.get), theory.batch_c(c, b, plain_batch.get,
                                                                                           real_draft.get)
        rows.append({"b": b, "target_ms": one_ms[b], "verify_ms": one_ms[b * (k + 1)], "draft_ms": one_draft[b],
                     "batch_target_ms": real_ms[b, 1], "batch_verify_ms": real_ms[b, k + 1],
                     "batch_draft_ms": real_draft[b], "c_b": c_one,
                     # a step of k guesses in plain passes, the speedup's denominator, k c_b + cost(b (k+1)) / cost(b)
                     "step_cost": k * c_one + one_ms[b * (k + 1)] / one_ms[b],
                     "step_cost_batch": k * c_real + real_ms[b, k + 1] / real_ms[b, 1],
                     "predicted": theory.batch_speedup(alpha, k, c, one_ms.get, b, one_draft.get),
                     "predicted_batch": theory.batch_speedup(alpha, k, c_real, batch_cost, b),
                     "best_k": theory.batch_optimal_k(alpha, c, one_ms.get, b, k, one_draft.get)})
    return {"alpha": alpha, "c": c, "context": context_len, "rows": rows, "machine": check.as_dict(),
            # as [[n, ms], ...]: the ints survive JSON, where a dict's keys would come back as strings
            "pass_cost": sorted(one_ms.items()), "draft_cost": sorted(one_draft.items()),
            "first_losing": theory.batch_crossover(alpha, c, one_ms.get, k=k, batches=batches,
                                                   draft_cost=one_draft.get),
            "first_losing_best_k": theory.batch_crossover(alpha, c, one_ms.get, batches=batches, k_max=k,
                                                          draft_cost=one_draft.get)}


# -- vLLM: plain and draft model, b requests in flight ------------------------------------------------------------

def serve(pair: Pair, prompts: Sequence[list[int]], n: int, batches: Sequence[int], k: int, rounds: int,
          bar) -> dict:
    """Part (c): both servers up, rounds alternating between them at each b, until speculation loses LOSSES
    times in a row or a batch would not fit in either server's KV cache."""
    with ExitStack() as stack:
        servers = {name: stack.enter_context(server)  # stopped on leaving, however that happens
                   for name, server in _start(pair, {"plain": None, "draft": "model"}, k).items()}
        remote = {name: RemoteEngine(server, pair) for name, server in servers.items()}
        blocks = {name: _kv_blocks(r.url) for name, r in remote.items()}  # (blocks, tokens per block)
        for engine in remote.values():  # warm up: the first requests pay for allocations, not a round's
            _round(engine, [prompts[i % len(prompts)] for i in range(8)], n)
        watch, rows, losses, stopped = Watch(), [], 0, None
        for i, b in enumerate(batches):
            batch = [prompts[j % len(prompts)] for j in range(b)]
            need = {name: sum(math.ceil((len(p) + n + k) / size) for p in batch)  # blocks, none shared
                    for name, (_, size) in blocks.items()}
            short = [name for name, (have, _) in blocks.items() if need[name] > have]
            if short:
                stopped = (f"the KV cache ran out: {b} requests need {need[short[0]]} blocks, the {short[0]} server "
                           f"holds {blocks[short[0]][0]}")
                break
            order = ("plain", "draft") if i % 2 == 0 else ("draft", "plain")
            got = {"plain": [], "draft": []}
            for turn in range(rounds):  # plain, draft, draft, plain, ...: each server's rounds spread over the span
                for name in order if turn % 2 == 0 else order[::-1]:
                    time.sleep(SETTLE_S)
                    got[name].append(_round(remote[name], batch, n))
                    bar.update()
            rows.append(_point(b, got))
            preempted = sum(g["preempted"] for each in got.values() for g in each)
            losses = losses + 1 if rows[-1]["measured"] < 1 else 0
            if preempted:
                stopped = f"the KV cache ran out: vLLM preempted {preempted} requests at b = {b}"
                break
            if losses == LOSSES:
                stopped = f"speculation lost at {LOSSES} batch sizes in a row (b = {rows[-2]['b']} and {b})"
                break
        check = watch.stop()
    for row in rows:  # a server's rounds at one batch repeat one measurement: far apart, the machine moved
        for rates in row["rounds"].values():
            check.repeats([1 / rate for rate in rates])
    return {"rows": rows, "stopped": stopped or "every batch measured", "machine": check.as_dict(),
            "kv_blocks": {name: have for name, (have, _) in blocks.items()}}


def _start(pair: Pair, servers: dict[str, str | None], k: int) -> dict[str, VllmServer]:
    """Start the servers at once (a start is mostly one process importing and loading, so two take little longer
    than one on two cores); if one fails, or Ctrl-C comes, every one that did start is stopped before raising."""
    with ThreadPoolExecutor(max_workers=len(servers)) as pool:
        starting = {name: pool.submit(start_vllm, pair.name, speculate=speculate, k=k)
                    for name, speculate in servers.items()}
        try:
            return {name: future.result() for name, future in starting.items()}
        except BaseException:
            for future in starting.values():
                if future.exception() is None:  # waits for that start to end, then stops what it started
                    future.result().stop()
            raise


def _round(remote: RemoteEngine, batch: list[list[int]], n: int) -> dict:
    """Every request of `batch` sent at once, each on its own thread: tokens per second over the whole batch, the
    outputs, and what the server's counters say about the round (speculation steps, preemptions)."""
    before = metrics.read(remote.url)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(batch)) as pool:
        outputs = [g.tokens for g in pool.map(lambda ids: remote.generate(ids, n, ignore_eos=True), batch)]
    seconds = time.perf_counter() - t0
    after = metrics.read(remote.url)
    spent = metrics.difference(metrics.counters(after), metrics.counters(before))
    return {"tokens_per_s": sum(map(len, outputs)) / seconds, "outputs": outputs,
            "stats": metrics.stats(spent) if spent["drafts"] else None,
            "preempted": _sum(after, "vllm:num_preemptions_total") - _sum(before, "vllm:num_preemptions_total")}


def _point(b: int, got: dict[str, list[dict]]) -> dict:
    """One batch size: the faster round of each server, their ratio, and whether every output agreed."""
    plain, draft = (max(got[name], key=lambda g: g["tokens_per_s"]) for name in ("plain", "draft"))
    reference = got["plain"][0]["outputs"]
    spec = draft["stats"]
    return {"b": b, "plain_tokens_per_s": plain["tokens_per_s"], "draft_tokens_per_s": draft["tokens_per_s"],
            "measured": draft["tokens_per_s"] / plain["tokens_per_s"],
            # the measured speedup split as the formula splits it: tokens per step over a step's cost in plain steps
            "step_cost_vllm": spec.tokens_per_target_pass * plain["tokens_per_s"] / draft["tokens_per_s"] if spec
            else None,
            # a plain step makes one token for each of b requests: its time, the prefill shared out over the steps,
            # to set beside this engine's pass over b (which pass-cost curve does a serving engine's batch follow?)
            "plain_step_ms": 1e3 * b / plain["tokens_per_s"],
            "rounds": {name: [g["tokens_per_s"] for g in each] for name, each in got.items()},
            "alpha": spec.alpha if spec else None, "tokens_per_target_pass": spec.tokens_per_target_pass if spec
            else None, "identical": all(g["outputs"] == reference for each in got.values() for g in each)}


def _kv_blocks(url: str) -> tuple[int, int]:
    """(blocks, tokens per block) of a server's KV cache, from the labels of its vllm:cache_config_info."""
    labels = metrics.read(url)["vllm:cache_config_info"][0][0]
    return int(labels["num_gpu_blocks"]), int(labels["block_size"])


def _sum(samples: metrics.Samples, name: str) -> float:
    return sum(v for _, v in samples.get(name, []))


# -- the whole bench ------------------------------------------------------------------------------------------------

def bench(pair: Pair, prompts: Sequence[list[int]], n: int, batches: Sequence[int] = BATCHES, k: int = 3,
          rounds: int = 4, progress: bool = True) -> dict:
    """Parts (a) to (d) of the module docstring on `pair` (a bundled pair: vLLM serves it by name), greedy, n new
    tokens per request, EOS ignored. Every argument is checked before anything is measured or started."""
    from tqdm.auto import tqdm

    if not prompts or any(not p or not all(isinstance(t, int) and t >= 0 for t in p) for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty lists of token ids (ints >= 0), e.g. "
                         "[pair.encode(r.prompt) for r in docs_completion(...).requests]")
    for name, value, low in (("n", n, 1), ("k", k, 1), ("rounds", rounds, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if isinstance(batches, (str, bytes)) or not isinstance(batches, Sequence) or not batches or any(
            isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in batches) or list(batches) != sorted(
            set(batches)):
        raise ValueError(f"batches must be increasing ints >= 1 (requests in flight), got {batches!r}")
    if pair.name not in BUNDLED:
        raise ValueError(f"pair must be a bundled pair, which vLLM serves by name ({', '.join(BUNDLED)}), got "
                         f"{pair.name!r}")
    vllm_python()  # vLLM missing: a ServerError that says how to install it, before anything is measured
    batches = tuple(batches)
    predicted = predict(pair, prompts, n, batches, k)
    bar = tqdm(total=len(batches) * 2 * rounds, desc="bench batch (vLLM rounds)", disable=not progress)
    served = serve(pair, prompts, n, batches, k, rounds, bar)
    bar.close()
    measured = {row["b"]: row for row in served["rows"]}
    rows = [{**row, **measured.get(row["b"], {})} for row in predicted["rows"]]
    result = {"pair": pair.name, "new_tokens": n, "k": k, "prompts": len(prompts), "rounds": rounds,
              "alpha": predicted["alpha"], "c": predicted["c"], "context": predicted["context"], "rows": rows,
              "expected_tokens": theory.expected_tokens(predicted["alpha"], k),
              "pass_cost": predicted["pass_cost"], "draft_cost": predicted["draft_cost"],
              "stopped": served["stopped"], "kv_blocks": served["kv_blocks"],
              "machine": {"teachspec": predicted["machine"], "vllm": served["machine"]},
              "all_identical": all(row["identical"] for row in served["rows"])}
    done = [row["b"] for row in served["rows"]]
    result["crossover"] = {
        "one sequence": {"first_losing": predicted["first_losing"],
                         "at": crossing(batches, [r["predicted"] for r in rows])},
        "b sequences": {"first_losing": _first_losing(batches, [r["predicted_batch"] for r in rows]),
                        "at": crossing(batches, [r["predicted_batch"] for r in rows])},
        "vLLM": {"first_losing": _first_losing(done, [measured[b]["measured"] for b in done]),
                 "at": crossing(done, [measured[b]["measured"] for b in done])},
    }
    actual = result["crossover"]["vLLM"]["at"]
    for name in ("one sequence", "b sequences"):
        guess = result["crossover"][name]["at"]
        result["crossover"][name]["ratio"] = guess / actual if guess is not None and actual is not None else None
    result["first_losing_best_k"] = predicted["first_losing_best_k"]
    return result


def crossing(batches: Sequence[int], speedups: Sequence[float]) -> float | None:
    """Where the speedup first falls below 1: interpolated on log b between the last batch before it and the first
    below; the first batch when even it loses; None when none does."""
    for i, (b, s) in enumerate(zip(batches, speedups)):
        if s < 1:
            if i == 0:
                return float(b)
            a, r = batches[i - 1], speedups[i - 1]
            return float(a * (b / a) ** ((r - 1) / (r - s)))  # r >= 1 > s: the point of the line where it is 1
    return None


def _first_losing(batches: Sequence[int], speedups: Sequence[float]) -> int | None:
    return next((b for b, s in zip(batches, speedups) if s < 1), None)


def _speculated(row: dict) -> list[str]:
    """alpha, tokens per step and a step's cost on vLLM: blank where its counters saw no speculation step."""
    if row["alpha"] is None:
        return [""] * 3
    return [f"{row['alpha']:.2f}", f"{row['tokens_per_target_pass']:.2f}", f"{row['step_cost_vllm']:.2f}"]


def markdown(result: dict) -> str:
    k, rows = result["k"], result["rows"]
    lines = [f"pair {result['pair']}, draft model at k = {k}, {result['new_tokens']} new tokens per request "
             f"(greedy, EOS ignored), {result['prompts']} prompts taken in turn", "",
             f"Predicted here: alpha = {result['alpha']:.3f} and c = {result['c']:.3f} from greedy runs one request "
             f"at a time, so {result['expected_tokens']:.2f} tokens per step (Eq. 1); pass costs on a "
             f"{result['context']}-token context, as one sequence of all the positions or as b sequences (a real "
             f"batch); the speedup is tokens per step over a step's cost in plain passes", ""]
    lines += table(["b", "target pass over b, ms: one sequence / b sequences",
                    "over b (k + 1), ms: one sequence / b sequences", "c_b", "step, in plain passes",
                    "predicted, one sequence", "predicted, b sequences", f"best k <= {k}"],
                   [[r["b"], f"{r['target_ms']:.1f} / {r['batch_target_ms']:.1f}",
                     f"{r['verify_ms']:.1f} / {r['batch_verify_ms']:.1f}", f"{r['c_b']:.3f}",
                     f"{r['step_cost']:.2f} / {r['step_cost_batch']:.2f}", f"{r['predicted']:.2f}x",
                     f"{r['predicted_batch']:.2f}x", r["best_k"]] for r in rows])
    lines += ["", f"Measured on vLLM: b requests in flight at once, the faster of {result['rounds']} rounds per "
                  f"server, the servers' rounds alternating", ""]
    lines += table(["b", "plain tokens/s", f"draft model k = {k} tokens/s", "measured speedup",
                    "plain step, ms (b / tokens per s)", "alpha", "tokens per step",
                    "step, in plain steps", "outputs identical"],
                   [[r["b"], f"{r['plain_tokens_per_s']:.0f}", f"{r['draft_tokens_per_s']:.0f}",
                     f"{r['measured']:.2f}x", f"{r['plain_step_ms']:.1f}", *_speculated(r), r["identical"]]
                    for r in rows if "measured" in r])
    lines += [""] + table(["crossover (speculation stops paying)", "first batch that loses", "crosses 1 at b =",
                           "predicted / measured", "within 25%"],
                          [[name, x["first_losing"] or "none", f"{x['at']:.1f}" if x["at"] is not None else "beyond",
                            f"{x['ratio']:.2f}" if x.get("ratio") is not None else "",
                            abs(x["ratio"] - 1) <= 0.25 if x.get("ratio") is not None else ""]
                           for name, x in result["crossover"].items()])
    lines += ["", f"at its best k (0 .. {k}), one sequence: speculation stops paying at b = "
                  f"{result['first_losing_best_k'] or 'none measured'}",
              f"the vLLM sweep ended: {result['stopped']}; KV cache blocks: " +
              ", ".join(f"{name} {have}" for name, have in result["kv_blocks"].items()),
              f"every greedy output identical, plain and draft, in every round: {result['all_identical']}"]
    for part, machine in result["machine"].items():
        if warning(machine):
            lines += ["", f"{part}: {warning(machine)}"]
    return "\n".join(lines)
