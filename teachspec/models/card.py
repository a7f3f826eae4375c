"""Measure the bundled pair and write its model card.

    python -m teachspec.models.card            # writes teachspec/models/tiny/MODEL_CARD.md and card.json

The headline number is the **greedy alpha**: along the target's own greedy continuation of held-out prompts, the
fraction of positions at which the draft's argmax equals the target's. That is exactly the per-token acceptance
rate of greedy speculative decoding, since a greedy draft token is accepted iff it is the target's argmax.
Alongside it, the expected acceptance at temperature 1, the mean over the same positions of
sum_x min(p(x), q(x)) (Leviathan et al. 2023, Definition 3.1: beta = 1 - TV(p, q)).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from teachspec import kv
from teachspec.decode import decode
from teachspec.models import corpus
from teachspec.models.pair import BUNDLED, Pair, load_pair
from teachspec.sampling import SamplingParams

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
def agreement(pair: Pair, prompts: list[list[int]], new_tokens: int) -> dict:
    """Greedy alpha and expected T=1 acceptance along the target's greedy continuations."""
    matches = positions = 0
    beta_sum = 0.0
    for prompt in prompts:
        cont, _, _ = decode(pair.target, prompt, new_tokens, SamplingParams(), None, pair.eos_token_id,
                            pair.vocab_size)
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
def eagle(pair: Pair, prompts: list[list[int]], new_tokens: int) -> dict:
    """The EAGLE head through the engine, greedy, on the same prompts: alpha with one guess a step (the head's
    first guess, from real features) and with four (later guesses read the head's own features), and the time of
    one head pass (its layer and the target's LM head) beside a target step."""
    from teachspec.engine import Engine
    engine, out = Engine(pair, cache_tokens=0), {}
    for k in (1, 4):
        accepted = judged = 0
        for prompt in prompts:
            stats = engine.generate(prompt, new_tokens, speculate="eagle", k=k).stats
            accepted, judged = accepted + stats.accepted, judged + stats.accepted + stats.rejected
        out[f"greedy_alpha_k{k}"] = accepted / judged
    head, f = pair.eagle, torch.zeros(1, 1, pair.eagle.config.hidden_size)
    cache = kv.new_cache(head.layers)
    head(torch.zeros(1, 200, f.shape[-1]), torch.zeros(1, 200, f.shape[-1]), torch.arange(200)[None], cache=cache)
    times = []
    for _ in range(50):
        t0 = time.perf_counter()
        pair.target.get_output_embeddings()(head(f, f, torch.tensor([[200]]), cache=cache))
        times.append(time.perf_counter() - t0)
        kv.crop_to(cache, 200)
    out["step_ms"] = 1e3 * sorted(times)[len(times) // 2]
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
    a, e = card["agreement"], training["eagle"]
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
        f"**{card['eagle']['greedy_alpha_k1']:.3f}** for a first "
        f"guess (k = 1), {card['eagle']['greedy_alpha_k4']:.3f} per judged guess at k = 4.",
        f"- Cost ratio c = head pass / target step = "
        f"{card['eagle']['step_ms'] / card['step_ms']['target']:.2f} ({card['eagle']['step_ms']:.2f} ms).",
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
    lines += ["## Reproduce", "", "```", "python -m teachspec.models.train --stage all   # retrain (about 2 hours)",
              "python -m teachspec.models.card                # re-measure and rewrite this card", "```", ""]
    (root / "MODEL_CARD.md").write_text("\n".join(lines))
    (root / "card.json").write_text(json.dumps(card, indent=2))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=96)
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    import platform

    root = BUNDLED["tiny"]
    pair = load_pair("tiny")
    card = {
        "python": platform.python_version(),
        "context": pair.context,
        "vocab_size": pair.vocab_size,
        "training": json.loads((root / "training.json").read_text()),
        "agreement": agreement(pair, held_out_prompts(pair, args.prompts, args.prompt_tokens), args.new_tokens),
        "step_ms": {"target": step_ms(pair.target), "draft": step_ms(pair.draft)},
        "eagle": eagle(pair, held_out_prompts(pair, 16, args.prompt_tokens), args.new_tokens),
        "completions": completions(pair),
    }
    write_card(root, card)
    print(json.dumps({k: card[k] for k in ("agreement", "step_ms", "eagle")}, indent=2))


if __name__ == "__main__":
    main()
