"""Real model families, exactly as transformers runs them: the same prompt (special tokens included), the same eos
list and stop strings, token for token, for plain decoding, every drafter and a warm radix cache.

Each family is built from a config with random weights and an instruct-style tokenizer (a BOS, a chat template,
two eos ids). The eos ids and the stop string are taken from the model's own greedy continuation, so each run
really stops early, and in the middle of a speculation step as often as not (the pairs: tests/helpers/families.py).
"""

import pytest
import torch

from helpers.families import FAMILIES, N, TEXT, family_pair, stop_rules
from teachspec import Engine, load_pair
from teachspec.decode import generate as plain_generate


def transformers_greedy(target, tok, eos: list[int], stop: str | None) -> list[int]:
    ids = tok(TEXT, return_tensors="pt").input_ids
    kw = dict(stop_strings=[stop], tokenizer=tok) if stop else {}
    out = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=N, do_sample=False,
                          eos_token_id=eos, pad_token_id=0, **kw)
    return out[0, ids.shape[1]:].tolist()


@pytest.mark.parametrize("arch", FAMILIES)
def test_greedy_output_is_transformers_generate_with_its_special_tokens_eos_list_and_stop_strings(arch):
    target, draft, tok = family_pair(arch)
    eos, stop = stop_rules(target, tok)
    target.generation_config.eos_token_id = eos  # as an instruct model's generation_config.json lists them
    pair = load_pair(target=target, draft=draft, tokenizer=tok)
    assert set(pair.eos) == set(eos)
    bos_prompt = tok(TEXT).input_ids
    assert bos_prompt[0] == tok.bos_token_id

    for stops in (None, stop):
        ref = transformers_greedy(target, tok, eos, stops)
        assert len(ref) < N, "the rules must stop the reference early, or this test proves nothing"
        plain = plain_generate(TEXT, N, pair=pair, stop=stops)
        assert plain.prompt == bos_prompt and plain.tokens == ref, (arch, stops)
        assert plain.finish_reason == ("eos" if ref[-1] in eos else "stop")
        cold = Engine(pair, cache_tokens=0)
        for speculate, k in ((None, 0), ("model", 1), ("model", 3), ("model", "adaptive"), ("ngram", 3),
                             ("oracle", 4), ("adversary", 2)):
            out = cold.generate(TEXT, N, speculate=speculate, k=k, stop=stops)
            assert out.prompt == bos_prompt and out.tokens == ref, (arch, stops, speculate, k)
            assert out.finish_reason == plain.finish_reason
        warm = Engine(pair)
        first = warm.generate(TEXT, N, speculate="model", k=3, stop=stops)
        again = warm.generate(TEXT, N, speculate="model", k=3, stop=stops)
        assert first.tokens == again.tokens == ref
        assert again.stats.cached_tokens == len(bos_prompt) - 1  # all but the last prompt token, from the tree
        warm.radix.check_invariants()


def test_a_stop_inside_an_accepted_run_drops_the_rest_of_the_step_from_both_caches_and_the_tree():
    """The oracle's guesses are all accepted, so the stop string falls inside a run of accepted guesses: what
    follows it must leave the caches and never reach the radix tree, exactly as a rejection would."""
    target, draft, tok = family_pair("llama")
    eos, stop = stop_rules(target, tok)
    target.generation_config.eos_token_id = None
    pair = load_pair(target=target, draft=draft, tokenizer=tok)
    ref = transformers_greedy(target, tok, [], stop)
    engine = Engine(pair)
    out = engine.generate(TEXT, N, speculate="oracle", k=8, stop=stop)
    assert out.tokens == ref and out.finish_reason == "stop"
    assert out.stats.target_passes < len(ref)  # several tokens a pass: the stop fell inside a run
    stored = engine.radix.match_prefix(out.prompt + out.tokens + [0]).length
    assert stored == len(out.prompt) + len(out.tokens) - 1  # committed tokens only, no guess past the stop
    engine.radix.check_invariants()


def test_prompts_as_token_ids_a_list_or_a_1d_tensor():
    target, draft, tok = family_pair("qwen2")
    pair = load_pair(target=target, draft=draft, tokenizer=tok)
    ids = tok(TEXT).input_ids
    engine = Engine(pair, cache_tokens=0)
    text = engine.generate(TEXT, 12, speculate="model", k=2)
    assert engine.generate(ids, 12, speculate="model", k=2).tokens == text.tokens
    assert engine.generate(torch.tensor(ids), 12, speculate="model", k=2).tokens == text.tokens
    with pytest.raises(TypeError, match=r"prompt as a tensor must be 1-D .* got shape \(1, 15\)"):
        engine.generate(torch.tensor([ids]), 12)


@pytest.mark.parametrize("stop, error, message", [
    (5, TypeError, r"stop must be a string or a list of strings, got 5"),
    ([""], ValueError, r"stop\[0\] must be a non-empty string"),
    (["ok", None], ValueError, r"stop\[1\] must be a non-empty string, got None"),
])
def test_bad_stop_strings_are_refused_before_anything_runs(stop, error, message):
    target, draft, tok = family_pair("llama")
    engine = Engine(load_pair(target=target, draft=draft, tokenizer=tok))
    with pytest.raises(error, match=message):
        engine.generate(TEXT, 5, stop=stop)
    assert engine.requests == 0 and engine.radix.total_size == 0
