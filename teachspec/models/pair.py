"""A draft/target pair: two causal LMs that speak the same vocabulary.

Speculative decoding compares the target's p with the draft's q token by token, so both models must index the
same vocabulary. Real pairs often differ in one harmless way: the embedding matrix is padded to a round size
(Qwen2.5-0.5B has 151,936 rows, Qwen2.5-7B 152,064) while the tokenizer is identical. Those extra rows are never
produced by the tokenizer, so both models' logits are sliced to the shared size. Anything else (different
tokenizers) is refused with an error that names both vocabularies.

A pair runs its models as transformers' `generate` would: prompts are encoded with the tokenizer's special tokens
(a BOS for Llama, Gemma and Mistral), and generation stops on every id of the target's
`generation_config.eos_token_id` (one id or a list: instruct models also stop at the end of a turn).

    pair = load_pair("tiny")                          # bundled, offline, ready on CPU in well under a second
    target, draft, tokenizer = pair                   # a pair unpacks like a tuple
    pair = load_pair(target="Qwen/Qwen2.5-1.5B", draft="Qwen/Qwen2.5-0.5B", device="cuda")
    pair = load_pair(target=model, draft=small_model, tokenizer=tokenizer)     # models already in memory
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from teachspec import hub

from teachspec.device import resolve_device, resolve_dtype
from teachspec.models.eagle import EagleHead, load_head
from teachspec.models.packed import pack
from teachspec.models.support import check_config, probe
from teachspec.stopping import eos_ids

BUNDLED = {"tiny": Path(__file__).parent / "tiny"}
HUB_PAIRS = {  # the pairs the course names: (target, draft) on the Hugging Face hub (teachspec/course/pairs.py)
    "smollm2": ("HuggingFaceTB/SmolLM2-360M", "HuggingFaceTB/SmolLM2-135M"),
    "qwen2.5": ("Qwen/Qwen2.5-1.5B", "Qwen/Qwen2.5-0.5B"),
    "smollm2-instruct": ("HuggingFaceTB/SmolLM2-360M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"),
    "qwen2.5-instruct": ("Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),
}


@dataclass
class Pair:
    target: PreTrainedModel
    draft: PreTrainedModel | None
    tokenizer: PreTrainedTokenizerBase
    vocab_size: int  # rows of the logits both models share; logits beyond it are sliced off
    name: str
    device: torch.device
    eos_token_id: int | tuple[int, ...] | None = None  # generation stops after any of these; None never stops early
    eagle: EagleHead | None = None  # a feature-level draft head trained for this target (`speculate="eagle"`)

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

    @property
    def eos(self) -> frozenset[int]:
        """Every id that ends a generation."""
        return eos_ids(self.eos_token_id)

    def encode(self, text: str, special: bool = True) -> list[int]:
        """Token ids of `text`. `special=True` encodes a prompt as the tokenizer does by default (with its BOS, if
        it adds one), which is what `generate` sees; `special=False` encodes a piece appended to ids already held
        (a continuation, a chat turn), which must not get a second BOS."""
        return self.tokenizer.encode(text, add_special_tokens=special)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)

    @property
    def chat_template(self) -> bool:
        """Whether the tokenizer has a chat template (`teachspec.chat` lays turns out with it)."""
        return bool(getattr(self.tokenizer, "chat_template", None))


def check_sources(name, target, draft, tokenizer, eagle) -> None:
    """What load_pair was given, checked before anything loads: each argument's type, and no bundled pair
    quietly standing in for a model that was asked for."""
    for role, source in (("target", target), ("draft", draft)):
        if source is not None and not isinstance(source, (str, Path, PreTrainedModel)):
            raise TypeError(f"{role} must be a hub id, a local folder or a transformers model (or None), got "
                            f"{type(source).__name__} {source!r}")
    if tokenizer is not None and not isinstance(tokenizer, (str, Path, PreTrainedTokenizerBase)):
        raise TypeError(f"tokenizer must be a hub id, a local folder or a transformers tokenizer (or None for the "
                        f"target's own), got {type(tokenizer).__name__} {tokenizer!r}")
    if eagle is not None and not isinstance(eagle, (str, Path)):
        raise TypeError(f"eagle must be a folder holding an EAGLE head (a str or Path), or None, got "
                        f"{type(eagle).__name__} {eagle!r}")
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be the name of a bundled pair (a str), got {type(name).__name__} {name!r}")
    if name is not None and (target is not None or draft is not None):
        given = ", ".join(f"{r}={_named(s)!r}" for r, s in (("target", target), ("draft", draft)) if s is not None)
        raise ValueError(f"give either a bundled pair name or target=/draft=, not both (got name={name!r}, "
                         f"{given}); a bundled pair brings its own target and draft")
    if target is None and draft is not None:
        raise ValueError(f"draft={_named(draft)!r} needs target=: a draft only guesses for a target (without "
                         f"either, the bundled pair 'tiny' loads with its own draft)")


def _from_pretrained(source: str | Path, role: str, device: torch.device, dtype: torch.dtype,
                     options: dict) -> PreTrainedModel:
    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=options.get("trust_remote_code", False))
    except (OSError, ValueError) as e:
        raise FileNotFoundError(
            f"{role}={str(source)!r}: no model found there (expected a local folder with config.json and weights, "
            f"or a Hugging Face hub id reachable from this machine): {e}") from e
    check_config(config, f"{role}={str(source)!r}")  # before any weights load
    bars = hf_logging.is_progress_bar_enabled()
    if Path(source).resolve().is_relative_to(Path(__file__).parent.resolve()):
        hf_logging.disable_progress_bar()  # a bundled model loads in a blink: no bars before a command's output
    try:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **options)
    except OSError as e:
        raise FileNotFoundError(f"{role}={str(source)!r}: no weights found there: {e}") from e
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    if options.get("device_map") is None:
        model = model.to(device)
    return model.eval()


def _prepared(model: PreTrainedModel, role: str) -> PreTrainedModel:
    """Check a model the engine is to run (loaded here or handed in), and pack it for the CPU where that pays."""
    check_config(model.config, role)
    probe(model, role)
    if model.device.type == "cpu" and model.dtype == torch.float32:
        pack(model)
    return model.eval()


def _tokenizer(source: str | Path, role: str, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    try:
        return AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
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


def load_pair(name: str | None = None, *, target: str | Path | PreTrainedModel | None = None,
              draft: str | Path | PreTrainedModel | None = None,
              tokenizer: str | Path | PreTrainedTokenizerBase | None = None,
              device: str | torch.device | None = None, dtype: str | torch.dtype | None = None,
              torch_dtype: str | torch.dtype | None = None, device_map=None, trust_remote_code: bool = False,
              eagle: str | Path | None = None) -> Pair:
    """Load a bundled pair by name, or any two causal LMs that share a vocabulary: hub ids, local folders, or
    transformers models already in memory.

    `draft=None` with a `target` gives a pair with no draft model (prompt lookup and oracle drafters still work);
    a `draft` needs a `target` (a bundled pair brings its own, so `name` takes neither).
    `tokenizer` defaults to the target's (a name or folder); a target given as a model needs one. `device` defaults
    to "cpu"; `dtype` (or its older name `torch_dtype`) to float32 on CPU and bfloat16 on CUDA; `device_map` and
    `trust_remote_code` pass through to `from_pretrained` (`device_map` needs the `accelerate` package). A model given in memory stays where it is, in its dtype.
    `eagle`: a folder holding an EAGLE head trained for the target (`teachspec.models.eagle`); a bundled pair
    brings its own.
    On the CPU in float32 the large linear layers are packed for oneDNN (`teachspec.models.packed`): the same
    numbers, a flatter verification cost, for models whose packed copies take at most 1 GiB
    (`packed.pack(model, max_bytes=None)` packs any). Models the engine cannot roll back (recurrent or
    linear-attention layers, encoder-decoders) are refused here, with the reason (`teachspec.models.support`).
    """
    check_sources(name, target, draft, tokenizer, eagle)
    if torch_dtype is not None and dtype is not None and torch_dtype != dtype:
        raise ValueError(f"dtype={dtype!r} and torch_dtype={torch_dtype!r} disagree; give one (torch_dtype is "
                         f"dtype's older name)")
    from teachspec.threads import use_cpu_policy
    use_cpu_policy()  # no more CPU threads than this process may really use (see teachspec/threads.py)
    dev = resolve_device(device)
    dt = resolve_dtype(dtype if dtype is not None else torch_dtype, dev)
    if name is None and target is None:
        name = "tiny"
    if name is not None:
        if name not in BUNDLED:
            raise ValueError(f"name={name!r} is not a bundled pair; bundled pairs are {sorted(BUNDLED)}. For other "
                             f"models pass target= and draft= (hub ids, local folders or loaded models)")
        root = BUNDLED[name]
        target, draft, tokenizer = root / "target", root / "draft", root if tokenizer is None else tokenizer
        if eagle is None and (root / "eagle").exists():
            eagle = root / "eagle"
    in_memory = [role for role, m in (("target", target), ("draft", draft)) if isinstance(m, PreTrainedModel)]
    if in_memory:
        given = {k: v for k, v in (("device", device), ("dtype", dtype), ("torch_dtype", torch_dtype),
                                   ("device_map", device_map)) if v is not None}
        if given:
            raise ValueError(f"{', '.join(f'{k}={v!r}' for k, v in given.items())} applies to models loaded by name, "
                             f"and {in_memory[0]} is a model already loaded; move it with model.to(...) instead")
    role = "tokenizer"
    if tokenizer is None:
        if isinstance(target, PreTrainedModel):
            raise ValueError("tokenizer=None: a target given as a model needs its tokenizer, e.g. load_pair("
                             "target=model, tokenizer=AutoTokenizer.from_pretrained(...))")
        tokenizer, role = target, "target"  # the target's own: a missing one is the target's problem
    for where, source in (("target", target), ("draft", draft), (role, tokenizer)):
        why = hub.problem(source) if isinstance(source, (str, Path)) and name is None else None
        if why:  # found in a second or two, where transformers takes a minute to say the hub is unreachable
            raise FileNotFoundError(f"{where}={str(source)!r}: {why}")
    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        tokenizer = _tokenizer(tokenizer, role, trust_remote_code)
    draft_tokenizer = None
    if draft is not None and not isinstance(draft, PreTrainedModel) and name is None:
        try:
            draft_tokenizer = AutoTokenizer.from_pretrained(draft, trust_remote_code=trust_remote_code)
        except (OSError, ValueError):
            draft_tokenizer = None  # a folder holding only weights shares the target's tokenizer
    options = {k: v for k, v in (("device_map", device_map), ("trust_remote_code", trust_remote_code)) if v}
    models = []
    for role, source in (("target", target), ("draft", draft)):
        if source is None:
            models.append(None)
            continue
        model = source if isinstance(source, PreTrainedModel) else _from_pretrained(source, role, dev, dt, options)
        models.append(_prepared(model, role if isinstance(source, PreTrainedModel) else f"{role}={str(source)!r}"))
    target_model, draft_model = models
    if draft_model is not None and draft_model.device != target_model.device:
        raise ValueError(f"the target is on {target_model.device} and the draft on {draft_model.device}; speculation "
                         f"compares their distributions token by token, so put both on one device")
    names = (_named(target), _named(draft))
    vocab = shared_vocab_size(target_model, draft_model, tokenizer, draft_tokenizer, names)
    eos = target_model.generation_config.eos_token_id  # what generate stops on: one id or a list
    if eos is None:
        eos = tokenizer.eos_token_id
    eos = tuple(eos) if isinstance(eos, (list, tuple)) else eos
    head = None
    if eagle is not None:
        if not (Path(eagle) / "config.json").exists():
            raise FileNotFoundError(f"eagle={str(eagle)!r}: no EAGLE head there (expected a folder with config.json "
                                    f"and model.safetensors, as `python -m teachspec.tools.train --stage eagle` "
                                    f"writes)")
        head = load_head(Path(eagle), target_model)
    return Pair(target_model, draft_model, tokenizer, vocab, name or f"{names[0]} / {names[1]}", target_model.device,
                eos, head)


def _named(source) -> str:
    """How a model is called in messages: its path or hub id, or its class and name for one in memory."""
    if isinstance(source, PreTrainedModel):
        return f"{type(source).__name__}({getattr(source.config, '_name_or_path', '') or 'in memory'})"
    return str(source)
