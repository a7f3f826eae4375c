"""Scoring: what the target thinks of given continuations of a prompt, for `select`: `score(engine, prompt, choices)`.

    log p(c | prompt) = sum_i log p(c_i | prompt, c_0 .. c_{i-1})

from the raw logits (temperature 1, no top-k or top-p): a score belongs to the model, not to a sampling setting.

A scoring is one request on the engine, run like any other (`Engine.running`): it leases the prompt's longest
cached prefix from the radix tree, computes the rest of the prompt once, then runs each continuation's tokens but
the last on top of it (the last token is only read off the logits) and cuts the cache back to the prompt. The
prompt is then stored, with the draft model's KV too, so the call that follows (a `gen` after a `select`) reuses
all of it. With the cache off nothing is kept: every continuation computes the whole prompt again, as separate
requests would.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from teachspec import kv
from teachspec.device import synchronize
from teachspec.engine import Engine
from teachspec.events import Prefill, Score
from teachspec.request import Request
from teachspec.sampling import SamplingParams
from teachspec.speculative.drafters import ModelDrafter
from teachspec.speculative.policies import make_policy
from teachspec.stats import Stats
from teachspec.stopping import StopRule
from teachspec.validate import check_int


@dataclass
class Scored:
    """What the target thinks of one continuation of a prompt."""

    tokens: list[int]      # the continuation's ids
    logprobs: list[float]  # log p(tokens[i] | prompt + tokens[:i]), one per token
    stats: Stats           # prompt_tokens: prompt + tokens[:-1], what the target must see; cached_tokens: of the
                           # prompt, what this continuation did not compute (the radix cache, or an earlier one)

    @property
    def logprob(self) -> float:
        """log p(continuation | prompt): the sum over its tokens, what `select` ranks choices by."""
        return sum(self.logprobs)


def score(engine: Engine, prompt: str | list[int], continuations: list) -> list[Scored]:
    """The target's log-probability of each continuation after `prompt`.

    A continuation given as text is encoded *on its own* (no special tokens) and its ids appended to the prompt's,
    the way a program appends text to its state; so the ids scored are ids(prompt) + ids(choice), which can differ
    from ids(prompt text + choice text) where a tokenizer would merge across the seam."""
    tails = checked_continuations(engine, continuations)
    ids = engine.checked_prompt(prompt, 0)
    engine.checked_prompt(ids + max(tails, key=len), 0)  # the longest continuation must fit the context too
    drafter = ModelDrafter(engine.pair.draft, engine.pair.vocab_size) if engine.pair.draft is not None else None
    r = Request(engine.next_id(), ids, 0, SamplingParams(), StopRule(), drafter, make_policy(0), None)
    r.reason = "score"
    scored, first = [], None  # first: the logits at the prompt's last position, p(first token) for every tail
    with torch.inference_mode(), engine.running(r):
        for tail in tails:
            first = score_one(engine, r, tail, first, scored)
    return scored


def score_on(engine, prompt: list[int], continuations: list) -> list[Scored]:
    """`score` on a local `Engine`; an engine elsewhere (`teachspec.serving.RemoteEngine`, which a program may run
    on as well) scores on its own server, by its `score(prompt, continuations)`, and gives the same `Scored`s."""
    if isinstance(engine, Engine):
        return score(engine, prompt, continuations)
    return engine.score(prompt, continuations)


def checked_continuations(engine: Engine, continuations) -> list[list[int]]:
    if not isinstance(continuations, (list, tuple)) or not continuations:
        raise ValueError(f"continuations must be a non-empty list of texts or token-id lists, got {continuations!r}")
    tails = []
    for i, c in enumerate(continuations):
        if isinstance(c, str):
            tail = engine.pair.encode(c, special=False)  # appended to the prompt: no second BOS
        elif isinstance(c, (list, tuple)):
            tail = [check_int(f"continuations[{i}][{j}]", t, 0) for j, t in enumerate(c)]
        else:
            raise TypeError(f"continuations[{i}] must be text or a list of token ids, got {type(c).__name__}")
        if not tail:
            raise ValueError(f"continuations[{i}] is {c!r}, which holds no token: there is nothing to score")
        bad = [t for t in tail if t >= engine.pair.vocab_size]
        if bad:
            raise ValueError(f"continuations[{i}] holds token id {bad[0]}, outside the vocabulary [0, "
                             f"{engine.pair.vocab_size})")
        tails.append(tail)
    return tails


def score_one(engine: Engine, r: Request, tail: list[int], first: torch.Tensor | None, scored: list[Scored]):
    """Score one continuation on top of the request's prompt, appending it to `scored`; the target's cache is left
    holding the prompt alone. Returns the logits at the prompt's last position, computed here if not given."""
    target, V, P, t0 = engine.pair.target, engine.pair.vocab_size, len(r.prompt), time.perf_counter()
    stats, computed = Stats(prompt_tokens=P + len(tail) - 1), 0
    if r.lease is None:  # no radix cache: this continuation computes the prompt like any request
        r.cache = kv.new_cache(target)
    if kv.length(r.cache) < P:  # the prompt's last position gives p(first token), the same for all
        computed = P - kv.length(r.cache)
        first = kv.forward(target, r.prompt[-computed:], r.cache, 1, V)  # (1, V)
        synchronize(first.device)
        engine.events.emit(Prefill, r.id, cached=P - computed, computed=computed, ms=1e3 * (time.perf_counter() - t0))
        stats.target_passes += 1
    stats.cached_tokens = P - computed  # the continuation's own tokens are never in the cache
    logits = first
    if len(tail) > 1:  # the continuation's own tokens, on top of the prompt, then cut away again
        logits = torch.cat([first, kv.forward(target, tail[:-1], r.cache, len(tail) - 1, V)])  # (len(tail), V)
        kv.crop_to(r.cache, P)
        stats.target_passes += 1
    rows = torch.arange(len(tail), device=logits.device)
    logprobs = torch.log_softmax(logits, dim=-1)[rows, torch.tensor(tail, device=logits.device)]
    stats.wall_s = stats.target_s = time.perf_counter() - t0
    scored.append(Scored(list(tail), [float(x) for x in logprobs], stats))
    engine.events.emit(Score, r.id, position=P, tokens=list(tail), logprobs=scored[-1].logprobs)
    return first
