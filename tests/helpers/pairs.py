"""The engine tests' pair: a config-built target and a smaller draft of the same family, with an untrained EAGLE
head, and the prompts they run (one prompt lookup can latch onto)."""

from __future__ import annotations

import torch
from transformers import AutoTokenizer

from helpers.models import TOKENIZER_DIR, build_model
from teachspec.models.eagle import EagleHead, head_config
from teachspec.models.pair import Pair


def make_pair(arch="llama", draft_seed=2, eos=None, same=False) -> Pair:
    target = build_model(arch, seed=1)
    draft = target if same else build_model(arch, seed=draft_seed, layers=1)
    tok = AutoTokenizer.from_pretrained(TOKENIZER_DIR)
    torch.manual_seed(0)
    head = EagleHead(head_config(target)).eval()  # untrained: random guesses, read from this family's features
    return Pair(target, draft, tok, 4096, arch, torch.device("cpu"), eos, head)


PROMPT = list(range(50, 80))
COPY_PROMPT = [7, 8, 9, 10, 11, 12] * 6  # something prompt lookup can latch onto
