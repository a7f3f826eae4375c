"""Train the bundled draft/target pair from scratch, on Python's own documentation and source.

    python -m teachspec.tools.train --stage all           # tokenizer, target, draft, EAGLE head: about 2 hours
    python -m teachspec.tools.train --stage draft         # retrain only the draft against the saved target
    python -m teachspec.tools.train --stage eagle         # retrain only the EAGLE head against the saved target
    python -m teachspec.tools.train --stage draft-vocab   # choose the saved head's draft vocabulary (no training)
    python -m teachspec.tools.train --stage target --resume --target-minutes 40   # train the target further
    cp -r teachspec/models/tiny copier                     # optional: a pair that copies (see **copy**)
    python -m teachspec.tools.train --stage copy --out copier
    python -m teachspec.tools.train --stage draft --draft windowed --out copier
    python -m teachspec.tools.train --out teachspec/models/tiny   # replace the bundled pair, on purpose

Stages, each seeded and each writing into `--out` (default: `trained-pair/` in the current folder; the bundled
pair is replaced only when `--out` names its folder, `teachspec/models/tiny/`):
1. **tokenizer**: byte-level BPE with a 4096-token vocabulary and one special token, `<|endoftext|>`.
2. **target**: a 6-layer, 384-wide Llama trained with cross-entropy for a fixed wall-clock budget. The learning
   rate warms up, then follows a cosine to 10% over the budget, so a slower machine trains fewer steps but still
   finishes its schedule.
3. **draft**: a 1-layer, 128-wide Llama, first trained with cross-entropy, then distilled from the target
   (Hinton et al. 2015): the loss is KL(p || q) on every position plus a little cross-entropy. Half of each
   distillation batch is text the target wrote itself from corpus prompts, because speculation is scored on the
   target's own continuations, not on the corpus (the on-policy idea of DistillSpec, Zhou et al. 2023).
4. **eagle**: the feature-level draft head of `teachspec/models/eagle.py` (one 384-wide decoder layer over the
   target's last hidden state and the next token's embedding), trained with EAGLE's loss (`eagle_loss`) on corpus
   windows and, again, the target's own text, for a fixed budget (30 minutes by default). The target stays frozen.
   Then its draft vocabulary (EAGLE-3): the `--draft-vocab` tokens most frequent in what the stage trained on
   (the corpus and the target's own text, each weighted by its share of the batches, as `token_counts` counts
   them), stored with the head; q is then read out over those tokens only (`teachspec/models/eagle.py`).
5. **draft-vocab** (not part of `all`): the same choice for a head already trained, without training it again; the
   head's card gets each size's coverage (the share of the target's own held-out text the vocabulary holds) and
   greedy agreement, measured on the same held-out text.

**copy** (optional, not part of `all`): the saved target trained further on passages and random runs written twice,
so that it learns to copy from its context (induction heads, Olsson et al. 2022); a quarter of each batch stays
plain text. Python's documentation rarely repeats a passage, so the bundled target never learnt to, and prompt
lookup, whose guesses are copies, pays on it only where it repeats itself. The one-layer draft cannot follow a
target that copies: copying by induction composes two attention layers (the first writes each token's predecessor
into its position, the second finds the earlier position whose predecessor is the current token and copies what
stands there), and against a copying target its greedy alpha fell from 0.83 to 0.64.

**`--draft windowed`**: a 2-layer draft that copies too. A plain 2-layer Llama draft learns the first step of
induction slowly (no sign of copying after 2,000 steps), so this draft is a Qwen3 (Llama's layers with an
attention type per layer) whose first layer is a sliding window of two tokens, itself and its predecessor: it has
the predecessor at hand and nothing else to attend to. On short rows of random runs told twice it starts copying
within a few hundred steps; then it is trained on the corpus and the copy stage's text, and distilled on both and
on the target's own text. Its copy accuracy (`copy_accuracy`) reaches 0.62, where the bundled target's is 0.25.

The bundled pair is trained without either. Measured side by side (`teachspec bench speculative --prompts 16
--new-tokens 96`, 2 cores) against a target given 75 minutes of the copy stage on one thread (880 steps, copy
accuracy 0.25 -> 0.78) and a windowed draft trained with the default budgets, prompt lookup reached 1.92x plain decoding
on the copy-heavy workload (3.17 tokens per target pass), the draft model 1.45x on documentation at temperature 0,
but only 0.97x at temperature 1 (alpha 0.61) and 1.17x transformers' assisted generation with its defaults: the
second layer doubles the draft's cost (c 0.19-0.23).

Weights are saved in float16 (half the size on disk) and upcast when loaded. Training runs in float32: bfloat16
autocast was twice as slow on the CPUs this was built on.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen3Config

from teachspec import kv
from teachspec.models import BUNDLED, corpus
from teachspec.models.eagle import EagleHead, coverage, draft_vocabulary, head_config, load_head, save_head
from teachspec.threads import set_threads, use_cpu_policy

EOS = "<|endoftext|>"
OUT = Path("trained-pair")  # never the bundled pair by default: replacing it takes --out naming its folder
# the EAGLE head's draft vocabulary: chosen by measurement, side by side with the draft model
# (teachspec/bench/README.md, "Trees of guesses and the EAGLE head": 1,024 of 4,096 tokens hold nine in ten of the
# target's held-out tokens, and a head pass over them costs less than a draft-model pass)
DRAFT_VOCAB = 1024
DRAFT_VOCAB_SIZES = (256, 512, 1024, 2048)  # the sizes whose coverage and agreement the card reports


@dataclass
class Size:
    n_layer: int
    n_embd: int
    n_head: int
    window: int = 0  # > 0: the first layer attends only to the last `window` tokens, itself included


TARGET = Size(n_layer=6, n_embd=384, n_head=6)
DRAFTS = {"plain": Size(n_layer=1, n_embd=128, n_head=2), "windowed": Size(n_layer=2, n_embd=128, n_head=2, window=2)}


def model_config(size: Size, vocab_size: int, eos_id: int, context: int) -> LlamaConfig | Qwen3Config:
    """A Llama config, or, for a windowed first layer, Qwen3's: Llama's layers plus a norm on queries and keys,
    with an attention type per layer."""
    common = dict(
        vocab_size=vocab_size, hidden_size=size.n_embd, intermediate_size=4 * size.n_embd,
        num_hidden_layers=size.n_layer, num_attention_heads=size.n_head, num_key_value_heads=size.n_head,
        max_position_embeddings=context, tie_word_embeddings=True,  # tying halves the small models' size
        bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id,
    )
    if not size.window:
        return LlamaConfig(**common)
    return Qwen3Config(**common, head_dim=size.n_embd // size.n_head, use_sliding_window=True,
                       sliding_window=size.window,
                       layer_types=["sliding_attention"] + ["full_attention"] * (size.n_layer - 1))


# ----------------------------------------------------------------------------------------------------------------
# tokenizer and data

def train_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return tok


def save_tokenizer(tok: Tokenizer, out: Path, context: int) -> None:
    """tokenizer.json plus the small config that lets `AutoTokenizer.from_pretrained(out)` open it."""
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS, pad_token=EOS)
    wrapped.model_max_length = context
    wrapped.save_pretrained(out)


def token_stream(tok: Tokenizer, docs: list[corpus.Document], doc_repeats: int) -> torch.Tensor:
    """All documents as one long run of token ids, each followed by EOS; documentation repeated `doc_repeats`
    times so the much larger source does not drown it."""
    eos = tok.token_to_id(EOS)
    ids: list[int] = []
    encoded = tok.encode_batch([d.text for d in docs])
    for d, e in zip(docs, encoded):
        for _ in range(1 if d.kind == "source" else doc_repeats):
            ids.extend(e.ids)
            ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)


def batches(stream: torch.Tensor, batch: int, seq_len: int, gen: torch.Generator):
    while True:
        starts = torch.randint(0, len(stream) - seq_len - 1, (batch,), generator=gen)
        x = torch.stack([stream[s:s + seq_len + 1] for s in starts.tolist()])  # (B, T+1)
        yield x[:, :-1], x[:, 1:]


@torch.no_grad()
def val_loss(model: LlamaForCausalLM, stream: torch.Tensor, seq_len: int, n_windows: int = 64) -> float:
    model.eval()
    starts = torch.linspace(0, len(stream) - seq_len - 2, n_windows).long()
    total = 0.0
    for s in starts.tolist():
        x = stream[s:s + seq_len + 1][None]
        total += F.cross_entropy(model(input_ids=x[:, :-1]).logits[0], x[0, 1:]).item()
    model.train()
    return total / n_windows


def _randint(lo: int, hi: int, gen: torch.Generator) -> int:
    return int(torch.randint(lo, hi, (1,), generator=gen))


def _run_told_twice(vocab: int, lo: int, hi: int, gen: torch.Generator) -> list[int]:
    """lo..hi-1 random tokens, then the same again: the second telling can only be predicted by copying."""
    run = torch.randint(0, vocab, (_randint(lo, hi, gen),), generator=gen).tolist()
    return run + run


def _packed(piece, seq_len: int) -> torch.Tensor:
    row: list[int] = []
    while len(row) < seq_len + 1:
        row += piece()
    return torch.tensor(row[:seq_len + 1])


def copy_batches(stream: torch.Tensor, batch: int, seq_len: int, sep: list[int], eos: int, vocab: int,
                 gen: torch.Generator):
    """Rows in turn: a plain corpus window; corpus passages of 16-100 tokens each written twice (passage, a blank
    line, the passage again); two rows of random-token runs of 8-60 written twice back to back. The random runs can
    only be predicted by copying, which is what makes the model learn to copy rather than to recall."""
    def repeated_passage() -> list[int]:
        n, s = _randint(16, 101, gen), _randint(0, len(stream) - 101, gen)
        passage = stream[s:s + n].tolist()
        return passage + sep + passage + [eos]

    def repeated_noise() -> list[int]:
        return _run_told_twice(vocab, 8, 61, gen)

    while True:
        rows = []
        for i in range(batch):
            if i % 4 == 0:
                s = _randint(0, len(stream) - seq_len - 1, gen)
                rows.append(stream[s:s + seq_len + 1])
            else:
                rows.append(_packed(repeated_passage if i % 4 == 1 else repeated_noise, seq_len))
        x = torch.stack(rows)
        yield x[:, :-1], x[:, 1:]


def short_runs(batch: int, seq_len: int, vocab: int, gen: torch.Generator):
    """Short rows of random runs of 4-12 tokens, each written twice: where a draft first learns to copy. In a short
    row a copied token is one of few candidates, so the gradient towards copying is strong from the first step."""
    while True:
        x = torch.stack([_packed(lambda: _run_told_twice(vocab, 4, 13, gen), seq_len) for _ in range(batch)])
        yield x[:, :-1], x[:, 1:]


@torch.no_grad()
def copy_accuracy(model: LlamaForCausalLM, stream: torch.Tensor, sep: list[int], n: int = 24,
                  length: int = 96) -> float:
    """Teacher-forced top-1 accuracy on the second telling of held-out passages written twice."""
    was_training = model.training
    model.eval()
    hits = 0
    for s in torch.linspace(0, len(stream) - length - 1, n).long().tolist():
        passage = stream[s:s + length].tolist()
        ids = torch.tensor([passage + sep + passage])
        guess = model(input_ids=ids[:, :-1]).logits[0, -length:].argmax(-1)
        hits += int((guess == ids[0, -length:]).sum())
    model.train(was_training)
    return hits / (n * length)


# ----------------------------------------------------------------------------------------------------------------
# the training loop, shared by the target and both draft phases

@dataclass
class RunLog:
    minutes: float = 0.0
    steps: int = 0
    tokens: int = 0
    train_loss: float = float("nan")
    val_loss: float = float("nan")


def fit(model, loss_fn, data, minutes: float, lr: float, val, seq_len: int, label: str, warmup: int = 100) -> RunLog:
    """Train until the wall-clock budget is spent; lr warms up, then a cosine over the *time* budget to 10%.
    `val`: a token stream to measure validation loss on, or a function of the model that returns its own score."""
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (no_decay if p.ndim < 2 else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95))
    log, t0, ema = RunLog(), time.time(), None
    budget = minutes * 60
    evaluate = val if callable(val) else lambda m: val_loss(m, val, seq_len)  # a stream, or a model's own check
    while (elapsed := time.time() - t0) < budget:
        frac = elapsed / budget
        scale = min(1.0, (log.steps + 1) / warmup) * (0.1 + 0.45 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr * scale
        x, y = next(data)
        loss = loss_fn(model, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        log.steps += 1
        log.tokens += x.numel()
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        if log.steps % 100 == 0:
            print(f"[{label}] step {log.steps} {elapsed / 60:.1f} min loss {ema:.3f} "
                  f"{log.tokens / elapsed:.0f} tok/s", flush=True)
        if log.steps % 1000 == 0:
            print(f"[{label}] val {evaluate(model):.3f}", flush=True)
    log.minutes, log.train_loss, log.val_loss = (time.time() - t0) / 60, ema, evaluate(model)
    print(f"[{label}] done: {asdict(log)}", flush=True)
    return log


def cross_entropy(model, x, y):
    return F.cross_entropy(model(input_ids=x).logits.flatten(0, 1), y.flatten())


def distillation(target, ce_weight: float = 0.1):
    """KL(p || q) at every position (p target, q draft) plus a little cross-entropy on the data."""
    def loss_fn(model, x, y):
        with torch.no_grad():
            log_p = F.log_softmax(target(input_ids=x).logits, dim=-1)
        log_q = F.log_softmax(model(input_ids=x).logits, dim=-1)
        kl = F.kl_div(log_q.flatten(0, 1), log_p.flatten(0, 1), log_target=True, reduction="batchmean")
        return kl + ce_weight * F.nll_loss(log_q.flatten(0, 1), y.flatten())
    return loss_fn


@torch.no_grad()
def self_written(target, stream: torch.Tensor, n_seq: int, prompt_len: int, new: int, gen: torch.Generator):
    """The target's own continuations of random corpus windows, half greedy and half sampled at temperature 1."""
    rows = []
    for i in range(0, n_seq, 32):
        starts = torch.randint(0, len(stream) - prompt_len, (32,), generator=gen)
        prompt = torch.stack([stream[s:s + prompt_len] for s in starts.tolist()])
        greedy = i % 64 == 0
        out = target.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new,
                              min_new_tokens=new, do_sample=not greedy, top_k=None, top_p=None,
                              temperature=None if greedy else 1.0, pad_token_id=0)
        rows.append(out)
    return torch.cat(rows)  # (n_seq, prompt_len + new)


def row_batches(rows: torch.Tensor, batch: int, gen: torch.Generator):
    while True:
        x = rows[torch.randint(0, len(rows), (batch,), generator=gen)]
        yield x[:, :-1], x[:, 1:]


def mixed(*sources):
    while True:
        for source in sources:
            yield next(source)


def halves(data):
    """The same batches cut to half as many rows (distillation runs the target too, so its batches are smaller)."""
    for x, y in data:
        yield x[:len(x) // 2], y[:len(y) // 2]


def two_passes(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention mask and position ids of EAGLE-3's training-time test laid out as one sequence: pass 1's n
    entries (positions 1 .. n, causal), then pass 2's entries at positions 2 .. n, where entry t sees pass 1's
    entries before t and itself, as a second guess does at inference (the cache holds real entries before it)."""
    allowed = torch.zeros(2 * n - 1, 2 * n - 1, dtype=torch.bool)
    allowed[:n, :n] = torch.ones(n, n, dtype=torch.bool).tril()
    allowed[n:, :n] = torch.ones(n - 1, n, dtype=torch.bool).tril()  # pass 2's entry t: pass 1's before t
    allowed[n:, n:] = torch.eye(n - 1, dtype=torch.bool)  # ... and itself
    mask = torch.zeros(1, 1, 2 * n - 1, 2 * n - 1).masked_fill(~allowed, torch.finfo(torch.float32).min)
    return mask, torch.cat([torch.arange(1, n + 1), torch.arange(2, n + 1)])[None]


def eagle_loss(target, noise: float = 0.1):
    """EAGLE's objective for the head, over two passes.

    Pass 1 reads the target's real features: entry t gets [f_{t-1} ; e(x_t)] and must predict f_t. The loss is
    EAGLE's: a SmoothL1 regression of f^_t on f_t, plus KL(p || q) between the target's distribution lm_head(f_t)
    and the head's lm_head(f^_t). The input features carry a little Gaussian noise (EAGLE's uniform noise, here
    scaled to the features' size) because at inference they are the head's own, imperfect, guesses.
    Pass 2 is the "training-time test" of EAGLE-3: drafting a second guess, the head reads its *own* f^_{t-1}
    beside the real features of every earlier position (held in its cache). Laid out as one sequence, pass 2's
    entry t sees pass 1's entries before t and itself, through a 4-D mask, and is scored like pass 1."""
    embed, lm_head, base = target.get_input_embeddings(), target.get_output_embeddings(), target.get_decoder()

    def step_loss(guess, real, log_p):
        log_q = F.log_softmax(lm_head(guess), dim=-1)
        kl = F.kl_div(log_q.flatten(0, 1), log_p.flatten(0, 1), log_target=True, reduction="batchmean")
        return kl + F.smooth_l1_loss(guess, real)

    def loss_fn(head, x, y):
        b, t = x.shape
        with torch.no_grad():
            f = base(input_ids=x).last_hidden_state  # (B, T, H): the target's features
            log_p = F.log_softmax(lm_head(f[:, 1:]), dim=-1)  # p of what follows x_1 .. x_{T-1}
            e = embed(x[:, 1:])  # (B, T-1, H)
        f_in = f[:, :-1] + noise * f.pow(2).mean(-1, keepdim=True).sqrt()[:, :-1] * torch.randn_like(f[:, :-1])
        n = t - 1
        mask, pos = two_passes(n)
        pos = pos.expand(b, -1)
        first = head(f_in, e, pos[:, :n], attention_mask=mask[..., :n, :n])  # pass 1 alone, for its guesses
        both = head(torch.cat([f_in, first[:, :-1]], 1), torch.cat([e, e[:, 1:]], 1), pos,
                    attention_mask=mask.expand(b, -1, -1, -1))
        return (step_loss(both[:, :n], f[:, 1:], log_p)
                + step_loss(both[:, n:], f[:, 2:], log_p[:, 1:]))

    return loss_fn


@torch.no_grad()
def eagle_agreement(head, target, rows: torch.Tensor) -> list[float]:
    """Greedy agreement of the head with the target on held-out rows, one and two guesses ahead: the share of
    positions where argmax q equals argmax p (the greedy alpha of a first and of a second guess)."""
    head.eval()
    embed, lm_head, base = target.get_input_embeddings(), target.get_output_embeddings(), target.get_decoder()
    vocab = head.draft_vocab

    def guess(f_hat):  # the head's greedy guess: over its draft vocabulary, when it has one
        logits = lm_head(f_hat)
        return logits.argmax(-1) if vocab is None else vocab[logits[..., vocab].argmax(-1)]

    f = base(input_ids=rows).last_hidden_state
    best = lm_head(f).argmax(-1)  # (B, T): the target's greedy next token after each position
    pos = torch.arange(1, rows.shape[1]).expand(len(rows), -1)
    first = head(f[:, :-1], embed(rows[:, 1:]), pos)  # f^_t from real features
    one = (guess(first) == best[:, 1:]).float().mean().item()
    # a second guess: entry t reads f^_{t-1}; every earlier entry is real (run one position at a time)
    cache, hits = kv.new_cache(head.layers), []
    for t in range(1, min(rows.shape[1], 65)):
        if t >= 2:  # the entry at t from the guessed feature, not kept
            second = head(first[:, t - 2:t - 1], embed(rows[:, t:t + 1]), pos[:, t - 1:t], cache=cache)
            hits.append((guess(second[:, -1]) == best[:, t]).float())
            kv.crop_to(cache, t - 1)
        head(f[:, t - 1:t], embed(rows[:, t:t + 1]), pos[:, t - 1:t], cache=cache)
    head.train()
    return [one, torch.stack(hits).mean().item()]


def token_counts(vocab: int, *sources: torch.Tensor) -> torch.Tensor:
    """How often each token id occurs in the sources (token ids of any shape), each source counted as a share of
    its own length and the shares averaged: the eagle stage's batches alternate corpus and the target's own text,
    so each weighs what it weighs in training, however many tokens of it there are."""
    return sum(torch.bincount(x.flatten(), minlength=vocab).double() / x.numel() for x in sources) / len(sources)


@torch.no_grad()
def vocab_report(head, target, counts: torch.Tensor, held_out: torch.Tensor, prompt_len: int, size: int) -> dict:
    """Give `head` the `size` tokens most frequent in `counts` as its draft vocabulary (0: none) and report, for it
    and for each of `DRAFT_VOCAB_SIZES`, the coverage (the share of the target's own held-out tokens, `held_out`'s
    rows after their `prompt_len` prompt tokens, that it holds) and the greedy agreement of a first and a second
    guess over it (`eagle_agreement`)."""
    written, out = held_out[:, prompt_len:], {"sizes": {}}
    for v in sorted({*DRAFT_VOCAB_SIZES, size} - {0}):
        head.draft_vocab = draft_vocabulary(counts, v)
        out["sizes"][v] = {"coverage": coverage(head.draft_vocab, written),
                           "greedy_agreement": eagle_agreement(head, target, held_out)}
    head.draft_vocab = None
    out["sizes"][counts.numel()] = {"coverage": 1.0, "greedy_agreement": eagle_agreement(head, target, held_out)}
    head.draft_vocab = draft_vocabulary(counts, size) if size else None
    out.update(size=size or counts.numel(), held_out_tokens=written.numel(),
               coverage=out["sizes"][size or counts.numel()]["coverage"])
    return out


# ----------------------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m teachspec.tools.train", description=__doc__.splitlines()[0])
    ap.add_argument("--stage", choices=["tokenizer", "target", "copy", "draft", "eagle", "draft-vocab", "all"],
                    default="all")
    ap.add_argument("--out", type=Path, default=OUT,
                    help="the folder to train into (default: trained-pair/ here; teachspec/models/tiny replaces the "
                         "bundled pair)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--context", type=int, default=2048, help="max_position_embeddings of both models")
    ap.add_argument("--seq-len", type=int, default=1024, help="training window")
    ap.add_argument("--long-seq-len", type=int, default=2048, help="window for the target's last phase")
    ap.add_argument("--target-minutes", type=float, default=60)
    ap.add_argument("--long-fraction", type=float, default=0.15, help="share of the target budget on long windows")
    ap.add_argument("--copy-minutes", type=float, default=65)
    ap.add_argument("--draft", choices=sorted(DRAFTS), default="plain",
                    help="the bundled one-layer draft, or the two-layer one that copies (see the docstring)")
    ap.add_argument("--induction-minutes", type=float, default=3,
                    help="a windowed draft's first phase: random runs told twice")
    ap.add_argument("--draft-minutes", type=float, default=5)
    ap.add_argument("--kd-minutes", type=float, default=10)
    ap.add_argument("--self-written", type=int, default=512, help="target continuations to distil on")
    ap.add_argument("--eagle-minutes", type=float, default=30, help="the EAGLE head's budget")
    ap.add_argument("--draft-vocab", type=int, default=DRAFT_VOCAB,
                    help="the EAGLE head's draft vocabulary: how many of the most frequent tokens q is read out over "
                         "(0: the whole vocabulary)")
    ap.add_argument("--threads", type=int, default=None,
                    help="CPU threads for torch (default: the CPUs this process may use; see teachspec/threads.py)")
    ap.add_argument("--resume", action="store_true",
                    help="continue training the saved target (or with --stage eagle, the saved head) instead of "
                         "starting from random weights")
    ap.add_argument("--lr", type=float, default=1e-3, help="the target's peak learning rate")
    args = ap.parse_args(argv)
    # a stage that continues earlier work needs that work in --out, which by default is a new folder
    needs = ([] if args.stage in ("tokenizer", "all") else ["tokenizer.json"]) + (
        ["target"] if args.stage in ("copy", "draft", "eagle", "draft-vocab") or args.resume else []) + (
        ["eagle"] if args.stage == "draft-vocab" else [])
    missing = [name for name in needs if not (args.out / name).exists()]
    if missing:
        ap.error(f"--stage {args.stage} continues from {' and '.join(missing)} in --out {args.out}, which has none: "
                 f"train them first (--stage all), or start from the bundled pair: cp -r {BUNDLED['tiny']} {args.out}")
    if not 0 <= args.draft_vocab <= args.vocab:
        ap.error(f"--draft-vocab must be in [0, {args.vocab}] (0: the whole vocabulary), got {args.draft_vocab}")
    if args.threads is not None:
        set_threads(args.threads)
    else:
        use_cpu_policy()
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    stats_path = args.out / "training.json"
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else {}

    train_docs, val_docs = corpus.build(seed=args.seed)
    if args.stage in ("tokenizer", "all"):
        tok = train_tokenizer([d.text for d in train_docs], args.vocab)
        save_tokenizer(tok, args.out, args.context)
    tok = Tokenizer.from_file(str(args.out / "tokenizer.json"))
    eos = tok.token_to_id(EOS)
    train = token_stream(tok, train_docs, doc_repeats=2)
    val = token_stream(tok, [d for d in val_docs if d.kind != "source"], doc_repeats=1)
    stats["corpus"] = {"train_documents": len(train_docs), "val_documents": len(val_docs),
                       "train_tokens_per_epoch": len(train), "val_tokens": len(val),
                       "train_chars": sum(len(d.text) for d in train_docs)}
    print(stats["corpus"], flush=True)
    gen = torch.Generator().manual_seed(args.seed)

    if args.stage in ("target", "all"):
        if args.resume:
            target = LlamaForCausalLM.from_pretrained(args.out / "target", dtype=torch.float32)
            earlier = stats["target"]["phases"]
            gen.manual_seed(args.seed + len(earlier))  # fresh windows, not a replay of the first run's batches
        else:
            target = LlamaForCausalLM(model_config(TARGET, tok.get_vocab_size(), eos, args.context))
            earlier = []
        short = args.target_minutes * (1 - args.long_fraction)
        log1 = fit(target, cross_entropy, batches(train, 4, args.seq_len, gen), short, args.lr, val, args.seq_len,
                   "target")
        log2 = fit(target, cross_entropy, batches(train, 2, args.long_seq_len, gen),
                   args.target_minutes - short, 3e-4, val, args.long_seq_len, "target-long", warmup=10)
        target.to(torch.float16).save_pretrained(args.out / "target")
        stats["target"] = {"params": sum(p.numel() for p in target.parameters()), "size": asdict(TARGET),
                           "phases": earlier + [asdict(log1), asdict(log2)],
                           "seq_lens": [args.seq_len, args.long_seq_len]}
        stats_path.write_text(json.dumps(stats, indent=2))

    if args.stage == "copy":
        target = LlamaForCausalLM.from_pretrained(args.out / "target", dtype=torch.float32)
        phases = stats["target"]["phases"]
        gen.manual_seed(args.seed + len(phases))
        sep = tok.encode("\n\n").ids
        before = copy_accuracy(target, val, sep)
        data = copy_batches(train, 16, 256, sep, eos, tok.get_vocab_size(), gen)
        log = fit(target, cross_entropy, data, args.copy_minutes, args.lr, val, args.seq_len, "copy", warmup=20)
        after = copy_accuracy(target, val, sep)
        print(f"[copy] copy accuracy {before:.3f} -> {after:.3f}", flush=True)
        target.to(torch.float16).save_pretrained(args.out / "target")
        stats["target"]["phases"] = phases + [asdict(log)]
        stats["target"]["copy_accuracy"] = {"before": before, "after": after}
        stats_path.write_text(json.dumps(stats, indent=2))

    if args.stage in ("draft", "all"):
        size = DRAFTS[args.draft]
        target = LlamaForCausalLM.from_pretrained(args.out / "target", dtype=torch.float32).eval()
        draft = AutoModelForCausalLM.from_config(model_config(size, tok.get_vocab_size(), eos, args.context))
        sep = tok.encode("\n\n").ids
        data, phases = batches(train, 16, 256, gen), []
        copying = copy_batches(train, 16, 256, sep, eos, tok.get_vocab_size(), gen) if size.window else None
        if size.window:  # learn to copy first, then keep copying in every later batch
            phases.append(fit(draft, cross_entropy, short_runs(64, 32, tok.get_vocab_size(), gen),
                              args.induction_minutes, 3e-3, val, 256, "draft-copy", warmup=50))
            data = mixed(data, copying)
        phases.append(fit(draft, cross_entropy, data, args.draft_minutes, 3e-3, val, 256, "draft"))
        t0 = time.time()
        own = self_written(target, train, n_seq=args.self_written, prompt_len=64, new=192, gen=gen)
        gen_minutes = (time.time() - t0) / 60
        print(f"[draft] target wrote {own.numel()} tokens in {gen_minutes:.1f} min", flush=True)
        sources = [batches(train, 8, 256, gen), row_batches(own, 8, gen)] + ([halves(copying)] if copying else [])
        phases.append(fit(draft, distillation(target), mixed(*sources), args.kd_minutes, 1e-3, val, 256,
                          "draft-kd", warmup=10))
        draft.to(torch.float16).save_pretrained(args.out / "draft")
        stats["draft"] = {"params": sum(p.numel() for p in draft.parameters()), "size": asdict(size),
                          "phases": [asdict(log) for log in phases], "self_written_tokens": own.numel(),
                          "self_written_minutes": gen_minutes}
        if size.window:
            stats["draft"]["copy_accuracy"] = copy_accuracy(draft, val, sep)
        stats_path.write_text(json.dumps(stats, indent=2))

    if args.stage in ("eagle", "all"):
        target = LlamaForCausalLM.from_pretrained(args.out / "target", dtype=torch.float32).eval()
        target.requires_grad_(False)
        earlier = stats.get("eagle") if args.resume else None
        head = load_head(args.out / "eagle", target, lowered=False).train() if earlier else \
            EagleHead(head_config(target))
        if earlier:
            gen.manual_seed(args.seed + earlier["steps"])  # fresh batches and text, not a replay of the first run's
        t0 = time.time()
        own = self_written(target, train, n_seq=args.self_written, prompt_len=64, new=192, gen=gen)
        gen_minutes = (time.time() - t0) / 60
        held_out = self_written(target, val, n_seq=32, prompt_len=64, new=64, gen=gen)
        data = mixed(batches(train, 8, 255, gen), row_batches(own, 8, gen))
        log = fit(head, eagle_loss(target), data, args.eagle_minutes, 1e-3, lambda m: -eagle_agreement(
            m, target, held_out)[0], 255, "eagle", warmup=20)
        head.draft_vocab = None  # agreement over the whole vocabulary first: what training reached
        one, two = eagle_agreement(head, target, held_out)
        before = earlier or dict.fromkeys(("minutes", "self_written_minutes", "steps", "tokens"), 0)
        card = {"params": sum(p.numel() for p in head.parameters()), "minutes": before["minutes"] + log.minutes,
                "self_written_minutes": before["self_written_minutes"] + gen_minutes,
                "steps": before["steps"] + log.steps, "tokens": before["tokens"] + log.tokens,
                "train_loss": log.train_loss, "greedy_agreement": [one, two]}
        print(f"[eagle] greedy agreement, first guess {one:.3f}, second guess {two:.3f}", flush=True)
        card["draft_vocab"] = vocab_report(head, target, token_counts(args.vocab, train, own), held_out, 64,
                                           args.draft_vocab) | {"counted_tokens": {"corpus": len(train),
                                                                                   "target": own.numel()}}
        save_head(head, args.out / "eagle", card)
        stats["eagle"] = card
        stats_path.write_text(json.dumps(stats, indent=2))


    if args.stage == "draft-vocab":  # a trained head's draft vocabulary, chosen again; its weights stay as they are
        target = LlamaForCausalLM.from_pretrained(args.out / "target", dtype=torch.float32).eval()
        head = load_head(args.out / "eagle", target, lowered=False)
        card = json.loads((args.out / "eagle" / "config.json").read_text())["eagle"]
        gen.manual_seed(args.seed + card.get("steps", 0) + 1)
        t0 = time.time()
        own = self_written(target, train, n_seq=args.self_written, prompt_len=64, new=192, gen=gen)
        held_out = self_written(target, val, n_seq=64, prompt_len=64, new=64, gen=gen)
        print(f"[draft-vocab] target wrote {own.numel() + held_out.numel()} tokens in "
              f"{(time.time() - t0) / 60:.1f} min", flush=True)
        card["draft_vocab"] = vocab_report(head, target, token_counts(args.vocab, train, own), held_out, 64,
                                           args.draft_vocab) | {"counted_tokens": {"corpus": len(train),
                                                                                   "target": own.numel()}}
        for v, row in card["draft_vocab"]["sizes"].items():
            print(f"[draft-vocab] {v} tokens: coverage {row['coverage']:.3f}, greedy agreement "
                  f"{row['greedy_agreement'][0]:.3f} / {row['greedy_agreement'][1]:.3f}", flush=True)
        save_head(head, args.out / "eagle", card)
        stats["eagle"] = card
        stats_path.write_text(json.dumps(stats, indent=2))


if __name__ == "__main__":
    main()
