"""A draft/target pair: two causal LMs that speak the same vocabulary.

Speculative decoding compares the target's p with the draft's q token by token, so both models must index the
same vocabulary. Real pairs often differ in one harmless way: the embedding matrix is padded to a round size
(Qwen2.5-0.5B has 151,936 rows, Qwen2.5-7B 152,064) while the tokenizer is identical. Those extra rows are never
produced by the tokenizer, so both models' logits are sliced to the shared size. Anything else (different
tokenizers) is refused with an error that names both vocabularies.

    pair = load_pair("tiny")                          # bundled, offline, ready on CPU in well under a second
    target, draft, tokenizer = pair                   # a pair unpacks like a tuple
    pair = load_pair(target="Qwen/Qwen2.5-1.5B", draft="Qwen/Qwen2.5-0.5B", device="cuda")
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from teachspec.device import resolve_device, resolve_dtype
from teachspec.models.packed import pack

BUNDLED = {"tiny": Path(__file__).parent / "tiny"}


@dataclass
class Pair:
    target: PreTrainedModel
    draft: PreTrainedModel | None
    tokenizer: PreTrainedTokenizerBase
    vocab_size: int  # rows of the logits both models share; logits beyond it are sliced off
    name: str
    device: torch.device
    eos_token_id: int | None = None  # generation stops after this token; None never stops early

    def __iter__(self):
        return iter((self.target, self.draft, self.tokenizer))

    @property
    def context(self) -> int:
        """The longest sequence both models accept."""
        sizes = [m.config.max_position_embeddings for m in (self.target, self.draft)
                 if m is not None and getattr(m.config, "max_position_embeddings", None)]
        sizes += [m.config.n_positions for m in (self.target, self.draft)
                  if m is not None and getattr(m.config, "n_positions", None)]
        return min(sizes) if sizes else 2**31

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)


def _model(source: str | Path, role: str, device: torch.device, dtype: torch.dtype) -> PreTrainedModel:
    try:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
    except OSError as e:
        raise FileNotFoundError(
            f"{role}={str(source)!r}: no model found there (expected a local folder with config.json and weights, "
            f"or a Hugging Face hub id reachable from this machine): {e}") from e
    model = model.to(device).eval()
    return pack(model) if device.type == "cpu" and dtype == torch.float32 else model


def _tokenizer(source: str | Path, role: str) -> PreTrainedTokenizerBase:
    try:
        return AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as e:
        raise FileNotFoundError(f"{role}={str(source)!r}: no tokenizer found there: {e}") from e


def shared_vocab_size(target: PreTrainedModel, draft: PreTrainedModel | None, tokenizer: PreTrainedTokenizerBase,
                      draft_tokenizer: PreTrainedTokenizerBase | None, names: tuple[str, str]) -> int:
    """The number of logit rows both models share, or a ValueError when they cannot be paired."""
    n_tok = len(tokenizer)
    rows = [target.get_output_embeddings().weight.shape[0]]
    if draft is not None:
        rows.append(draft.get_output_embeddings().weight.shape[0])
        if draft_tokenizer is not None and draft_tokenizer.get_vocab() != tokenizer.get_vocab():
            ours, theirs = tokenizer.get_vocab(), draft_tokenizer.get_vocab()
            differ = sorted(set(ours.items()) ^ set(theirs.items()), key=lambda kv: kv[1])[:3]
            raise ValueError(
                f"draft={names[1]!r} cannot be paired with target={names[0]!r}: their tokenizers differ "
                f"(target vocabulary {len(ours)} tokens, draft vocabulary {len(theirs)} tokens; "
                f"first differences {differ}). Speculative decoding needs one shared vocabulary; only padding "
                f"rows beyond the tokenizer may differ.")
    shared = min(rows)
    if shared < n_tok:
        raise ValueError(f"the models' output layers have {rows} rows but the tokenizer has {n_tok} tokens; "
                         f"every token needs a row in both models")
    return shared


def load_pair(name: str | None = None, *, target: str | Path | None = None, draft: str | Path | None = None,
              device: str | torch.device | None = None, dtype: str | torch.dtype | None = None) -> Pair:
    """Load a bundled pair by name, or any two causal LMs (hub ids or local folders) that share a vocabulary.

    `draft=None` with a `target` gives a pair with no draft model (prompt lookup and oracle drafters still work).
    `device` defaults to "cpu"; `dtype` to float32 on CPU and bfloat16 on CUDA. On the CPU in float32 the large
    linear layers are packed for oneDNN (`teachspec.models.packed`): the same numbers, a flatter verification cost,
    for models whose packed copies take at most 1 GiB (`packed.pack(model, max_bytes=None)` packs any).
    """
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    if name is not None and target is not None:
        raise ValueError(f"give either a bundled pair name or target=/draft=, not both (got name={name!r}, "
                         f"target={str(target)!r})")
    if name is None and target is None:
        name = "tiny"
    if name is not None:
        if name not in BUNDLED:
            raise ValueError(f"name={name!r} is not a bundled pair; bundled pairs are {sorted(BUNDLED)}. For other "
                             f"models pass target= and draft= (hub ids or local folders)")
        root = BUNDLED[name]
        target, draft, tok_source = root / "target", root / "draft", root
        draft_tok_source = None
    else:
        tok_source, draft_tok_source = target, draft
    tokenizer = _tokenizer(tok_source, "target")
    draft_tokenizer = None
    if draft_tok_source is not None:
        try:
            draft_tokenizer = AutoTokenizer.from_pretrained(draft_tok_source)
        except (OSError, ValueError):
            draft_tokenizer = None  # a folder holding only weights shares the target's tokenizer
    target_model = _model(target, "target", dev, dt)
    draft_model = _model(draft, "draft", dev, dt) if draft is not None else None
    vocab = shared_vocab_size(target_model, draft_model, tokenizer, draft_tokenizer, (str(target), str(draft)))
    return Pair(target_model, draft_model, tokenizer, vocab, name or f"{target} / {draft}", dev,
                tokenizer.eos_token_id)
