"""Plain autoregressive decoding: the baseline every speedup is measured against.

One target forward pass per token, each on top of the KV cache of everything before it:

    logits = target(prompt)                       # prefill: the whole prompt in one pass
    repeat: x ~ warp(logits[-1]); logits = target(x)

Greedy output is token-identical to transformers' own `generate`, with the same eos ids and stop strings (tests
check it on nine model families). Each step is recorded exactly as the engine records a speculation step with
k = 0 guesses, a `Verify` (one target pass over n = 1 position) and a `Bonus` (the token drawn from p), so the views
that animate speculation show the baseline with no special case.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel

from teachspec import kv
from teachspec.device import synchronize
from teachspec.events import Bonus, EventLog, Finish, Prefill, RequestStart, Verify
from teachspec.models.pair import Pair, load_pair
from teachspec.sampling import SamplingParams, sample, warp
from teachspec.stats import Stats
from teachspec.stopping import StopRule, eos_ids, stop_strings
from teachspec.validate import check_context, check_int, check_prompt, check_seed


@dataclass
class Generation:
    text: str  # the new text only
    tokens: list[int]  # the new token ids
    prompt: list[int]
    finish_reason: str  # "eos", "stop" (a stop string) or "length"
    stats: Stats = field(default_factory=Stats)


def pick(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> tuple[int, float]:
    """Choose the next token from one row of logits; return it with its probability under the warped p."""
    p = warp(logits, params)
    token = int(p.argmax()) if params.greedy else int(sample(p, generator))
    return token, float(p[token])


@torch.inference_mode()
def decode(model: PreTrainedModel, prompt: list[int], max_new_tokens: int, params: SamplingParams,
           generator: torch.Generator | None, eos_token_id, vocab_size: int, events: EventLog | None = None,
           request: int = 0, rule: StopRule | None = None) -> tuple[list[int], str, Stats]:
    """Decode up to max_new_tokens after `prompt`; stop after a token in `eos_token_id` (an id, a list or None),
    or as `rule` says when one is given (eos ids and stop strings, `teachspec.stopping`)."""
    rule = rule if rule is not None else StopRule(eos_ids(eos_token_id))
    events = events if events is not None else EventLog()
    stats = Stats(prompt_tokens=len(prompt))
    events.emit(RequestStart, request, prompt_tokens=len(prompt), prompt=list(prompt))
    t_start = time.perf_counter()
    tokens: list[int] = []
    reason = "length"
    if max_new_tokens > 0:
        cache, seq = kv.new_cache(model), list(prompt)  # seq: every token so far, for the stop strings
        logits = kv.forward(model, prompt, cache, 1, vocab_size)[0]  # prefill yields the first token's logits
        synchronize(logits.device)
        ms = 1e3 * (time.perf_counter() - t_start)
        stats.target_passes, stats.target_s = 1, ms / 1e3
        events.emit(Prefill, request, cached=0, computed=len(prompt), ms=ms)
        while True:
            token, p = pick(logits, params, generator)
            tokens.append(token)
            if len(tokens) == 1:
                stats.mark_first_step(1, time.perf_counter() - t_start)
            step, position = len(tokens) - 1, len(prompt) + len(tokens) - 1
            events.emit(Verify, request, step=step, position=position, n=1, ms=ms)
            events.emit(Bonus, request, step=step, position=position, token=token, p=p)
            _, why = rule.check(seq, [token])
            seq.append(token)
            if why is not None:
                reason = why
                break
            if len(tokens) == max_new_tokens:
                break
            t0 = time.perf_counter()
            logits = kv.forward(model, [token], cache, 1, vocab_size)[0]
            synchronize(logits.device)
            ms = 1e3 * (time.perf_counter() - t0)
            stats.target_s += ms / 1e3
            stats.target_passes += 1
    stats.wall_s = time.perf_counter() - t_start
    stats.new_tokens = len(tokens)
    events.emit(Finish, request, new_tokens=len(tokens), reason=reason, ms=1e3 * stats.wall_s)
    return tokens, reason, stats


def generate(prompt: str | list[int], max_new_tokens: int = 64, temperature: float = 0.0, top_k: int | None = None,
             top_p: float | None = None, seed: int | None = None, pair: Pair | str = "tiny",
             events: EventLog | None = None, stop: str | list[str] | None = None) -> Generation:
    """Continue `prompt` (text, encoded with the tokenizer's special tokens, or token ids) with the pair's target
    model, one token per forward pass, until an eos id of the pair, a `stop` string, or max_new_tokens."""
    pair = load_pair(pair) if isinstance(pair, str) else pair
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, 0)
    rule = StopRule(pair.eos, stop_strings(stop), pair.decode)
    ids = check_prompt(prompt, pair.encode)
    check_context(len(ids), max_new_tokens, pair.context)
    generator = torch.Generator(device=pair.device)
    generator.manual_seed(check_seed(seed))
    tokens, reason, stats = decode(pair.target, ids, max_new_tokens, params, generator, None, pair.vocab_size,
                                   events, rule=rule)
    return Generation(pair.decode(tokens), tokens, ids, reason, stats)
