"""The engine: speculative decoding for one request, every decision recorded as an event.

One step of the loop, read top to bottom in `Engine._run`:

    k      = policy.next_k()                           how many tokens to guess
    draft  = drafter.propose(ids, k)                   k guesses and the q each was sampled from
    p      = warp(target(uncached ids + draft))        ONE target pass scores all k + 1 positions
    result = verify(p, q, draft)                       accept min(1, p/q), resample, or take the bonus
    ids   += result.tokens                             1 .. k + 1 new tokens, cut at a stop (an eos id, a stop
                                                       string) or the budget
    target cache cropped to len(ids) - 1               rejected guesses are forgotten

The target's cache always holds every committed token but the last one, which is fed with the next guesses; the
very first pass therefore also prefills the prompt. Plain decoding is the k = 0 case of the same loop.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from teachspec import kv
from teachspec.checks import check_context, check_int, check_prompt, check_seed
from teachspec.decode import Generation
from teachspec.device import synchronize
from teachspec.events import Accept, Bonus, Draft, EventLog, Finish, Prefill, Reject, RequestStart, Resample, \
    Score, Verify
from teachspec.models.pair import Pair, load_pair
from teachspec.radix.prefix import PrefixCache
from teachspec.sampling import SamplingParams, warp
from teachspec.speculative.drafters import AdversarialDrafter, ModelDrafter, NgramDrafter, OracleDrafter, Proposal
from teachspec.speculative.policies import Adaptive, make_policy
from teachspec.speculative.verify import Verdict, at, verify
from teachspec.stats import Stats
from teachspec.stopping import StopRule, stop_strings

DRAFTERS = ("model", "ngram", "oracle", "adversary", None)


def top(probs: torch.Tensor, n: int) -> list[list] | None:
    """The n most likely tokens of one distribution as [[token, probability], ...], for the widgets."""
    if n == 0:
        return None
    values, ids = probs.topk(n)
    return [[i, round(v, 6)] for i, v in zip(ids.tolist(), values.tolist())]


@dataclass
class Scored:
    """What the target thinks of one continuation of a prompt (see `Engine.score`)."""

    tokens: list[int]      # the continuation's ids
    logprobs: list[float]  # log p(tokens[i] | prompt + tokens[:i]), one per token
    stats: Stats           # prompt_tokens: prompt + tokens[:-1], what the target must see; cached_tokens: of the
                           # prompt, what this continuation did not compute (the radix cache, or an earlier one)

    @property
    def logprob(self) -> float:
        """log p(continuation | prompt): the sum over its tokens, what `select` ranks choices by."""
        return sum(self.logprobs)


class Engine:
    """Speculative decoding on a draft/target pair, with prefix reuse across requests.

    `cache_tokens` bounds the radix cache (RadixAttention) in tokens; 0 turns it off. `cache_policy` is its
    eviction order: "lru", "lfu" or "fifo". `record_top` > 0 stores the top alternatives of p and q at every
    judged position in the events (what the speculation widget draws); it costs a top-k per position, so
    benchmarks leave it at 0.
    """

    def __init__(self, pair: Pair | str = "tiny", events: EventLog | None = None, record_top: int = 0,
                 cache_tokens: int = 8192, cache_policy: str = "lru"):
        if not isinstance(pair, (str, Pair)):
            raise TypeError(f"pair must be a bundled pair name such as 'tiny' or a Pair from load_pair, got "
                            f"{type(pair).__name__} {pair!r}")
        if events is not None and not isinstance(events, EventLog):
            raise TypeError(f"events must be an EventLog or None, got {type(events).__name__} {events!r}")
        self.record_top = check_int("record_top", record_top, 0)
        cache_tokens = check_int("cache_tokens", cache_tokens, 0)
        self.pair = load_pair(pair) if isinstance(pair, str) else pair
        self.events = events if events is not None else EventLog()
        self.prefix = PrefixCache(self.pair, cache_tokens, self.events, cache_policy) if cache_tokens else None
        self.requests = 0
        self.adaptive: dict[tuple, Adaptive] = {}  # one per drafter and sampling setting

    @property
    def tree(self):
        """The radix tree of cached prefixes, or None when the cache is off."""
        return self.prefix.tree if self.prefix is not None else None

    # -- the public call -----------------------------------------------------------------------------------------

    def generate(self, prompt: str | list[int], max_new_tokens: int = 64, temperature: float = 0.0,
                 top_k: int | None = None, top_p: float | None = None, speculate: str | None = "model", k=2,
                 seed: int | None = None, ngram: int = 3, stop: str | list[str] | None = None) -> Generation:
        """Continue `prompt`: text (encoded with the tokenizer's special tokens, as transformers' `generate` would
        see it), or token ids (a list or a 1-D tensor). `speculate`: "model" (the draft LM), "ngram" (prompt
        lookup), "oracle" (the target drafts for itself), "adversary" (deliberately bad guesses) or None (plain
        decoding). `k`: an int >= 0, or "adaptive", "heuristic", "confidence", or a policy object. Generation
        stops after an eos id of the pair (`pair.eos_token_id`: one id or a list) or a token that completes a
        `stop` string, as transformers' `generate(..., stop_strings=...)` does. Every argument is checked before
        anything runs."""
        params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
        max_new_tokens = check_int("max_new_tokens", max_new_tokens, 0)
        rule = StopRule(self.pair.eos, stop_strings(stop), self.pair.decode)
        drafter = self._drafter(speculate, ngram)
        if k == "adaptive" and drafter is not None:
            # what the adaptive policy has learnt about alpha and the costs carries over between requests
            policy = self.adaptive.setdefault((speculate, params), Adaptive())
        else:
            policy = make_policy(k if drafter is not None else 0)
        ids = check_prompt(prompt, self.pair.encode)
        bad = [t for t in ids if t >= self.pair.vocab_size]
        if bad:
            raise ValueError(f"prompt holds token id {bad[0]}, outside the vocabulary [0, {self.pair.vocab_size})")
        check_context(len(ids), max_new_tokens, self.pair.context)
        generator = torch.Generator(device=self.pair.device)
        generator.manual_seed(check_seed(seed))
        request = self.requests
        self.requests += 1
        tokens, reason, stats = self._run(request, ids, max_new_tokens, params, drafter, policy, generator, rule)
        return Generation(self.pair.decode(tokens), tokens, ids, reason, stats)

    def serve(self, requests: list, schedule: str = "fcfs", **generate) -> list[Generation]:
        """Run a queue of requests one after another, in a cache-aware order, and return their generations in
        the order given. Each request is a prompt (text or ids) or has `.prompt` and `.max_new_tokens`; a
        `max_new_tokens=` keyword, when given, holds for every request instead (64 for a bare prompt otherwise).

        schedule: "fcfs" (arrival order), "lpm" (longest cached prefix first, re-ranked after every request as
        the tree changes) or "dfs" (depth-first over the tree of waiting prompts), as in SGLang.
        """
        from teachspec.radix.schedule import POLICIES, order

        if not isinstance(requests, (list, tuple)):
            raise TypeError(f"requests must be a list of prompts or requests, got {type(requests).__name__} "
                            f"{str(requests)[:40]!r}; for one prompt call generate, or serve([prompt])")
        if schedule not in POLICIES:
            raise ValueError(f"schedule={schedule!r} is not a schedule; use one of {sorted(POLICIES)}")
        if schedule == "lpm" and self.tree is None:
            raise ValueError("schedule='lpm' ranks requests by their cached prefix, and this engine's cache is off "
                             "(cache_tokens=0); use 'fcfs' or 'dfs', or turn the cache on")
        prompts = [check_prompt(getattr(r, "prompt", r), self.pair.encode) for r in requests]
        given = generate.pop("max_new_tokens", None)  # when given, it holds for every request
        budgets = [check_int("max_new_tokens", given if given is not None else getattr(r, "max_new_tokens", 64), 0)
                   for r in requests]
        results: list[Generation | None] = [None] * len(prompts)
        waiting = list(range(len(prompts)))
        fixed = order([prompts[i] for i in waiting], schedule, self.tree) if schedule != "lpm" else None
        queue = [waiting[i] for i in fixed] if fixed is not None else None
        while waiting:
            if queue is not None:
                i = queue.pop(0)
            else:  # longest prefix match is greedy: the best request now depends on what the last one cached
                i = waiting[order([prompts[j] for j in waiting], "lpm", self.tree)[0]]
            waiting.remove(i)
            results[i] = self.generate(prompts[i], budgets[i], **generate)
        return results

    def score(self, prompt: str | list[int], continuations: list) -> list[Scored]:
        """The target's log-probability of each continuation after `prompt`:

            log p(c | prompt) = sum_i log p(c_i | prompt, c_0 .. c_{i-1})

        from the raw logits (temperature 1, no top-k or top-p): a score belongs to the model, not to a sampling
        setting. A continuation given as text is encoded *on its own* and its ids appended to the prompt's, the
        way a program appends text to its state; so the ids scored are ids(prompt) + ids(choice), which can differ
        from ids(prompt text + choice text) where a tokenizer would merge across the seam.

        The scoring is one request. With the radix cache it leases the prompt's longest cached prefix, computes
        the rest of the prompt once, then runs each continuation's tokens but the last on top of it (the last
        token is only read off the logits) and cuts the cache back to the prompt; the prompt is then stored, with
        the draft's KV too, so the call that follows reuses all of it. With the cache off nothing is kept:
        every continuation computes the whole prompt again, as separate requests would.
        """
        ids = check_prompt(prompt, self.pair.encode)
        if not isinstance(continuations, (list, tuple)) or not continuations:
            raise ValueError(f"continuations must be a non-empty list of texts or token-id lists, got "
                             f"{continuations!r}")
        tails = []
        for i, c in enumerate(continuations):
            if isinstance(c, str):
                tail = self.pair.encode(c, special=False)  # appended to the prompt: no second BOS
            elif isinstance(c, (list, tuple)):
                tail = [check_int(f"continuations[{i}][{j}]", t, 0) for j, t in enumerate(c)]
            else:
                raise TypeError(f"continuations[{i}] must be text or a list of token ids, got {type(c).__name__}")
            if not tail:
                raise ValueError(f"continuations[{i}] is {c!r}, which holds no token: there is nothing to score")
            tails.append(tail)
        for name, seq in [("prompt", ids)] + [(f"continuations[{i}]", t) for i, t in enumerate(tails)]:
            bad = [t for t in seq if t >= self.pair.vocab_size]
            if bad:
                raise ValueError(f"{name} holds token id {bad[0]}, outside the vocabulary [0, "
                                 f"{self.pair.vocab_size})")
        check_context(len(ids) + max(map(len, tails)), 0, self.pair.context)
        request = self.requests
        self.requests += 1
        return self._score(request, ids, tails)

    @torch.inference_mode()
    def _score(self, request: int, prompt: list[int], tails: list[list[int]]) -> list[Scored]:
        log, target, V, P = self.events, self.pair.target, self.pair.vocab_size, len(prompt)
        log.emit(RequestStart, request, prompt_tokens=P, prompt=list(prompt))
        t_start = time.perf_counter()
        with self.prefix.lease(request, prompt) if self.prefix is not None else nullcontext() as lease:
            cache, scored = (lease.target if lease else None), []
            for tail in tails:
                t0 = time.perf_counter()
                stats, computed = Stats(prompt_tokens=P + len(tail) - 1), 0
                if lease is None:  # no cache: this continuation computes the prompt like any request
                    cache = kv.new_cache(target)
                if kv.length(cache) < P:  # the prompt's last position gives p(first token), the same for all
                    computed = P - kv.length(cache)
                    first = kv.forward(target, prompt[-computed:], cache, 1, V)  # (1, V)
                    synchronize(first.device)
                    log.emit(Prefill, request, cached=P - computed, computed=computed,
                             ms=1e3 * (time.perf_counter() - t0))
                    stats.target_passes += 1
                stats.cached_tokens = P - computed  # the continuation's own tokens are never in the cache
                logits = first
                if len(tail) > 1:  # the continuation's own tokens, on top of the prompt, then cut away again
                    logits = torch.cat([first, kv.forward(target, tail[:-1], cache, len(tail) - 1, V)])
                    kv.crop_to(cache, P)
                    stats.target_passes += 1
                rows = torch.arange(len(tail), device=logits.device)
                logprobs = torch.log_softmax(logits, dim=-1)[rows, torch.tensor(tail, device=logits.device)]
                stats.wall_s = stats.target_s = time.perf_counter() - t0
                scored.append(Scored(list(tail), [float(x) for x in logprobs], stats))
                log.emit(Score, request, position=P, tokens=list(tail), logprobs=scored[-1].logprobs)
            if lease is not None:
                draft_cache = None
                if self.pair.draft is not None:  # so a speculative call next reuses the draft
                    drafter = ModelDrafter(self.pair.draft, V)
                    drafter.reset(*((lease.draft, prompt[:lease.cached]) if lease.draft is not None else ()))
                    drafter.fill(prompt)
                    draft_cache = drafter.cache
                self.prefix.finish(request, lease, prompt, cache, draft_cache)
        log.emit(Finish, request, new_tokens=0, reason="score", ms=1e3 * (time.perf_counter() - t_start))
        return scored

    def _drafter(self, speculate, ngram):
        if speculate not in DRAFTERS:
            raise ValueError(f"speculate={speculate!r} is not a drafter; use one of {list(DRAFTERS)}")
        if speculate in ("model", "adversary") and self.pair.draft is None:
            raise ValueError(f"speculate={speculate!r} needs a draft model, and this pair has none; load one with "
                             f"load_pair(target=..., draft=...) or use speculate='ngram'")
        if speculate == "ngram":
            return NgramDrafter(n_max=check_int("ngram", ngram, 1))
        if speculate == "model":
            return ModelDrafter(self.pair.draft, self.pair.vocab_size)
        if speculate == "adversary":
            return AdversarialDrafter(self.pair.draft, self.pair.vocab_size)
        if speculate == "oracle":
            return OracleDrafter(self.pair.target, self.pair.vocab_size)
        return None

    # -- the loop ------------------------------------------------------------------------------------------------

    @torch.inference_mode()
    def _run(self, request: int, prompt: list[int], max_new_tokens: int, params: SamplingParams, drafter, policy,
             generator, rule: StopRule) -> tuple[list[int], str, Stats]:
        log = self.events
        ids = list(prompt)
        stats = Stats(prompt_tokens=len(prompt))
        log.emit(RequestStart, request, prompt_tokens=len(prompt), prompt=list(prompt))
        t_start = time.perf_counter()
        # the lease gives the prefix's lock back on every way out, a raising subscriber or an interrupt included
        with self.prefix.lease(request, ids) if self.prefix is not None else nullcontext() as lease:
            stats.cache_s = time.perf_counter() - t_start
            cache = lease.target if lease else kv.new_cache(self.pair.target)
            stats.cached_tokens = lease.cached if lease else 0
            own_draft = isinstance(drafter, ModelDrafter) and drafter.model is self.pair.draft
            if drafter is not None:
                if own_draft and lease is not None and lease.draft is not None:
                    drafter.reset(lease.draft, ids[:lease.cached])
                else:
                    drafter.reset()
            new, reason = self._loop(request, ids, max_new_tokens, params, drafter, policy, generator, rule,
                                     cache, stats, t_start)
            if lease is not None:
                t0 = time.perf_counter()
                committed = prompt + new
                draft_cache = None
                if own_draft:  # the draft's KV is stored too; it may lag the target's by the last accepted tokens
                    drafter.fill(committed[:-1])
                    draft_cache = drafter.cache
                self.prefix.finish(request, lease, committed[:-1], cache, draft_cache)
                stats.cache_s += time.perf_counter() - t0
        stats.new_tokens = len(new)
        stats.wall_s = time.perf_counter() - t_start
        log.emit(Finish, request, new_tokens=len(new), reason=reason, ms=1e3 * stats.wall_s)
        return new, reason, stats

    def _loop(self, request: int, ids: list[int], max_new_tokens: int, params: SamplingParams, drafter, policy,
              generator, rule: StopRule, cache, stats: Stats, t_start: float) -> tuple[list[int], str]:
        target, V, log = self.pair.target, self.pair.vocab_size, self.events
        new, reason, step = [], "length", 0
        while len(new) < max_new_tokens:
            # guess: never more than the budget can use (the step's own token always comes on top)
            k = min(policy.next_k(), max_new_tokens - len(new) - 1)
            proposal = drafter.propose(ids, k, params, generator, policy.stop_below) if k > 0 else \
                Proposal([], None, 0, 0.0)
            draft = proposal.tokens
            guesses = torch.tensor(draft, dtype=torch.long, device=self.pair.device)  # (k,)
            if draft:
                log.emit(Draft, request, step=step, position=len(ids), tokens=draft,
                         q=[1.0] * len(draft) if proposal.q is None else at(proposal.q, guesses).tolist(),
                         drafter=drafter.name, ms=1e3 * proposal.seconds)

            # verify: one target pass over the uncached committed tokens and every guess
            t0 = time.perf_counter()
            uncached = len(ids) - kv.length(cache)
            logits = kv.forward(target, ids[kv.length(cache):] + draft, cache, len(draft) + 1, V)  # (k+1, V)
            p = warp(logits, params)
            synchronize(p.device)
            target_s = time.perf_counter() - t0
            if step == 0:
                log.emit(Prefill, request, cached=stats.cached_tokens, computed=uncached, ms=1e3 * target_s)
            log.emit(Verify, request, step=step, position=len(ids), n=len(draft) + 1, ms=1e3 * target_s)
            verdict = verify(p, proposal.q, guesses, generator, check=False)  # warp made p and q

            # commit, cut at a stop or at the budget: a prefix of an exact sample is still exact, and the guesses
            # after the cut leave the caches below exactly as rejected ones do
            emitted = verdict.tokens[:max_new_tokens - len(new)]
            n, why = rule.check(ids, emitted)
            if why is not None:
                emitted, reason = emitted[:n], why
            self._record(request, step, len(ids), verdict, len(emitted), p, proposal, draft)
            ids += emitted
            new += emitted
            kv.crop_to(cache, len(ids) - 1)  # rejected guesses (and the new last token) leave the cache

            accepted = min(verdict.accepted, len(emitted))
            stats.target_passes += 1
            stats.target_s += target_s
            stats.draft_passes += proposal.passes
            stats.draft_s += proposal.seconds
            if draft:
                stats.drafts += 1
                stats.drafted += len(draft)
                stats.accepted += accepted
                stats.rejected += verdict.accepted < len(draft) and len(emitted) > verdict.accepted
                while len(stats.drafted_per_position) < len(draft):
                    stats.drafted_per_position.append(0)
                    stats.accepted_per_position.append(0)
                for i in range(len(draft)):
                    stats.drafted_per_position[i] += 1
                    stats.accepted_per_position[i] += i < accepted
            policy.update(len(draft), verdict.accepted, proposal.seconds, target_s if uncached == 1 else None)
            if step == 0:
                stats.mark_first_step(len(new), time.perf_counter() - t_start)
            step += 1
            if reason != "length":
                break
        return new, reason

    def _record(self, request: int, step: int, position: int, verdict: Verdict, n_emitted: int, p: torch.Tensor,
                proposal: Proposal, draft: list[int]) -> None:
        """One event per judged position, then the resampled or bonus token; nothing past the EOS/budget cut."""
        log, n_top, q = self.events, self.record_top, proposal.q
        for r in verdict.positions[:n_emitted]:
            # the alternatives only when they are recorded: even indexing a row is a tensor operation per position
            top_p = top(p[r.i], n_top) if n_top else None
            top_q = (top(q[r.i], n_top) if q is not None else [[r.token, 1.0]]) if n_top else None
            if r.decision == "accept":
                log.emit(Accept, request, step=step, position=position + r.i, i=r.i, token=r.token, p=r.p, q=r.q,
                         u=r.u, top_p=top_p, top_q=top_q)
            else:
                log.emit(Reject, request, step=step, position=position + r.i, i=r.i, token=r.token, p=r.p, q=r.q,
                         u=r.u, top_p=top_p, top_q=top_q)
                x = r.resampled
                log.emit(Resample, request, step=step, position=position + r.i, i=r.i, token=x,
                         p=float(p[r.i, x]), q=float(q[r.i, x]) if q is not None else float(x == r.token),
                         top_residual=top(r.residual, n_top))
        if verdict.bonus is not None and n_emitted == len(draft) + 1:
            log.emit(Bonus, request, step=step, position=position + len(draft), token=verdict.bonus,
                     p=float(p[len(draft), verdict.bonus]), top_p=top(p[len(draft)], n_top) if n_top else None)
