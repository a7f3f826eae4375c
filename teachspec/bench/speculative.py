"""`teachspec bench speculative`: our speculative decoding against plain decoding and transformers, side by side.

Every method runs on the same prompts, interleaved prompt by prompt (the order rotates), so that a noisy shared
machine slows all of them alike; what the table reports are *ratios* to our plain decoding measured in that one
run. Greedy outputs are checked to be token-identical across all methods before any number is printed.

Columns:
- speedup: our plain decoding's wall time / the method's wall time, over whole requests;
- after the first token: the same ratio of time per token over the steps after each request's first. The first
  step reads the prompt (plain decoding's prefill; for speculation both models' prefill and the first
  verification), which the speedup formula leaves out; serving engines report it apart as time to first token.
  Every column below is about these steps alone; transformers does not report them, so its rows stop here;
- tok/pass: new tokens per target forward pass; alpha: accepted / judged guesses;
- c: the draft's pass time / a plain decoding step's target pass time;
- pass cost: the method's target pass time (over k + 1 tokens) / a plain decoding step's target pass time;
- predicted (paper): Leviathan et al.'s (1 - alpha^(k+1)) / ((1 - alpha)(k c + 1)) from the measured alpha and c,
  which takes a target pass over k + 1 tokens to cost what one over a single token does (a pass cost of 1);
  measured / paper is the speedup after the first token over it;
- predicted (cost-aware): the same expectation with the *measured* target pass time at this k in place of that
  constant; measured / cost-aware is what is left: the engine's own overhead.
Prompt lookup gets no prediction: its guesses are not independent (a copied stretch, once it starts, tends to go
on) and it guesses only when the context holds a match, so Eq. (1) does not describe it. The tree rows (`tree=`)
guess a tree (the draft model's, or several earlier matches as several branches) and check it all in one target
pass; their "alpha" is per judged depth of the tree, their pass cost that of a pass over every node, and they get
no prediction either (a tree's expected tokens are `theory.tree_expected_tokens`, which needs per-rank rates).
The eagle rows draft with the feature-level head (`speculate="eagle"`); their c is a head pass's time.

Where each method's time goes, per new token over whole requests (`time_split`, from the statistics the engine
records: `Stats.draft_s`, `target_s`, `wall_s`): ms in draft passes, ms in target passes (the prefill included), and
the engine's own work, the rest of the wall time (verifying, the drafter's and the policy's bookkeeping, cache
cropping, events, the radix cache). Plain decoding has no draft column; transformers reports no split.

The run is watched (`teachspec.busy`): when other programs kept the CPUs busy, the tables say so under them. Even
on a quiet machine two runs of one method do not take the same time, so one method, "ours k=2", runs twice in each
docs workload ("ours k=2, again", interleaved like the rest): how far apart its two speedups land is printed under
the table as the run's noise floor (`noise`), the smallest difference between two methods the run can tell apart.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import torch

from teachspec.bench.table import table
from teachspec.busy import Watch, warning
from teachspec.decode import decode
from teachspec.device import synchronize
from teachspec.engine import Engine
from teachspec.events import EventLog
from teachspec.models.pair import Pair
from teachspec.sampling import SamplingParams
from teachspec.stats import Stats
from teachspec.theory import expected_tokens, speedup


EAGLE_KS = (3, 5)  # the head's guesses are cheap and good: longer chains than the draft model's pay
AGAIN = "ours k=2, again"  # the same method run twice in one workload: how far two runs of one method land apart


class DiscardLog(EventLog):
    """A log that records nothing: the baseline for what recording events costs."""

    def emit(self, cls, request=-1, **fields):
        return None


@dataclass
class Row:
    method: str
    k: str = ""
    seconds: float = 0.0  # whole requests, timed around each call
    tokens: int = 0
    outputs: list = field(default_factory=list)
    # the steps after each request's first (Stats.decoding); our methods only
    decoding_s: float = 0.0
    decoding_tokens: int = 0
    target_passes: int = 0
    target_s: float = 0.0
    drafted: int = 0
    accepted: int = 0
    rejected: int = 0
    draft_passes: int = 0
    draft_s: float = 0.0
    whole: Stats = field(default_factory=Stats)  # whole requests, as the engine counted them (our methods only)

    def add(self, seconds: float, tokens: list[int], stats=None) -> None:
        self.seconds += seconds
        self.tokens += len(tokens)
        self.outputs.append(tokens)
        if stats is not None:
            self.whole.add(stats)
            after = stats.decoding
            self.decoding_s += after.wall_s
            self.decoding_tokens += after.new_tokens
            for name in ("target_passes", "target_s", "drafted", "accepted", "rejected", "draft_passes",
                         "draft_s"):
                setattr(self, name, getattr(self, name) + getattr(after, name))


# -- the methods: each returns (seconds, new tokens, stats or None) -----------------------------------------------

def ours_plain(pair: Pair, prompt, n, params, seed):
    gen = torch.Generator(device=pair.device).manual_seed(seed)
    t0 = time.perf_counter()
    tokens, _, stats = decode(pair.target, prompt, n, params, gen, pair.eos_token_id, pair.vocab_size)
    return time.perf_counter() - t0, tokens, stats


def ours(engine: Engine, speculate, k, tree: tuple[int, ...] | None = None):
    def run(pair, prompt, n, params, seed):
        t0 = time.perf_counter()
        out = engine.generate(prompt, n, temperature=params.temperature, top_k=params.top_k, top_p=params.top_p,
                              speculate=speculate, k=k, seed=seed, tree=tree)
        return time.perf_counter() - t0, out.tokens, out.stats
    return run


def hf(assisted: bool, k: int | None = None):
    """transformers' generate; assisted with its defaults (k None) or a constant k and no confidence stop."""
    def run(pair, prompt, n, params, seed):
        ids = torch.tensor([prompt], device=pair.device)
        kw = dict(max_new_tokens=n, min_new_tokens=n, eos_token_id=None, pad_token_id=0,
                  do_sample=not params.greedy, attention_mask=torch.ones_like(ids))
        if not params.greedy:
            kw.update(temperature=params.temperature, top_k=params.top_k or 0, top_p=params.top_p or 1.0)
        if assisted:
            kw["assistant_model"] = pair.draft
            config = pair.draft.generation_config
            saved = {a: getattr(config, a, None) for a in
                     ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")}
            if k is not None:
                config.num_assistant_tokens, config.num_assistant_tokens_schedule = k, "constant"
                config.assistant_confidence_threshold = 0.0
        torch.manual_seed(seed)
        t0 = time.perf_counter()
        out = pair.target.generate(ids, **kw)
        synchronize(pair.device)
        seconds = time.perf_counter() - t0
        if assisted:
            for a, v in saved.items():
                setattr(pair.draft.generation_config, a, v)
        return seconds, out[0, len(prompt):].tolist(), None
    return run


# -- running a workload -------------------------------------------------------------------------------------------

def run_workload(pair: Pair, prompts: list[list[int]], n: int, params: SamplingParams, methods: dict, seed: int,
                 progress=None) -> dict[str, Row]:
    rows = {name: Row(name, str(k)) for name, (_, k) in methods.items()}
    names = list(methods)
    for _, (fn, _) in methods.items():  # warm-up: first calls allocate and compile kernels
        fn(pair, prompts[0], 4, params, seed)
    for i, prompt in enumerate(prompts):
        for name in names[i % len(names):] + names[:i % len(names)]:
            seconds, tokens, stats = methods[name][0](pair, prompt, n, params, seed + i)
            rows[name].add(seconds, tokens, stats)
        if progress is not None:
            progress.update(1)
    return rows


def time_split(row: Row) -> dict[str, float] | None:
    """ms per new token in draft passes, in target passes and in the engine's own work (the rest of the wall
    time), over whole requests; None for a method that records no statistics (transformers)."""
    wall, draft, target = row.whole.wall_s, row.whole.draft_s, row.whole.target_s
    if not wall or not row.tokens:
        return None
    per = 1e3 / row.tokens
    return {"draft_ms": draft * per, "target_ms": target * per, "engine_ms": max(0.0, wall - draft - target) * per}


def summarise(rows: dict[str, Row], baseline: str = "ours plain") -> list[dict]:
    base = rows[baseline]
    t_target = base.target_s / base.target_passes  # one plain decoding step
    per_token = base.decoding_s / base.decoding_tokens
    out = []
    for row in rows.values():
        d = {"method": row.method, "k": row.k, "tokens": row.tokens, "seconds": round(row.seconds, 3),
             "tokens_per_s": row.tokens / row.seconds, "speedup": base.seconds / row.seconds * row.tokens / base.tokens}
        split = time_split(row)
        if split is not None:
            d["time_split"] = split
        if row.decoding_tokens:
            d["decoding_speedup"] = per_token / (row.decoding_s / row.decoding_tokens)
            d["tokens_per_target_pass"] = row.decoding_tokens / row.target_passes
            d["pass_cost"] = row.target_s / row.target_passes / t_target
        if row.drafted:
            alpha = row.accepted / (row.accepted + row.rejected)  # per judged guess, as the formula assumes
            k = row.drafted / max(1, row.target_passes)  # mean guesses per step
            c = (row.draft_s / row.draft_passes) / t_target if row.draft_passes else 0.0
            d.update(alpha=alpha, c=c, mean_k=k)
            if row.k.isdigit() and row.draft_passes:  # a draft model; see the module docstring for prompt lookup
                kk = int(row.k)
                d["predicted"] = speedup(min(alpha, 1.0), kk, c)
                d["measured_over_predicted"] = d["decoding_speedup"] / d["predicted"]
                d["predicted_cost_aware"] = expected_tokens(min(alpha, 1.0), kk) / (kk * c + d["pass_cost"])
                d["measured_over_cost_aware"] = d["decoding_speedup"] / d["predicted_cost_aware"]
        out.append(d)
    return out


def noise(table: list[dict]) -> float | None:
    """How far apart two runs of one method land in this run: |speedup of "ours k=2" / that of its second run - 1|
    (None where no method ran twice: the copy workload, or a pair without a draft model). Ratios between methods
    closer than this are not told apart by the run."""
    speedups = {r["method"]: r["speedup"] for r in table}
    return abs(speedups["ours k=2"] / speedups[AGAIN] - 1) if AGAIN in speedups else None


def identical(rows: dict[str, Row]) -> bool:
    outputs = [r.outputs for r in rows.values()]
    return all(o == outputs[0] for o in outputs)


def bench(pair: Pair, docs: list[list[int]], copy: list[list[int]], n: int = 96, ks=(1, 2, 3, 4), seed: int = 0,
          progress: bool = True) -> dict:
    """The whole benchmark; returns a JSON-able dict of tables, one per workload."""
    from tqdm.auto import tqdm

    fixed = dataclasses.replace(pair, eos_token_id=None)  # every method decodes exactly n tokens
    ks = tuple(sorted(set(ks) | {2}))  # k = 2 always runs: what recording events costs and the noise floor are at it
    # no prefix cache: every method runs every prompt, and a method after the first would find that prompt's KV
    # cached and skip the prefill that plain decoding and transformers pay
    plain_engine = Engine(fixed, cache_tokens=0)
    silent = Engine(fixed, events=DiscardLog(), cache_tokens=0)
    widgets = Engine(fixed, record_top=5, cache_tokens=0)
    greedy, sampled = SamplingParams(), SamplingParams(temperature=1.0)

    docs_methods = {"ours plain": (ours_plain, 0), "transformers generate": (hf(False), 0)}
    if pair.draft is not None:
        docs_methods["transformers assisted (defaults)"] = (hf(True), "")
        docs_methods["transformers assisted (k=2)"] = (hf(True, 2), 2)
        for k in ks:
            docs_methods[f"ours k={k}"] = (ours(plain_engine, "model", k), k)
        docs_methods["ours adaptive"] = (ours(plain_engine, "model", "adaptive"), "adaptive")
        # a tree of the draft's guesses instead of a chain, checked in one target pass
        docs_methods["ours tree (2, 2, 1)"] = (ours(plain_engine, "model", 0, (2, 2, 1)), "tree")
        docs_methods["ours tree (3, 2, 2, 1)"] = (ours(plain_engine, "model", 0, (3, 2, 2, 1)), "tree")
        docs_methods["ours tree adaptive"] = (ours(plain_engine, "model", 0, "adaptive"), "tree")
        docs_methods["ours tree dynamic"] = (ours(plain_engine, "model", 0, "dynamic"), "tree")
        # what recording events costs, at a constant k: an adaptive policy's choices follow its timings, so
        # two adaptive runs differ by more than their logs
        docs_methods["ours k=2, events off"] = (ours(silent, "model", 2), 2)
        docs_methods["ours k=2, widget events"] = (ours(widgets, "model", 2), 2)
        docs_methods[AGAIN] = (ours(plain_engine, "model", 2), 2)  # the noise floor (`noise`)
    if pair.eagle is not None:  # the feature-level head: chains and trees
        for k in EAGLE_KS:
            docs_methods[f"ours eagle k={k}"] = (ours(plain_engine, "eagle", k), k)
        docs_methods["ours eagle adaptive"] = (ours(plain_engine, "eagle", "adaptive"), "adaptive")
        docs_methods["ours eagle tree (2, 2, 1)"] = (ours(plain_engine, "eagle", 0, (2, 2, 1)), "tree")
        docs_methods["ours eagle tree dynamic"] = (ours(plain_engine, "eagle", 0, "dynamic"), "tree")
    sampled_methods = {name: m for name, m in docs_methods.items()
                       if name in ("ours plain", "transformers generate", "ours k=2", AGAIN, "ours adaptive",
                                   "ours tree (2, 2, 1)", "ours tree adaptive", "ours tree dynamic",
                                   f"ours eagle k={EAGLE_KS[0]}", "ours eagle adaptive", "ours eagle tree dynamic")}
    copy_methods = {"ours plain": (ours_plain, 0), "transformers generate": (hf(False), 0),
                    "ours prompt lookup k=8": (ours(plain_engine, "ngram", 8), 8),
                    "ours prompt lookup adaptive": (ours(plain_engine, "ngram", "adaptive"), "adaptive"),
                    # several earlier matches as several branches, all checked in one target pass
                    "ours prompt lookup tree (3, 2, 2, 1)": (ours(plain_engine, "ngram", 0, (3, 2, 2, 1)), "tree"),
                    "ours prompt lookup tree (2,) * 8": (ours(plain_engine, "ngram", 0, (2,) * 8), "tree")}
    if pair.draft is not None:
        copy_methods["ours adaptive (draft model)"] = (ours(plain_engine, "model", "adaptive"), "adaptive")

    workloads = [("docs, temperature 0", docs, greedy, docs_methods),
                 ("docs, temperature 1", docs, sampled, sampled_methods),
                 ("copy-heavy, temperature 0", copy, greedy, copy_methods)]
    bar = tqdm(total=sum(len(w[1]) for w in workloads), desc="bench speculative", disable=not progress)
    result = {"device": str(pair.device), "pair": pair.name, "new_tokens": n, "prompts": len(docs),
              "threads": torch.get_num_threads(), "workloads": {}}
    watch = Watch()
    for name, prompts, params, methods in workloads:
        rows = run_workload(fixed, prompts, n, params, methods, seed, bar)
        summary = summarise(rows)
        result["workloads"][name] = {"rows": summary, "greedy_outputs_identical": identical(rows)
                                     if params.greedy else None, "noise": noise(summary)}
    result["machine"] = watch.stop().as_dict()
    bar.close()
    return result


def markdown(result: dict) -> str:
    lines = [f"device {result['device']}, pair {result['pair']}, {result['prompts']} prompts x "
             f"{result['new_tokens']} new tokens, {result['threads']} threads"]
    for name, w in result["workloads"].items():
        same = w["greedy_outputs_identical"]
        lines += ["", f"**{name}**" + ("" if same is None else f" (greedy outputs identical: {same})"), ""]

        def f(r, key, fmt="{:.2f}"):
            return fmt.format(r[key]) if key in r else ""
        lines += table(["method", "speedup", "after the first token", "tok/s", "tok/pass", "alpha", "c", "pass cost",
                        "predicted (paper)", "measured / paper", "predicted (cost-aware)", "measured / cost-aware"],
                       [[r["method"], f"{r['speedup']:.2f}x", f(r, "decoding_speedup", "{:.2f}x"),
                         f"{r['tokens_per_s']:.0f}", f(r, "tokens_per_target_pass"), f(r, "alpha"), f(r, "c"),
                         f(r, "pass_cost"), f(r, "predicted"), f(r, "measured_over_predicted"),
                         f(r, "predicted_cost_aware"), f(r, "measured_over_cost_aware")] for r in w["rows"]])
        if w.get("noise") is not None:
            lines += ["", f"Noise floor: ours k=2 ran twice, interleaved with the rest, and its two speedups differ by "
                          f"{w['noise']:.1%}; methods closer than that are not told apart by this run."]
    lines += ["", "**Where the time goes** (ms per new token over whole requests: draft passes + target passes + "
              "the engine's own work = the method's wall time per token)"]
    for name, w in result["workloads"].items():
        split = [r for r in w["rows"] if "time_split" in r]
        if not split:
            continue
        lines += ["", f"*{name}*", ""]
        lines += table(["method", "draft", "target", "engine", "total"],
                       [[r["method"], f"{r['time_split']['draft_ms']:.2f}" if r["time_split"]["draft_ms"] else "",
                         f"{r['time_split']['target_ms']:.2f}", f"{r['time_split']['engine_ms']:.2f}",
                         f"{sum(r['time_split'].values()):.2f}"] for r in split])
    if warning(result.get("machine")):
        lines += ["", warning(result["machine"])]
    return "\n".join(lines)
