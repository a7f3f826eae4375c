"""Which models a notebook runs: the bundled pair by default, a hub pair on request, with a clear fallback.

Every notebook opens with one cell that calls `pick_pair`. The bundled pair ("tiny") needs no network and runs
on a laptop CPU; the hub pairs show what speculation buys when the target is large and runs on a GPU:

    "tiny"      teachspec's own 15.7M target and 0.8M draft, offline
    "smollm2"   HuggingFaceTB/SmolLM2-360M (target) and SmolLM2-135M (draft)
    "qwen2.5"   Qwen/Qwen2.5-1.5B (target) and Qwen2.5-0.5B (draft)
    "smollm2-instruct", "qwen2.5-instruct"   the same pairs' chat models: their tokenizers carry a chat template,
                which `teachspec.chat.Chat` and the program roles then use, and they stop at the end of a turn

A hub pair that cannot be loaded (no network, no local copy) is reported in one sentence and the bundled pair
is used instead, so the notebook still runs top to bottom.

Testing aid: the environment variable TEACHSPEC_NOTEBOOK_PAIR overrides the cell's choice. "config" builds two
small random-weight models from configs (no files, no network) with the bundled tokenizer, so the notebooks can
be executed end to end in seconds while the bundled weights are unavailable; its text is gibberish.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import socket

import torch

from teachspec.models import BUNDLED, HUB_PAIRS, Pair, load_pair
ENV = "TEACHSPEC_NOTEBOOK_PAIR"


def pick_pair(name: str = "tiny", device: str | None = None, quiet: bool = False) -> Pair:
    """The pair a notebook runs on. `name`: "tiny", a key of HUB_PAIRS, or "config" (the stand-in).

    `device`: None for the CPU with the bundled pair and the best available device with a hub pair.
    """
    name = os.environ.get(ENV, name)
    choices = ["tiny", "config", *HUB_PAIRS]
    if name not in choices:
        raise ValueError(f"pair {name!r} is not one of {choices}")
    if name == "config":
        pair = standin_pair()
    elif name == "tiny":
        pair = load_pair("tiny", device=device or "cpu")
    else:
        target, draft = HUB_PAIRS[name]
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        try:
            with _hub_quietly(offline=not _reachable("huggingface.co")):
                pair = load_pair(target=target, draft=draft, device=device)
        except (OSError, ValueError) as e:  # FileNotFoundError is an OSError: no network and no local copy
            print(f"Could not load the {name} pair ({target} + {draft}): the Hugging Face hub is unreachable and "
                  f"no local copy was found ({type(e).__name__}). Using the bundled pair 'tiny' instead.")
            pair = load_pair("tiny", device="cpu")
    if not quiet:
        n = sum(p.numel() for p in pair.target.parameters()) / 1e6
        m = sum(p.numel() for p in pair.draft.parameters()) / 1e6 if pair.draft is not None else 0
        print(f"pair: {pair.name} (target {n:.1f}M, draft {m:.1f}M parameters) on {pair.device}")
    return pair


def _reachable(host: str, port: int = 443, timeout: float = 3.0) -> bool:
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return True
    except OSError:
        return False


@contextlib.contextmanager
def _hub_quietly(offline: bool):
    """Silence the hub's retry messages; when offline, look in the local cache only (fails in milliseconds,
    instead of retrying for a minute)."""
    from huggingface_hub import constants
    from transformers.utils import logging as hf_logging

    saved, verbosity = constants.HF_HUB_OFFLINE, hf_logging.get_verbosity()
    constants.HF_HUB_OFFLINE = saved or offline
    hf_logging.set_verbosity_error()
    quiet = logging.getLogger("huggingface_hub")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = saved
        hf_logging.set_verbosity(verbosity)
        quiet.setLevel(level)


def standin_pair(vocab_size: int = 4096) -> Pair:
    """Testing aid: a random-weight Llama target (2 layers) and draft (1 layer), built from configs in
    milliseconds, with the bundled tokenizer. The draft is the target cut to its first layer, so that it agrees with
    the target often enough for speculation to show something."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    def build(layers: int, seed: int) -> LlamaForCausalLM:
        torch.manual_seed(seed)
        cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=256, num_hidden_layers=layers,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                          bos_token_id=0, eos_token_id=0, pad_token_id=0, initializer_range=0.2)
        return LlamaForCausalLM(cfg).eval()

    target = build(2, 1)
    draft = copy.deepcopy(target)  # the target without its last layer: a cheaper model that often agrees
    draft.model.layers = draft.model.layers[:1]
    draft.config.num_hidden_layers = 1
    tokenizer = AutoTokenizer.from_pretrained(BUNDLED["tiny"])
    return Pair(target, draft, tokenizer, vocab_size, "config (stand-in)", torch.device("cpu"), None)
