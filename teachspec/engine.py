"""The engine: speculative decoding for one request, every decision recorded as an event.

One step, `Engine.step`, read top to bottom:

    k      = policy.next_k()                           how many tokens to guess
    draft  = drafter.propose(ids, k)                   k guesses and the q each was sampled from
    p      = warp(target(uncached ids + draft))        ONE target pass scores all k + 1 positions
    result = verify(p, q, draft)                       accept min(1, p/q), resample, or take the bonus
    ids   += result.tokens                             1 .. k + 1 new tokens, cut at a stop or the budget
    roll back                                          both models forget the rejected guesses
    record                                             the events, the statistics, the policy's measurements

The target's cache always holds every committed token but the last one, which is fed with the next guesses; the
very first pass therefore also prefills the prompt. Plain decoding is the k = 0 case of the same step. A request's
whole state travels in a `Request` (`teachspec/request.py`); `generate` builds one and steps it until it is done,
inside `running`, which holds the request's lease on the radix cache and stores its tokens at the end.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import torch

from teachspec import kv
from teachspec.decode import Generation
from teachspec.device import available_bytes, synchronize
from teachspec.events import Accept, Bonus, Draft, EventLog, Finish, Prefill, Reject, RequestStart, Resample, \
    TreeDraft, Verify
from teachspec.models.pair import Pair, load_pair
from teachspec.radix.prefix import PrefixCache
from teachspec.renamed import said
from teachspec.request import Request
from teachspec.sampling import SamplingParams, warp
from teachspec.speculate import Speculation, make as make_drafter, start_k
from teachspec.speculative.drafters import Drafter, ModelDrafter, Proposal, TreeProposal
from teachspec.speculative.policies import Adaptive, make_policy
from teachspec.speculative.tree import TokenTree, TreeVerdict, verify_tree
from teachspec.speculative.tree_policy import AdaptiveTree, make_tree_policy
from teachspec.speculative.verify import Verdict, at, verify
from teachspec.stopping import StopRule, stop_strings
from teachspec.threads import follow
from teachspec.validate import check_context, check_int, check_prompt, check_seed

MAX_TREE_NODES = 1024  # guesses in one static tree: EAGLE's and Medusa's use about 60, a GPU pass stays cheap to 256


def drafting_s(r: Request, seconds: float) -> float | None:
    """A step's drafting seconds as a policy should learn from them: None for the drafter's first proposal of the
    request (none counted yet), which also read the prompt (a draft model's prefill, the EAGLE head's first
    entries) and says nothing about what a guess costs."""
    return seconds if r.stats.drafts else None


def top(probs: torch.Tensor, n: int) -> list[list] | None:
    """The n most likely tokens of one distribution as [[token, probability], ...], for the widgets."""
    if n == 0:
        return None
    values, ids = probs.topk(n)
    return [[i, round(v, 6)] for i, v in zip(ids.tolist(), values.tolist())]


def check_fits(tree: tuple[int, ...] | str | None, vocab_size: int, device: torch.device) -> None:
    """What only the pair can say of a checked `tree=` shape (`Speculation` checked the rest): its guesses
    multiply, (16, 16, 16, 16) is 69,904 of them, so a shape is refused above MAX_TREE_NODES guesses, or when its
    pass would need more than half the memory `device` has free, before anything is allocated."""
    if not isinstance(tree, tuple):
        return  # a chain, or a shape the engine chooses step by step ("adaptive", "dynamic")
    nodes = sum(math.prod(tree[:d + 1]) for d in range(len(tree)))  # guesses at each depth, summed
    if nodes > MAX_TREE_NODES:
        raise ValueError(f"tree={tree} guesses {nodes:,} tokens in one pass, more than the {MAX_TREE_NODES:,} "
                         f"a tree may hold: each depth multiplies the guesses by its branching factor")
    need, free = tree_pass_bytes(nodes, vocab_size), available_bytes(device)
    if free is not None and need > free / 2:
        raise ValueError(f"tree={tree} guesses {nodes:,} tokens, whose pass needs about {need / 2**30:.1f} GiB "
                         f"(a row of {vocab_size:,} logits per guess, several times over), and {device} has "
                         f"{free / 2**30:.1f} GiB free: use a smaller shape")


def tree_pass_bytes(nodes: int, vocab_size: int) -> int:
    """About what checking a tree of `nodes` guesses allocates beyond the models: for each guess a float32 row of
    the vocabulary for the target's logits, p, the draft's q and a residual, and the tree attention mask."""
    return nodes * vocab_size * 4 * 4 + (nodes + 1) ** 2 * 4


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
        record_top = check_int("record_top", record_top, 0)
        cache_tokens = check_int("cache_tokens", cache_tokens, 0)
        self.pair = load_pair(pair) if isinstance(pair, str) else pair
        if record_top > self.pair.vocab_size:
            raise ValueError(f"record_top must be at most the vocabulary's {self.pair.vocab_size:,} tokens (it is how "
                             f"many of the likeliest to record at each position), got {record_top:,}")
        self.record_top = record_top
        self.events = events if events is not None else EventLog()
        if self.events.pair is None:
            self.events.pair = self.pair.name  # so a saved trace says which tokenizer replays it
        self.prefix = PrefixCache(self.pair, cache_tokens, self.events, cache_policy) if cache_tokens else None
        self.requests = 0
        self.adaptive: dict[tuple, Adaptive | AdaptiveTree] = {}  # one per drafter, sampling setting, chain or tree
        self.learnt: dict = {}  # what drafters carry from request to request (the suffix drafter's earlier outputs)

    # -- one step ------------------------------------------------------------------------------------------------

    @torch.inference_mode()
    def step(self, r: Request) -> None:
        """One speculation step for request `r`: guess, one target pass, verify, keep what was accepted, roll
        both models back, record. With `tree=`, the guesses form a tree (`tree_step`)."""
        follow()  # the CPU thread count follows the machine's load (teachspec/threads.py); mostly one clock read
        if r.tree is not None:  # a tree policy
            return self.tree_step(r)
        k, accepted, _, draft_s, target_s = self._chain_step(r, r.next_k())
        r.policy.update(k, accepted, draft_s, target_s)
        self._end_step(r)

    def _chain_step(self, r: Request, k: int) -> tuple[int, int, int, float | None, float | None]:
        """Up to k guesses in a chain, one target pass, verify, commit, roll back, record. Returns what a policy
        learns from: the guesses made, how many were accepted, the draft passes, the drafting seconds and the
        target pass's (None where they also read the prompt: `drafting_s`, and a pass over more than the step's
        own tokens)."""
        proposal = self._guess(r, k)
        p, target_s, uncached = self._target_pass(r, proposal)  # (k + 1, V)
        guesses = torch.tensor(proposal.tokens, dtype=torch.long, device=self.pair.device)  # (k,)
        verdict = verify(p, proposal.q, guesses, r.generator, check=False)  # warp made p and q
        emitted = r.commit(verdict.tokens)  # cut at a stop or the budget
        self._roll_back(r)
        self._record(r, verdict, emitted, p, proposal)
        draft_s = drafting_s(r, proposal.seconds)  # before add_step counts this proposal
        r.stats.add_step(len(proposal.tokens), verdict.accepted, len(emitted), target_s, proposal.passes,
                         proposal.seconds)
        return len(proposal.tokens), verdict.accepted, proposal.passes, draft_s, target_s if uncached == 1 else None

    def _end_step(self, r: Request) -> None:
        if r.steps == 0:
            r.stats.mark_first_step(len(r.new), time.perf_counter() - r.started)
        r.steps += 1

    @torch.inference_mode()
    def tree_step(self, r: Request) -> None:
        """One step with a tree of guesses (SpecInfer; Medusa): propose a tree, ONE target pass over every node
        (each sees only its ancestors: `kv.tree_mask`), the multi-draft rule down the tree (`verify_tree`), keep
        the accepted path and compact the target's cache to it, record."""
        begun = time.perf_counter()
        policy = r.tree
        left = max(0, r.max_new_tokens - len(r.new) - 1)  # no deeper than the budget can use
        shape = policy.next_shape()[:left]
        if policy.learns and set(shape) <= {1}:  # a chain it chose (or no guess) runs as a chain: no tree mask, no
            # cache to compact; a fixed shape of ones stays a tree, as asked
            k, accepted, passes, draft_s, target_s = self._chain_step(r, len(shape))
            policy.update_chain(k, accepted, passes, draft_s, target_s, time.perf_counter() - begun)
            return self._end_step(r)
        proposal = self._propose_tree(r, shape)
        tree, n_before = proposal.tree, len(r.ids)
        if len(tree.tokens) > 1:
            self.events.emit(TreeDraft, r.id, step=r.steps, position=n_before - 1, parents=list(tree.parents),
                             tokens=list(tree.tokens), drafter=r.drafter.name, ms=1e3 * proposal.seconds)
        p, target_s, uncached, features = self._tree_pass(r, tree)  # (nodes, V)
        # judged as the children were drawn (`proposal.kind`); warp made p one-hot when greedy
        verdict = verify_tree(p, proposal.q, tree, r.generator, kind=proposal.kind, check=False)
        emitted = r.commit(verdict.tokens)
        path = verdict.path[:len(emitted)]
        if features is not None:  # the committed tokens' features: the context's, then the accepted nodes'
            m = len(features) - (len(tree.tokens) - 1)
            r.drafter.observe(n_before - m, torch.cat([features[:m], features[[m - 1 + i for i in path]]]))
        self._keep_path(r, n_before, path, bool(shape))
        self._record_tree(r, verdict, emitted, p, n_before - 1)
        draft_s = drafting_s(r, proposal.seconds)
        r.stats.add_step(max(tree.depth), verdict.accepted, len(emitted), target_s, proposal.passes,
                         proposal.seconds)
        # the whole step's seconds too: what the policy's choice costs besides drafting and the pass
        policy.update(tree, verdict, proposal.passes, draft_s, target_s if uncached == 1 else None,
                      time.perf_counter() - begun)
        self._end_step(r)

    def _propose_tree(self, r: Request, shape: tuple[int, ...]) -> TreeProposal:
        """The drafter's tree of `shape` (EAGLE-2's dynamic tree of that depth for a dynamic policy); the root alone
        when the budget leaves no room to guess."""
        if not shape:
            return TreeProposal(TokenTree((-1,), (r.ids[-1],)), None, 0, 0.0)
        if r.tree.dynamic:
            return r.drafter.propose_dynamic(r.ids, depth=len(shape), params=r.params, generator=r.generator)
        return r.drafter.propose_tree(r.ids, shape, r.params, r.generator)

    def _keep_path(self, r: Request, n_before: int, path: list[int], drafted: bool) -> None:
        """Both models keep the committed tokens' keys and values, then the accepted path's nodes' (node i was
        laid at row n_before - 1 + i); every rejected branch's rows go. Then the usual roll back to the committed
        tokens. `drafted`: the drafter grew this step's tree (a budget of one token drafts none)."""
        kv.keep(r.cache, list(range(n_before)) + [n_before - 1 + i for i in path])
        if drafted:
            r.drafter.keep_path(n_before, path)
        self._roll_back(r)

    def _tree_pass(self, r: Request, tree: TokenTree) -> tuple[torch.Tensor, float, int, torch.Tensor | None]:
        """ONE target pass over the uncached committed tokens and every node; with an EAGLE drafter, also the
        target's features at every query."""
        t0, held = time.perf_counter(), kv.length(r.cache)
        features = getattr(r.drafter, "reads_features", False)
        out = kv.forward_tree(self.pair.target, r.ids, tree.parents, tree.tokens, r.cache, self.pair.vocab_size,
                              features=features)
        logits, hidden = out if features else (out, None)
        p = warp(logits, r.params)  # (nodes, V): p[i], what follows node i
        synchronize(p.device)
        target_s = time.perf_counter() - t0
        if r.steps == 0:
            self.events.emit(Prefill, r.id, cached=r.stats.cached_tokens, computed=len(r.ids) - held,
                             ms=1e3 * target_s)
        self.events.emit(Verify, r.id, step=r.steps, position=len(r.ids), n=len(tree.tokens), ms=1e3 * target_s)
        return p, target_s, len(r.ids) - held, hidden

    def _record_tree(self, r: Request, verdict: TreeVerdict, emitted: list[int], p: torch.Tensor, root: int) -> None:
        """Each child tried, an Accept or a Reject at its depth; then the resampled or bonus token."""
        kept = len(emitted)
        for v in verdict.nodes:
            if v.depth > kept:
                break  # past a stop or the budget
            log_kind = Accept if v.decision == "accept" else Reject
            self.events.emit(log_kind, r.id, step=r.steps, position=root + v.depth, i=v.node, token=v.token, p=v.p,
                             q=v.q, u=v.u if v.u is not None else 0.0)
        if kept == len(verdict.tokens):
            x, at_node = verdict.tokens[-1], (verdict.path[-1] if verdict.path else 0)
            kind = Bonus if verdict.bonus is not None else Resample
            extra = {} if kind is Bonus else dict(i=at_node, q=0.0, top_residual=None)
            self.events.emit(kind, r.id, step=r.steps, position=root + len(verdict.path) + 1, token=x,
                             p=float(p[at_node, x]), **extra)

    def _guess(self, r: Request, k: int) -> Proposal:
        """The drafter's k guesses (none for plain decoding), announced by a Draft event."""
        if k == 0:
            return Proposal([], None, 0, 0.0)
        proposal = r.drafter.propose(r.ids, k, r.params, r.generator, r.policy.stop_below)
        if proposal.tokens:
            guesses = torch.tensor(proposal.tokens, dtype=torch.long, device=self.pair.device)
            q = [1.0] * len(guesses) if proposal.q is None else at(proposal.q, guesses).tolist()
            self.events.emit(Draft, r.id, step=r.steps, position=len(r.ids), tokens=proposal.tokens, q=q,
                             drafter=r.drafter.name, ms=1e3 * proposal.seconds)
        return proposal

    def _target_pass(self, r: Request, proposal: Proposal) -> tuple[torch.Tensor, float, int]:
        """ONE target pass over the uncached committed tokens and every guess: p at each of the k + 1 positions,
        the pass's seconds, and how many committed tokens it computed (the whole prompt on the first step)."""
        t0 = time.perf_counter()
        held = kv.length(r.cache)
        features = getattr(r.drafter, "reads_features", False)
        out = kv.forward(self.pair.target, r.ids[held:] + proposal.tokens, r.cache, len(proposal.tokens) + 1,
                         self.pair.vocab_size, features=features)  # (k + 1, V)
        logits = out[0] if features else out
        if features:  # an EAGLE head drafts from the target's features; it keeps the committed positions'
            r.drafter.observe(held, out[1])
        p = warp(logits, r.params)
        synchronize(p.device)
        target_s = time.perf_counter() - t0
        if r.steps == 0:
            self.events.emit(Prefill, r.id, cached=r.stats.cached_tokens, computed=len(r.ids) - held,
                             ms=1e3 * target_s)
        self.events.emit(Verify, r.id, step=r.steps, position=len(r.ids), n=len(proposal.tokens) + 1,
                         ms=1e3 * target_s)
        return p, target_s, len(r.ids) - held

    def _roll_back(self, r: Request) -> None:
        """Both models forget every guess that was not committed: the target's cache is cut back to the committed
        tokens but the last (fed with the next guesses); the draft model's to the longest prefix it shares with
        them (its accepted guesses stay). Prompt lookup has no cache to cut."""
        kv.crop_to(r.cache, len(r.ids) - 1)
        if r.drafter is not None:
            r.drafter.roll_back(r.ids)

    def _record(self, r: Request, verdict: Verdict, emitted: list[int], p: torch.Tensor, proposal: Proposal) -> None:
        """One event per judged position, then the resampled or bonus token; nothing past the stop/budget cut."""
        log, n_top, q, k = self.events, self.record_top, proposal.q, len(proposal.tokens)
        position = len(r.ids) - len(emitted)  # of the step's first token
        for v in verdict.positions[:len(emitted)]:
            at_v = dict(step=r.steps, position=position + v.i, i=v.i)
            # the alternatives only when they are recorded: even indexing a row is a tensor operation per position
            top_p = top(p[v.i], n_top) if n_top else None
            top_q = (top(q[v.i], n_top) if q is not None else [[v.token, 1.0]]) if n_top else None
            log.emit(Accept if v.decision == "accept" else Reject, r.id, **at_v, token=v.token, p=v.p, q=v.q, u=v.u,
                     top_p=top_p, top_q=top_q)
            if v.decision != "accept":
                x = v.resampled
                log.emit(Resample, r.id, **at_v, token=x, p=float(p[v.i, x]),
                         q=float(q[v.i, x]) if q is not None else float(x == v.token),
                         top_residual=top(v.residual, n_top))
        if verdict.bonus is not None and len(emitted) == k + 1:
            log.emit(Bonus, r.id, step=r.steps, position=position + k, token=verdict.bonus,
                     p=float(p[k, verdict.bonus]), top_p=top(p[k], n_top) if n_top else None)

    # -- a request's life ----------------------------------------------------------------------------------------

    @contextmanager
    def running(self, r: Request) -> Iterator[Request]:
        """Around a request's steps: its RequestStart, its lease on the cached prefix (the target's cache, and the
        draft model's, built from it), then, on the normal way out, its committed tokens stored in the tree and
        its Finish. The lease is given back on every way out (an error, a raising subscriber, an interrupt)."""
        self.events.emit(RequestStart, r.id, prompt_tokens=len(r.prompt), prompt=list(r.prompt))
        r.started = time.perf_counter()
        with self.prefix.lease(r.id, r.ids) if self.prefix is not None else nullcontext() as lease:
            r.lease, r.cache = lease, lease.target if lease else kv.new_cache(self.pair.target)
            r.stats.cached_tokens = lease.cached if lease else 0
            if r.drafter is not None:  # the draft model resumes from the leased prefix's draft KV when it has one
                own = lease is not None and lease.draft is not None and self._own_draft(r)
                r.drafter.reset(*((lease.draft, r.ids[:lease.cached]) if own else ()))
            r.stats.cache_s = time.perf_counter() - r.started
            yield r
            self._store(r)
        r.stats.new_tokens, r.stats.wall_s = len(r.new), time.perf_counter() - r.started
        self.events.emit(Finish, r.id, new_tokens=len(r.new), reason=r.reason or "score", ms=1e3 * r.stats.wall_s)

    def _own_draft(self, r: Request) -> bool:
        return isinstance(r.drafter, ModelDrafter) and r.drafter.model is self.pair.draft

    def _store(self, r: Request) -> None:
        """Insert the tokens whose KV the target's cache holds into the radix tree, with the draft's KV too (it may
        lag the target's by the last accepted tokens, which `fill` computes)."""
        if r.lease is None:
            return
        t0 = time.perf_counter()
        held = r.ids[:kv.length(r.cache)]
        draft_cache = None
        if self._own_draft(r):
            r.drafter.fill(held)
            draft_cache = r.drafter.cache
        self.prefix.finish(r.id, r.lease, held, r.cache, draft_cache)
        r.stats.cache_s += time.perf_counter() - t0

    # -- the public calls ----------------------------------------------------------------------------------------

    def generate(self, prompt: str | list[int], max_new_tokens: int = 64, temperature: float = 0.0,
                 top_k: int | None = None, top_p: float | None = None, speculate: str | None = "model", k=2,
                 seed: int | None = None, ngram: int = 3, stop: str | list[str] | None = None,
                 tree: tuple[int, ...] | str | None = None) -> Generation:
        """Continue `prompt`: text (encoded with the tokenizer's special tokens, as transformers' `generate` would see
        it), or token ids (a list or a 1-D tensor). `speculate`: "model" (the draft LM), "eagle" (the EAGLE head over
        the target's features), "ngram" (prompt lookup), "suffix" (what followed the same words before, in this request
        and earlier ones), "oracle" (the target drafts for itself), "adversary" (deliberately bad guesses) or None
        (plain decoding). `k`: an int >= 0, or "adaptive", "heuristic", "confidence", or a policy object. Generation
        stops after an eos id of the pair (`pair.eos_token_id`: one id or a list) or a token that completes a `stop`
        string, as transformers' `generate(..., stop_strings=...)` does. `tree`: guess a tree instead of a chain, at
        most tree[d] children per node at depth d (the draft model's likeliest or sampled tokens, or several earlier
        matches for prompt lookup), checked in one target pass. Every argument is checked before anything runs."""
        params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
        max_new_tokens = check_int("max_new_tokens", max_new_tokens, 0)
        rule = StopRule(self.pair.eos, stop_strings(stop), self.pair.decode)
        how = Speculation(speculate, k, tree, ngram)
        drafter = self.drafter(how.speculate, how.ngram)
        check_fits(how.tree, self.pair.vocab_size, self.pair.device)
        ids = self.checked_prompt(prompt, max_new_tokens)
        seed = check_seed(seed)
        # Everything is checked: only now may a learnt policy be made for this setting. What it has learnt of
        # acceptance and the pass costs carries over between requests, for chains and trees alike; cold, each
        # starts from its drafter's good fixed choice.
        start = start_k(how.speculate)
        tree = make_tree_policy(how.tree, lambda: self.adaptive.setdefault(("tree", speculate, params),
                                                                           AdaptiveTree.cold(start)))
        if how.adaptive_k:
            policy = self.adaptive.setdefault((speculate, params), Adaptive.cold(start))
        else:
            policy = make_policy(how.k if drafter is not None else 0)
        generator = torch.Generator(device=self.pair.device)
        generator.manual_seed(seed)
        r = Request(self.next_id(), ids, max_new_tokens, params, rule, drafter, policy, generator, tree=tree)
        with self.running(r):
            while not r.done:
                self.step(r)
        return Generation(self.pair.decode(r.new), r.new, r.prompt, r.reason, r.stats)

    def serve(self, requests: list, schedule: str = "fcfs", **generate) -> list[Generation]:
        """Run a queue of requests one after another, in a cache-aware order, and return their generations in
        the order given. Each request is a prompt (text or ids) or has `.prompt` and `.max_new_tokens`; a
        `max_new_tokens=` keyword, when given, holds for every request instead (64 for a bare prompt otherwise).

        schedule: "fcfs" (arrival order), "lpm" (longest cached prefix first, re-ranked after every request as
        the tree changes) or "dfs" (depth-first over the tree of waiting prompts), as in SGLang.
        """
        from teachspec.radix.schedule import SCHEDULES, order

        if not isinstance(requests, (list, tuple)):
            raise TypeError(f"requests must be a list of prompts or requests, got {type(requests).__name__} "
                            f"{str(requests)[:40]!r}; for one prompt call generate, or serve([prompt])")
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule={schedule!r} is not a schedule; use one of {sorted(SCHEDULES)}")
        if schedule == "lpm" and self.radix is None:
            raise ValueError("schedule='lpm' ranks requests by their cached prefix, and this engine's cache is off "
                             "(cache_tokens=0); use 'fcfs' or 'dfs', or turn the cache on")
        prompts = [check_prompt(getattr(r, "prompt", r), self.pair.encode) for r in requests]
        given = generate.pop("max_new_tokens", None)  # when given, it holds for every request
        budgets = [check_int("max_new_tokens", given if given is not None else getattr(r, "max_new_tokens", 64), 0)
                   for r in requests]
        results: list[Generation | None] = [None] * len(prompts)
        waiting = list(range(len(prompts)))
        fixed = order([prompts[i] for i in waiting], schedule, self.radix) if schedule != "lpm" else None
        queue = [waiting[i] for i in fixed] if fixed is not None else None
        while waiting:
            if queue is not None:
                i = queue.pop(0)
            else:  # longest prefix match is greedy: the best request now depends on what the last one cached
                i = waiting[order([prompts[j] for j in waiting], "lpm", self.radix)[0]]
            waiting.remove(i)
            results[i] = self.generate(prompts[i], budgets[i], **generate)
        return results

    # -- what the public calls share -----------------------------------------------------------------------------

    @property
    def radix(self):
        """The radix tree of cached prefixes (RadixAttention), or None when the cache is off."""
        return self.prefix.tree if self.prefix is not None else None

    @property
    def tree(self):
        """The old name of `radix`, which `tree=` (a shape of guesses) made ambiguous; goes in the next release."""
        said("Engine.tree", "Engine.radix")
        return self.radix

    def next_id(self) -> int:
        """A new request's id in the event log."""
        self.requests += 1
        return self.requests - 1

    def checked_prompt(self, prompt, max_new_tokens: int) -> list[int]:
        """The prompt's ids, checked against the vocabulary and the models' context."""
        ids = check_prompt(prompt, self.pair.encode)
        bad = [t for t in ids if t >= self.pair.vocab_size]
        if bad:
            raise ValueError(f"prompt holds token id {bad[0]}, outside the vocabulary [0, {self.pair.vocab_size})")
        check_context(len(ids), max_new_tokens, self.pair.context)
        return ids

    def drafter(self, speculate, ngram: int = 3) -> Drafter | None:
        """A fresh drafter for `speculate` (None: plain decoding), or a ValueError naming the choices
        (teachspec/speculate.py, the registry of drafters)."""
        return make_drafter(speculate, self.pair, ngram, self.learnt)
