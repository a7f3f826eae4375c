"""`teachspec bench mechanics`: what the engine itself costs, timed with a draft that is never wrong.

The oracle drafter is the target drafting for itself (q = p, so alpha = 1): every step emits exactly k + 1 tokens and
nothing depends on how good a draft is. Its c is about 1 (a draft pass *is* a target pass), so Leviathan et al.'s
formula predicts (k + 1) / (k c + 1), about 1.0, at every k: the oracle buys nothing, and what it measures is the
machinery. Measured / paper is then what is left of the prediction after the two costs the formula leaves out: the
pass cost (a target pass over k + 1 tokens against one over a single token) and the engine's own work per step
(verification, events, cache cropping). On a GPU the first is about 1 and the ratio shows the second.

The target is built from a config, with random weights, so no download is needed and its size is a parameter: a few
hundred million parameters on a GPU, the bundled target's shape on a CPU. Columns as in `teachspec bench speculative`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from teachspec.bench.speculative import identical, ours, ours_plain, run_workload, summarise
from teachspec.busy import Watch
from teachspec.device import resolve_device, resolve_dtype
from teachspec.engine import Engine
from teachspec.models.packed import pack
from teachspec.models.pair import BUNDLED, Pair
from teachspec.sampling import SamplingParams
from teachspec.threads import use_cpu_policy
from teachspec.validate import check_int

VOCAB = 4096  # the bundled tokenizer's: the prompts are random ids, but outputs are decoded with it


@dataclass
class Shape:
    """A Llama-style target: `layers` decoder layers of width `hidden`, 64-dimensional heads, an MLP 4x as wide."""

    layers: int = 6
    hidden: int = 384

    def config(self) -> LlamaConfig:
        return LlamaConfig(vocab_size=VOCAB, hidden_size=self.hidden, intermediate_size=4 * self.hidden,
                           num_hidden_layers=self.layers, num_attention_heads=self.hidden // 64,
                           num_key_value_heads=self.hidden // 64, max_position_embeddings=4096,
                           bos_token_id=0, eos_token_id=0, pad_token_id=0, tie_word_embeddings=True)


def config_pair(shape: Shape, device=None, dtype=None, seed: int = 0) -> Pair:
    """A target of the given shape with random weights, made on the device, and no draft (the oracle needs none)."""
    for name in ("layers", "hidden"):
        check_int(name, getattr(shape, name), 1)
    if shape.hidden % 64:
        raise ValueError(f"hidden must be a multiple of 64 (the head size), got {shape.hidden}")
    use_cpu_policy()  # as load_pair does
    device = resolve_device(device)
    dtype = resolve_dtype(dtype, device)
    torch.manual_seed(seed)
    with torch.device(device):
        target = LlamaForCausalLM(shape.config()).to(dtype).eval()
    if device.type == "cpu" and dtype == torch.float32:
        pack(target)  # as load_pair does
    tokenizer = AutoTokenizer.from_pretrained(BUNDLED["tiny"])
    name = f"random llama {shape.layers}x{shape.hidden} ({target.num_parameters() / 1e6:.0f}M)"
    return Pair(target, None, tokenizer, VOCAB, name, device)


def bench(pair: Pair, n_prompts: int = 8, prompt_tokens: int = 64, n: int = 64, ks=(1, 2, 4, 8), seed: int = 0,
          progress: bool = True) -> dict:
    """Plain decoding against the oracle at each k and with a small tree, interleaved prompt by prompt, greedy; a
    JSON-able dict."""
    from tqdm.auto import tqdm

    for name, value in (("n_prompts", n_prompts), ("prompt_tokens", prompt_tokens), ("n", n)):
        check_int(name, value, 1)
    generator = torch.Generator().manual_seed(seed)
    prompts = torch.randint(1, VOCAB, (n_prompts, prompt_tokens), generator=generator).tolist()
    fixed = replace(pair, eos_token_id=None)  # every method decodes exactly n tokens
    engine = Engine(fixed, cache_tokens=0)  # no prefix cache: each method computes its own prefill
    methods = {"ours plain": (ours_plain, 0)} | {f"ours oracle k={k}": (ours(engine, "oracle", k), k) for k in ks}
    # a tree of the target's own top tokens: the first child is always right, so this times a pass over a tree's
    # nodes (here 2 + 4 + 4 = 10 of them for 4 tokens a pass) against a chain's
    methods["ours oracle tree (2, 2, 1)"] = (ours(engine, "oracle", 0, (2, 2, 1)), "tree")
    bar = tqdm(total=n_prompts, desc="bench mechanics", disable=not progress)
    watch = Watch()
    rows = run_workload(fixed, prompts, n, SamplingParams(), methods, seed, bar)
    machine = watch.stop().as_dict()
    bar.close()
    return {"device": str(pair.device), "pair": pair.name, "new_tokens": n, "prompts": n_prompts,
            "threads": torch.get_num_threads(), "machine": machine, "workloads": {
                "random prompts, temperature 0": {"rows": summarise(rows), "greedy_outputs_identical": identical(rows)}}}
