"""The speculative engine on real (config-built) transformers models: exact, instrumented, and strict."""

from __future__ import annotations

import pytest
import torch

from helpers.pairs import COPY_PROMPT, PROMPT, make_pair
from teachspec import kv
from teachspec.decode import decode
from teachspec.engine import Engine
from teachspec.events import Accept, Bonus, Draft, EventLog, Reject, Resample, Verify
from teachspec.models.pair import Pair
from teachspec.sampling import SamplingParams
from teachspec.speculate import DRAFTERS as REGISTERED

DRAFTERS = [*REGISTERED, None]  # every drafter, and plain decoding


@pytest.fixture(scope="module")
def pair():
    return make_pair()


def greedy_reference(pair, prompt, n):
    return decode(pair.target, prompt, n, SamplingParams(), None, None, pair.vocab_size)[0]


@pytest.mark.parametrize("arch, ks", [("llama", (0, 1, 2, 5, "adaptive", "heuristic", "confidence")),
                                      ("qwen2", (2, "adaptive")), ("gpt2", (2, "adaptive")),
                                      ("qwen3-window", (2, "adaptive"))])
def test_greedy_output_equals_plain_greedy_for_every_drafter_and_k(arch, ks):
    pair = make_pair(arch)
    engine = Engine(pair)
    for prompt in (PROMPT, COPY_PROMPT):
        ref = greedy_reference(pair, prompt, 20)
        for speculate in DRAFTERS:
            for k in ks:
                out = engine.generate(prompt, 20, speculate=speculate, k=k)
                assert out.tokens == ref, (arch, speculate, k)


def test_oracle_and_a_draft_equal_to_the_target_are_always_accepted():
    for pair, speculate in ((make_pair(), "oracle"), (make_pair(same=True), "model")):
        out = Engine(pair).generate(PROMPT, 40, temperature=1.0, speculate=speculate, k=4, seed=3)
        assert out.stats.alpha == 1.0
        assert out.stats.mean_acceptance_length == 5.0 and out.stats.target_passes == 8


def test_the_adversary_is_almost_never_accepted(pair):
    out = Engine(pair).generate(PROMPT, 40, temperature=1.0, speculate="adversary", k=3, seed=0)
    assert out.stats.drafted > 20 and out.stats.alpha < 0.05


def test_k_zero_is_plain_decoding_token_for_token_when_sampling(pair):
    ref = decode(pair.target, PROMPT, 40, SamplingParams(temperature=1.0, top_k=50),
                 torch.Generator().manual_seed(11), None, pair.vocab_size)[0]
    for speculate in ("model", None):
        out = Engine(pair).generate(PROMPT, 40, temperature=1.0, top_k=50, speculate=speculate, k=0, seed=11)
        assert out.tokens == ref and out.stats.drafted == 0


def test_seeded_runs_repeat_exactly(pair):
    engine = Engine(pair)
    runs = [engine.generate(PROMPT, 30, temperature=0.8, top_p=0.9, k=3, seed=5).tokens for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]
    assert engine.generate(PROMPT, 30, temperature=0.8, top_p=0.9, k=3, seed=6).tokens != runs[0]


def test_eos_inside_a_draft_and_the_budget_cut_are_exact():
    plain = make_pair()
    ref = greedy_reference(plain, PROMPT, 30)
    j = next(i for i in range(3, 30) if ref[i] not in ref[:i])  # a token first produced mid-sequence
    pair = make_pair(eos=ref[j])
    out = Engine(pair).generate(PROMPT, 30, speculate="oracle", k=4)
    assert out.tokens == ref[:j + 1] and out.finish_reason == "eos"
    for n in (1, 6, 7, 13):
        cut = Engine(plain).generate(PROMPT, n, speculate="oracle", k=4)
        assert cut.tokens == ref[:n] and cut.finish_reason == "length"


def test_events_tell_the_whole_story(pair):
    engine = Engine(pair, record_top=3)
    out = engine.generate(PROMPT, 40, temperature=1.0, k=3, seed=1, speculate="model")
    log = engine.events
    steps = log.of(Verify)
    assert len(steps) == out.stats.target_passes
    # replaying accepted, resampled and bonus tokens rebuilds the output exactly
    rebuilt = [e.token for e in log if isinstance(e, (Accept, Resample, Bonus))]
    assert rebuilt == out.tokens
    assert len(log.of(Reject)) == len(log.of(Resample)) == out.stats.rejected > 0
    # alpha counts judged guesses only: the accepted ones and the one rejection that ends a step
    assert out.stats.alpha == len(log.of(Accept)) / (len(log.of(Accept)) + len(log.of(Reject)))
    assert sum(len(e.tokens) for e in log.of(Draft)) == out.stats.drafted
    accept = log.of(Accept)[0]
    assert len(accept.top_p) == 3 and accept.top_p[0][1] >= accept.top_p[1][1] and 0 <= accept.u < 1
    assert all(e.u >= min(1.0, e.p / e.q) for e in log.of(Reject))
    assert all(e.u < min(1.0, e.p / e.q) for e in log.of(Accept))


def test_stats_per_position_and_mean_acceptance_length(pair):
    out = Engine(pair).generate(COPY_PROMPT, 40, speculate="ngram", k=3)
    s = out.stats
    assert sum(s.accepted_per_position) == s.accepted and s.drafted_per_position[0] == s.drafts
    assert s.mean_acceptance_length == pytest.approx(1 + s.accepted / s.drafts)
    assert s.new_tokens == 40 and s.tokens_per_target_pass == pytest.approx(40 / s.target_passes)


def test_the_first_step_is_counted_apart_from_decoding(pair):
    log = EventLog()
    s = Engine(pair, events=log).generate(PROMPT, 40, speculate="model", k=3).stats
    first, after = s.first_step, s.decoding
    emitted_first = sum(1 for e in log if type(e) in (Accept, Resample, Bonus) and e.step == 0)
    assert (first.target_passes, first.draft_passes, first.new_tokens) == (1, 3, emitted_first)
    assert after.new_tokens == 40 - emitted_first and after.target_passes == s.target_passes - 1
    assert after.accepted + first.accepted == s.accepted and 0 < first.wall_s < s.wall_s
    plain = decode(pair.target, PROMPT, 10, SamplingParams(), None, None, pair.vocab_size)[2]
    assert (plain.first_step.new_tokens, plain.first_step.target_passes, plain.decoding.target_passes) == (1, 1, 9)


@pytest.mark.parametrize("arch", ["llama", "qwen3-window"])
def test_every_cache_holds_exactly_the_committed_tokens_after_every_rollback(arch, monkeypatch):
    """After each crop, the cached keys/values equal a fresh prefill of the tokens it should hold. With a
    sliding-window layer too: rolling back needs keys that a rolling window would already have dropped."""
    pair = make_pair(arch)
    fed: dict[int, list[int]] = {}
    models: dict[int, object] = {}
    real_forward, real_crop = kv.forward, kv.crop_to
    checked = []

    def forward(model, ids, cache, last, vocab, features=False):
        fed.setdefault(id(cache), []).extend(torch.as_tensor(ids).flatten().tolist())
        models[id(cache)] = model
        return real_forward(model, ids, cache, last, vocab, features=features)

    def crop_to(cache, n):
        real_crop(cache, n)
        tokens = fed.setdefault(id(cache), [])
        del tokens[n:]
        if n:
            fresh = kv.new_cache(models[id(cache)])
            real_forward(models[id(cache)], tokens, fresh, 1, 4096)
            for a, b in zip(cache.layers, fresh.layers):
                torch.testing.assert_close(a.keys, b.keys, atol=1e-5, rtol=0)
                torch.testing.assert_close(a.values, b.values, atol=1e-5, rtol=0)
            checked.append(tokens[:])

    monkeypatch.setattr(kv, "forward", forward)
    monkeypatch.setattr(kv, "crop_to", crop_to)
    out = Engine(pair).generate(PROMPT, 24, temperature=1.0, k=3, seed=2, speculate="model")
    full = out.prompt + out.tokens
    assert len(checked) > 10
    assert all(full[:len(t)] == t for t in checked)  # only committed tokens ever stay cached


@pytest.mark.parametrize("kwargs, error, message", [
    ({"k": -1}, ValueError, "k must be >= 0, got -1"),
    ({"k": 1.5}, TypeError, "k must be an integer"),
    ({"k": "lots"}, ValueError, "k='lots' is not a draft-length policy"),
    ({"temperature": -1}, ValueError, "temperature"),
    ({"top_p": 0}, ValueError, "top_p"),
    ({"top_k": 0}, ValueError, "top_k"),
    ({"speculate": "crystal-ball"}, ValueError, "speculate='crystal-ball' is not a drafter"),
    ({"speculate": "ngram", "ngram": 0}, ValueError, "ngram must be >= 1"),
    ({"max_new_tokens": -3}, ValueError, "max_new_tokens must be >= 0"),
    ({"prompt": [1, 99999]}, ValueError, "token id 99999"),
    ({"temperature": 1e-46}, ValueError, r"temperature must be 0 \(greedy\) or at least 1e-30"),
])
def test_bad_input_is_refused_before_anything_runs(pair, kwargs, error, message):
    engine = Engine(pair)
    with pytest.raises(error, match=message):
        engine.generate(**{"prompt": PROMPT, **kwargs})
    assert len(engine.events) == 0 and engine.requests == 0


def test_record_top_is_bounded_by_the_vocabulary(pair):
    """record_top=1e6 once ended in a RuntimeError from torch's topk at the first judged token."""
    with pytest.raises(ValueError, match=f"record_top must be at most the vocabulary's {pair.vocab_size:,} tokens"):
        Engine(pair, record_top=pair.vocab_size + 1)
    log = EventLog()
    Engine(pair, events=log, record_top=pair.vocab_size).generate(PROMPT, 2, k=1)
    assert max(len(e.top_p) for e in log if e.kind == "bonus") == pair.vocab_size


def test_a_pair_without_a_draft_cannot_use_the_model_drafter(pair):
    no_draft = Pair(pair.target, None, pair.tokenizer, 4096, "t", pair.device)
    with pytest.raises(ValueError, match="speculate='model' needs a draft model"):
        Engine(no_draft).generate(PROMPT)
    assert Engine(no_draft).generate(PROMPT, 5, speculate="ngram").stats.new_tokens == 5


def test_greedy_identity_on_the_bundled_pair_for_every_drafter_and_k():
    from teachspec import load_pair

    pair = load_pair("tiny")
    engine = Engine(pair, cache_tokens=0)
    for text in ("Return a new dictionary", "The \"with\" statement"):
        prompt = pair.encode(text)
        ref = decode(pair.target, prompt, 32, SamplingParams(), None, pair.eos_token_id, pair.vocab_size)[0]
        for speculate in DRAFTERS:
            for k in (1, 2, 4, "adaptive"):
                assert engine.generate(prompt, 32, speculate=speculate, k=k).tokens == ref, (text, speculate, k)


def test_the_bundled_draft_agrees_with_the_target_as_its_card_says():
    """Re-measure the card's greedy alpha on a few held-out prompts: the card's number is not made up."""
    import json

    from teachspec import load_pair
    from teachspec.models import BUNDLED
    from teachspec.tools.card import agreement, held_out_prompts

    pair = load_pair("tiny")
    card = json.loads((BUNDLED["tiny"] / "card.json").read_text())
    measured = agreement(pair, held_out_prompts(pair, 8, 32), 48)
    assert card["agreement"]["greedy_alpha"] >= 0.6
    assert abs(measured["greedy_alpha"] - card["agreement"]["greedy_alpha"]) < 0.12
