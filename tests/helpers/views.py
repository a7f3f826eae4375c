"""The views' tests' pair and recording: a random config-built target with a draft that is the target plus noise (some
guesses accepted, some rejected), and an engine with a small radix cache (so it splits and evicts) that has run a few
prompts. Used by tests/widgets/test_widgets.py, test_widgets_charts.py and test_widgets_js.py. (Not the engine
tests' pair, helpers/pairs.py's `make_pair`, whose draft is a smaller model.)"""

from __future__ import annotations

import copy

import torch
from transformers import AutoTokenizer

from helpers.models import TOKENIZER_DIR, build_model
from teachspec.engine import Engine
from teachspec.models.pair import Pair

PROMPTS = ["def main():\n    return", "def main():\n    print", "class Node:", "def main():\n    return x"]


def noisy_pair(noise: float = 0.02) -> Pair:
    """A random target and a draft that is the target plus noise: some guesses are accepted, some rejected."""
    target = build_model("llama", seed=1)
    draft = copy.deepcopy(target)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for w in draft.parameters():
            w.add_(noise * torch.randn(w.shape, generator=generator))
    return Pair(target, draft, AutoTokenizer.from_pretrained(TOKENIZER_DIR), 4096, "llama", torch.device("cpu"))


def record(pair: Pair, prompts=PROMPTS, max_new_tokens: int = 12, cache_tokens: int = 40, **kw):
    """Run the prompts through one engine with a small radix cache (so it splits and evicts); return it."""
    engine = Engine(pair, record_top=4, cache_tokens=cache_tokens)
    for i, prompt in enumerate(prompts):
        engine.generate(prompt, max_new_tokens, temperature=1.0, k=3, seed=i, **kw)
    return engine
