"""Real model families as config-built pairs: for each architecture a random-weight target, a draft that agrees with
it some of the time, and an instruct-style tokenizer (a BOS, a chat template, two eos ids); `stop_rules` takes two eos
ids and a stop string from the target's own greedy continuation of TEXT, so a run really stops early. Used by
tests/models/test_families.py and tests/speculative/test_tree_engine.py (TEXT also by test_tree_sampling.py)."""

import torch

from helpers.models import build_model, chat_tokenizer

FAMILIES = ["llama", "qwen2", "qwen3", "gemma2", "mistral", "phi3", "gpt2", "opt", "falcon"]
VOCAB = 4160  # the chat tokenizer's 4099 tokens, padded to a round size as real checkpoints are
TEXT = "def parse(path):\n    with open(path) as f:"
N = 40


def family_pair(arch: str):
    """A target, a draft that agrees with it some of the time (its weights plus noise), and the chat tokenizer."""
    target = build_model(arch, vocab_size=VOCAB, seed=1)
    draft = build_model(arch, vocab_size=VOCAB, seed=1)
    torch.manual_seed(2)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(0.3 * p.std() * torch.randn_like(p))
    return target, draft, chat_tokenizer()


def stop_rules(target, tok) -> tuple[list[int], str]:
    """Two eos ids and a stop string that the target's greedy continuation of TEXT reaches within N tokens."""
    ids = tok(TEXT, return_tensors="pt").input_ids
    free = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=N, do_sample=False,
                           eos_token_id=None, pad_token_id=0)[0, ids.shape[1]:].tolist()
    eos = [free[30], tok.convert_tokens_to_ids("<|im_end|>")]
    return eos, tok.decode(free[18:20])
