"""A request's whole state, carried from one engine step to the next (nano-vllm's `Sequence`, for speculation).

The engine builds one `Request` per call and hands it to `Engine.step` until it is done. Everything a step reads
or changes lives here, so that the step itself reads as the algorithm and nothing else:

    ids        the committed tokens: the prompt, then every token the steps emitted
    cache      the target's KV cache: ids[:-1] between steps (the last token is fed with the next guesses)
    drafter    where the guesses come from (the draft model keeps its own cache); policy: how many to guess;
               tree: a tree policy, the shape of a tree of guesses instead of a chain (speculative/tree_policy.py)
    rule       when to stop (eos ids, stop strings: `teachspec.stopping`); max_new_tokens, the budget
    generator  the request's own random numbers, from its seed
    lease      its hold on a cached prefix in the radix tree (`teachspec.radix.prefix`), or None
    stats      what it measured (`teachspec.stats`)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from teachspec.radix.prefix import Lease
from teachspec.sampling import SamplingParams
from teachspec.speculative.drafters import Drafter
from teachspec.speculative.policies import Policy
from teachspec.speculative.tree_policy import AdaptiveTree, FixedTree
from teachspec.stats import Stats
from teachspec.stopping import StopRule


@dataclass
class Request:
    id: int
    prompt: list[int]
    max_new_tokens: int
    params: SamplingParams
    rule: StopRule
    drafter: Drafter | None     # None for plain decoding
    policy: Policy              # how many tokens to guess
    generator: torch.Generator | None
    tree: FixedTree | AdaptiveTree | None = None  # a tree policy (its shapes of guesses), None for a chain
    ids: list[int] = field(init=False)
    cache: DynamicCache | None = None
    lease: Lease | None = None
    stats: Stats = field(init=False)
    steps: int = 0
    reason: str | None = None   # why it ended: "eos", "stop" (a stop string) or "length"; None while it runs
    started: float = 0.0        # perf_counter() when it started

    def __post_init__(self):
        self.ids = list(self.prompt)
        self.stats = Stats(prompt_tokens=len(self.prompt))
        if self.max_new_tokens == 0:
            self.reason = "length"

    @property
    def new(self) -> list[int]:
        """The tokens generated so far."""
        return self.ids[len(self.prompt):]

    @property
    def done(self) -> bool:
        return self.reason is not None

    def next_k(self) -> int:
        """How many tokens to guess this step: the policy's k, never more than the budget can use (the step's
        own resampled or bonus token always comes on top)."""
        if self.drafter is None:
            return 0
        return max(0, min(self.policy.next_k(), self.max_new_tokens - len(self.new) - 1))

    def commit(self, tokens: list[int]) -> list[int]:
        """Append the tokens verification emitted, cut at a stop or at the budget; return the ones kept.

        A prefix of an exact sample is still exact, so cutting changes nothing about the output's law; the guesses
        after the cut are dropped exactly as rejected ones are (the step rolls both caches back to `ids`)."""
        kept = tokens[:self.max_new_tokens - len(self.new)]
        n, why = self.rule.check(self.ids, kept)
        kept = kept[:n]
        self.ids += kept
        if why is not None:
            self.reason = why
        elif len(self.new) >= self.max_new_tokens:
            self.reason = "length"
        return kept
