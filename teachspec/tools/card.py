"""Measure the bundled pair and write its model card.

    python -m teachspec.tools.card            # writes teachspec/models/tiny/MODEL_CARD.md and card.json

The headline number is the **greedy alpha**: along the target's own greedy continuation of held-out prompts, the
fraction of positions at which the draft's argmax equals the target's. That is exactly the per-token acceptance
rate of greedy speculative decoding, since a greedy draft token is accepted iff it is the target's argmax.
Alongside it, the expected acceptance at temperature 1, the mean over the same positions of
sum_x min(p(x), q(x)) (Leviathan et al. 2023, Definition 3.1: beta = 1 - TV(p, q)).

For the EAGLE head, two more things the engine's speed depends on. Its draft vocabulary's **coverage**: the share
of those same greedy continuations that the draft vocabulary holds, the most a greedy first guess can be accepted
(a token outside it is never guessed). And the precision it runs in on the machine that writes the card: bfloat16
with packed, fused layers where the CPU has native bfloat16 kernels, float32 with packed layers elsewhere
(`teachspec/models/eagle.py`, `load_head`).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedModel

from teachspec import kv
from teachspec.decode import decode
from teachspec.models import corpus
from teachspec.models.eagle import EagleHead, coverage, linear
from teachspec.models.packed import PackedLinear, bf16_pays
from teachspec.models.pair import BUNDLED, Pair, load_pair
from teachspec.sampling import SamplingParams
from teachspec.threads import set_threads

SAMPLE_PROMPTS = ["Return a new dictionary", "The \"with\" statement", "def read_config(path):\n    \"\"\""]


def held_out_prompts(pair: Pair, n: int, prompt_tokens: int, seed: int = 0) -> list[list[int]]:
    """The opening tokens of validation documentation the models never trained on."""
    _, val = corpus.build(seed=seed)
    prompts = []
    for doc in val:
        if doc.kind == "source":
            continue
        ids = pair.encode(doc.text)
        if len(ids) >= prompt_tokens + 16:
            prompts.append(ids[:prompt_tokens])
        if len(prompts) == n:
            break
    return prompts


@torch.inference_mode()
def continuations(pair: Pair, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """The target's greedy continuation of each prompt: what greedy speculation writes, token for token."""
    return [decode(pair.target, prompt, new_tokens, SamplingParams(), None, pair.eos_token_id, pair.vocab_size)[0]
            for prompt in prompts]


@torch.inference_mode()
def agreement(pair: Pair, prompts: list[list[int]], new_tokens: int,
              written: list[list[int]] | None = None) -> dict:
    """Greedy alpha and expected T=1 acceptance along the target's greedy continuations (`written`, when they
    have been computed already)."""
    matches = positions = 0
    beta_sum = 0.0
    for prompt, cont in zip(prompts, written or continuations(pair, prompts, new_tokens)):
        ids = prompt + cont
        n = len(cont)
        # logits at position j predict token j + 1: the last n rows before the end score the continuation
        p_logits = kv.forward(pair.target, ids[:-1], kv.new_cache(pair.target), n, pair.vocab_size)
        q_logits = kv.forward(pair.draft, ids[:-1], kv.new_cache(pair.draft), n, pair.vocab_size)
        matches += int((q_logits.argmax(-1) == torch.tensor(cont)).sum())
        positions += n
        beta_sum += float(torch.minimum(p_logits.softmax(-1), q_logits.softmax(-1)).sum(-1).sum())
    return {"greedy_alpha": matches / positions, "expected_acceptance_t1": beta_sum / positions,
            "positions": positions, "prompts": len(prompts)}


def draft_vocab(pair: Pair, written: list[list[int]]) -> dict:
    """The EAGLE head's draft vocabulary: its size and its coverage of the target's greedy continuations
    `written` (a head without one reads every token: coverage 1)."""
    table = pair.eagle.draft_vocab
    tokens = torch.tensor([x for cont in written for x in cont])
    return {"size": pair.vocab_size if table is None else len(table),
            "coverage": 1.0 if table is None else coverage(table, tokens), "tokens": len(tokens)}


def precision(head: EagleHead, target: PreTrainedModel) -> dict:
    """How the head computes on this machine, as `load_head` chose: its dtype, whether every linear layer it runs
    (its fused projections too, and its read-out over the draft vocabulary) multiplies by weights packed for
    oneDNN, whether its projections are fused, and what the CPU offers."""
    layers = [m for m in head.modules() if isinstance(m, nn.Linear)] + list(head._fused or ()) + [head.lm_head(target)]
    return {"dtype": str(head.fc.weight.dtype).removeprefix("torch."),
            "packed": all(type(m) is PackedLinear for m in layers), "fused": head._fused is not None,
            "native_bf16": bf16_pays(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch": torch.__version__}


@torch.inference_mode()
def step_ms(model, context: int = 200, repeats: int = 50) -> float:
    """Median wall time of one cached decode step on top of `context` tokens."""
    cache = kv.new_cache(model)
    kv.forward(model, list(range(1, context + 1)), cache, 1, model.config.vocab_size)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        kv.forward(model, [5], cache, 1, model.config.vocab_size)
        times.append(time.perf_counter() - t0)
        kv.crop_to(cache, context)
    return 1e3 * sorted(times)[len(times) // 2]


@torch.inference_mode()
def side_by_side_ms(pair: Pair, context: int = 200, repeats: int = 50) -> dict[str, float]:
    """Median wall time of one cached step on top of `context` tokens of the target, the draft, and the EAGLE head
    as the drafter runs it (its layer, then q's logits from the read-out over the draft vocabulary), the three
    interleaved in one run: a shared machine's noise falls on each alike, and no model finds its weights still in
    cache from its own last pass, as a drafter's first pass after the target's (a draft pass timed alone, its
    weights warm, took 0.55 to 0.75 of that here)."""
    head = pair.eagle
    read_out, embed = head.lm_head(pair.target), pair.target.get_input_embeddings()
    caches = {"target": kv.new_cache(pair.target), "draft": kv.new_cache(pair.draft),
              "head": kv.new_cache(head.layers)}
    for role in ("target", "draft"):
        kv.forward(getattr(pair, role), list(range(1, context + 1)), caches[role], 1, pair.vocab_size)
    f = torch.zeros(1, context, head.config.hidden_size)
    head(f, f, torch.arange(context)[None], cache=caches["head"])
    f, x, at = f[:, :1], torch.tensor([[5]]), torch.tensor([[context]])
    passes = {"target": lambda: kv.forward(pair.target, [5], caches["target"], 1, pair.vocab_size),
              "draft": lambda: kv.forward(pair.draft, [5], caches["draft"], 1, pair.vocab_size),
              "head": lambda: linear(read_out, head(f, embed(x), at, cache=caches["head"]).to(read_out.weight.dtype))}
    times = {role: [] for role in passes}
    for _ in range(repeats):
        for role, run in passes.items():
            t0 = time.perf_counter()
            run()
            times[role].append(time.perf_counter() - t0)
            kv.crop_to(caches[role], context)
    return {role: 1e3 * sorted(t)[len(t) // 2] for role, t in times.items()}


@torch.inference_mode()
def eagle(pair: Pair, prompts: list[list[int]], new_tokens: int) -> dict:
    """The EAGLE head through the engine, greedy, on the same prompts: alpha with one guess a step (the head's
    first guess, from real features) and with four (later guesses read the head's own features)."""
    from teachspec.engine import Engine
    engine, out = Engine(pair, cache_tokens=0), {}
    for k in (1, 4):
        accepted = judged = 0
        for prompt in prompts:
            stats = engine.generate(prompt, new_tokens, speculate="eagle", k=k).stats
            accepted, judged = accepted + stats.accepted, judged + stats.accepted + stats.rejected
        out[f"greedy_alpha_k{k}"] = accepted / judged
    return out


def completions(pair: Pair, new_tokens: int = 48) -> list[dict]:
    rows = []
    for prompt in SAMPLE_PROMPTS:
        ids = pair.encode(prompt)
        row = {"prompt": prompt}
        for role, model in (("target", pair.target), ("draft", pair.draft)):
            out, _, _ = decode(model, ids, new_tokens, SamplingParams(), None, pair.eos_token_id, pair.vocab_size)
            row[role] = pair.decode(out)
        rows.append(row)
    return rows


def write_card(root: Path, card: dict) -> None:
    training = card["training"]
    t, d = training["target"], training["draft"]
    tp, dp = t["phases"], d["phases"]
    a, e, h = card["agreement"], training["eagle"], card["eagle"]
    v, chosen, run, side = h["draft_vocab"], e["draft_vocab"], h["precision"], h["side_by_side_ms"]
    size_mb = (root / "eagle" / "model.safetensors").stat().st_size / 2**20

    def minutes(phases):
        return sum(p["minutes"] for p in phases)

    def tokens(phases):
        return sum(p["tokens"] for p in phases)

    lines = [
        "# The bundled pair `tiny`",
        "",
        "Two Llama-architecture causal LMs trained from scratch on Python's own documentation and source, so that",
        "speculative decoding and prefix reuse can run for real on a laptop with no network. Load them with",
        "`teachspec.load_pair(\"tiny\")` or open either folder with `AutoModelForCausalLM.from_pretrained`.",
        "",
        "| | target | draft |",
        "|---|---|---|",
        f"| layers x width | {t['size']['n_layer']} x {t['size']['n_embd']} | {d['size']['n_layer']} x "
        f"{d['size']['n_embd']} |",
        f"| parameters | {t['params'] / 1e6:.2f} M | {d['params'] / 1e6:.2f} M |",
        f"| training | {minutes(tp):.0f} min, {tokens(tp) / 1e6:.2f} M tokens (windows of {t['seq_lens'][0]}, "
        f"then {t['seq_lens'][1]}) | {minutes(dp[:1]):.0f} min cross-entropy ({tokens(dp[:1]) / 1e6:.2f} M "
        f"tokens), then {minutes(dp[1:]):.0f} min distillation from the target |",
        f"| validation loss (nats/token) | {tp[-1]['val_loss']:.3f} | {dp[-1]['val_loss']:.3f} |",
        f"| decode step, 2 CPU threads | {card['step_ms']['target']:.2f} ms | {card['step_ms']['draft']:.2f} ms |",
        "",
        f"Context window: {card['context']} tokens. Vocabulary: {card['vocab_size']} byte-level BPE tokens "
        "(one `tokenizer.json`, shared), special token `<|endoftext|>`. Weights stored in float16, upcast to",
        "float32 when loaded.",
        "",
        "## Draft/target agreement",
        "",
        f"- **Greedy alpha = {a['greedy_alpha']:.3f}**: along the target's greedy continuation of {a['prompts']} "
        f"held-out prompts ({a['positions']} positions), the share at which the draft's argmax equals the target's.",
        f"- Expected acceptance at temperature 1, mean of sum min(p, q): {a['expected_acceptance_t1']:.3f}.",
        f"- Cost ratio c = draft step / target step = {card['step_ms']['draft'] / card['step_ms']['target']:.2f} "
        f"(steps timed as `load_pair` loads the models: float32, the large linear layers packed for oneDNN).",
        "",
        "## The EAGLE head (`speculate=\"eagle\"`)",
        "",
        f"One Llama decoder layer ({e['params'] / 1e6:.2f} M parameters, float16, {size_mb:.1f} MB) over the "
        "target's last hidden state and the next token's embedding, read out by the target's own LM head "
        "(`teachspec/models/eagle.py`). Trained against the bundled target for "
        f"{e['minutes']:.0f} min on 2 CPU cores ({e['tokens'] / 1e6:.2f} M token positions, half corpus, half the "
        f"target's own text written in {e['self_written_minutes']:.0f} min), with EAGLE's feature regression plus "
        "KL(p || q), over two passes (the second reads its own guessed features: EAGLE-3's training-time test).",
        "",
        f"- Greedy alpha through the engine, on the first 16 of these prompts: "
        f"**{h['greedy_alpha_k1']:.3f}** for a first "
        f"guess (k = 1), {h['greedy_alpha_k4']:.3f} per judged guess at k = 4.",
        f"- Draft vocabulary (EAGLE-3): greedy guesses read q out over {v['size']:,} of the {card['vocab_size']:,} "
        "tokens, the most frequent in what the head trained on (the corpus, and "
        f"{chosen['counted_tokens']['target']:,} tokens of the target's own continuations with their prompts, each "
        "weighted by its share of the batches), by the target's LM-head rows for them (`eagle/draft_vocab.json`; no "
        f"retraining). **Coverage {v['coverage']:.3f}**: the share of the target's greedy continuations of the "
        f"{a['prompts']} held-out prompts above ({v['tokens']:,} tokens) that the draft vocabulary holds, the most "
        "a greedy first guess can be accepted. When the vocabulary was chosen (`teachspec.tools.train`), by size, "
        f"coverage and the first guess's greedy agreement on {chosen['held_out_tokens']:,} tokens the target wrote "
        "from random windows of held-out documentation and source, half of them sampled at temperature 1 (text "
        "more varied than greedy continuations of documentation, so the same vocabulary covers less of it): "
        + ", ".join(f"{int(size):,}: {row['coverage']:.3f} / {row['greedy_agreement'][0]:.3f}"
                    for size, row in chosen["sizes"].items())
        + ". Sampled guesses read the whole vocabulary: there the mass outside the draft vocabulary is acceptance "
        "lost (`teachspec/speculative/eagle.py`).",
        f"- Precision on the machine that wrote this card ({'native' if run['native_bf16'] else 'no native'} "
        f"bfloat16 kernels; torch {run['torch']}, CPU capability {run['cpu_capability']}): the head ran in "
        f"{run['dtype']}, its linear layers and its read-out {'' if run['packed'] else 'not '}packed for oneDNN"
        + (", its query, key and value projections fused into one layer and its gate and up projections into "
           "another" if run["fused"] else "")
        + " (`load_head`: bfloat16 only where the CPU has native kernels for it, float32 elsewhere).",
        f"- Cost ratio c = head pass / target step = **{side['head'] / side['target']:.2f}** ({side['head']:.2f} ms, "
        f"its layer and its read-out over the draft vocabulary), against the draft model's "
        f"{side['draft'] / side['target']:.2f} ({side['draft']:.2f} ms): one cached step of each on top of 200 "
        "tokens, the three interleaved in one run, so that none finds its weights in cache from its own last pass, "
        "as a drafter's first pass after the target's (medians, 2 threads).",
        "",
        "## Data",
        "",
        f"`pydoc_data.topics`, every standard-library docstring of at least 40 characters, and the standard "
        f"library's source, from Python {card['python']}: {training['corpus']['train_chars'] / 1e6:.1f} M "
        f"characters, {training['corpus']['train_tokens_per_epoch'] / 1e6:.2f} M tokens per epoch with the "
        "documentation counted twice. Documents are split 95/5 by a seeded hash of their names; validation loss "
        f"is on the held-out documentation ({training['corpus']['val_tokens']} tokens).",
        "",
        "## Sample completions (greedy, 48 tokens)",
        "",
    ]
    for row in card["completions"]:
        lines += [f"**Prompt** `{row['prompt']!r}`", "", "target:", "```", row["prompt"] + row["target"], "```",
                  "draft:", "```", row["prompt"] + row["draft"], "```", ""]
    measure = "python -m teachspec.tools.card " + " ".join(f"--{k.replace('_', '-')} {n}"
                                                           for k, n in card["measured_with"].items())
    lines += ["## Reproduce", "", "```", "python -m teachspec.tools.train --stage all   # retrain (about 2 hours)",
              f"{measure}   # re-measure and rewrite this card (a minute on 2 idle cores)", "```", ""]
    (root / "MODEL_CARD.md").write_text("\n".join(lines))
    (root / "card.json").write_text(json.dumps(card, indent=2))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m teachspec.tools.card", description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=32, help="held-out prompts for the agreement and coverage")
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=96)
    args = ap.parse_args(argv)
    set_threads(2)  # what the card reports, whatever the thread policy would pick on this machine
    import platform

    root = BUNDLED["tiny"]
    pair = load_pair("tiny")
    prompts = held_out_prompts(pair, args.prompts, args.prompt_tokens)
    written = continuations(pair, prompts, args.new_tokens)
    steps = side_by_side_ms(pair)
    card = {
        "python": platform.python_version(),
        "context": pair.context,
        "vocab_size": pair.vocab_size,
        "measured_with": vars(args),
        "training": json.loads((root / "training.json").read_text()),
        "agreement": agreement(pair, prompts, args.new_tokens, written),
        "step_ms": {"target": step_ms(pair.target), "draft": step_ms(pair.draft)},
        "eagle": eagle(pair, prompts[:16], args.new_tokens) | {"step_ms": steps["head"], "side_by_side_ms": steps,
                                                               "draft_vocab": draft_vocab(pair, written),
                                                               "precision": precision(pair.eagle, pair.target)},
        "completions": completions(pair),
    }
    write_card(root, card)
    print(json.dumps({k: card[k] for k in ("agreement", "step_ms", "eagle")}, indent=2))


if __name__ == "__main__":
    main()
