"""The EAGLE head: shipped small, loaded only for its own target, its hand-written pass equal to transformers' own
forward of the same layer, drafting from exactly the target's features (checked against a fresh computation after
every step), greedy output identical to plain decoding for chains and trees with and without a warm radix cache
(over its draft vocabulary, and without one), and sampled output distributed as the target's. The draft
vocabulary's own tests are in `test_draft_vocab.py`."""

import dataclasses
import json

import pytest
import torch

from helpers.laws import follows, target_law
from teachspec import Engine, kv, load_pair
from teachspec.models.eagle import EagleHead, head_config, load_head, save_head
from teachspec.models.pair import BUNDLED
from teachspec.request import Request
from teachspec.sampling import SamplingParams
from teachspec.speculative.policies import make_policy
from teachspec.speculative.tree_policy import make_tree_policy
from teachspec.stopping import StopRule

HEAD = BUNDLED["tiny"] / "eagle"


@pytest.fixture(scope="module")
def pair():
    return load_pair("tiny")


def test_the_bundled_head_is_small_loads_with_the_pair_and_its_card_reports_training(pair):
    assert (HEAD / "model.safetensors").stat().st_size <= 5 * 2**20
    assert isinstance(pair.eagle, EagleHead)
    card = json.loads((HEAD / "config.json").read_text())["eagle"]
    assert card["minutes"] > 0 and card["tokens"] > 0
    assert 0.5 < card["greedy_agreement"][0] <= 1  # a trained head, not random weights (1 / 4096 by chance)


def test_a_head_is_refused_by_a_target_of_another_width(tmp_path, pair):
    from helpers.models import build_model
    other = build_model("llama", hidden=64)
    save_head(EagleHead(head_config(other)), tmp_path / "head")
    with pytest.raises(ValueError, match=r"reads features of width 64, but the target's hidden size is 384"):
        load_head(tmp_path / "head", pair.target)
    with pytest.raises(FileNotFoundError, match=r"eagle='.*nothing': no EAGLE head there"):
        load_pair("tiny", eagle=tmp_path / "nothing")


def test_saving_and_loading_a_head_keeps_its_function(tmp_path, pair):
    head = EagleHead(head_config(pair.target))
    save_head(head, tmp_path / "head", {"minutes": 1.0})
    again = load_head(tmp_path / "head", pair.target, lowered=False)
    lowered = load_head(tmp_path / "head", pair.target, lowered=True)  # bfloat16, packed for oneDNN
    f, e = torch.randn(1, 5, 384), torch.randn(1, 5, 384)
    pos = torch.arange(1, 6)[None]
    with torch.no_grad():  # weights are stored in float16: the same function up to that rounding
        expected = head.half().float()(f, e, pos)
        assert torch.allclose(expected, again(f, e, pos), atol=1e-4)
        for rows in (slice(0, 5), slice(4, 5)):  # several rows, and one
            want = head.half().float()(f[:, rows], e[:, rows], pos[:, rows])
            got = lowered(f[:, rows], e[:, rows], pos[:, rows]).float()  # up to bfloat16's rounding (2^-8)
            assert (got - want).norm() / want.norm() < 0.02


def transformers_pass(head, features, embeds, position_ids, cache=None, attention_mask=None):
    """The same layer run by transformers' own `LlamaModel.forward`: the trusted peer of `EagleHead.forward`."""
    x = head.fc(torch.cat([features, embeds], dim=-1))
    return head.layers(inputs_embeds=x, position_ids=position_ids, attention_mask=attention_mask,
                       use_cache=cache is not None, **{kv.cache_keyword(type(head.layers)): cache}).last_hidden_state


def test_the_heads_pass_is_transformers_forward_of_the_same_layer(pair):
    """Causal over the new entries (no cache, then on top of a cache), one row (MKL's kernel, not the packed one)
    and a tree's mask (each node sees the committed entries and its ancestors)."""
    head, g = load_head(HEAD, pair.target, lowered=False), torch.Generator().manual_seed(0)  # float32, packed
    with torch.inference_mode():
        f, e = torch.randn(1, 20, 384, generator=g), torch.randn(1, 20, 384, generator=g)
        pos = torch.arange(3, 23)[None]
        assert torch.allclose(head(f, e, pos), transformers_pass(head, f, e, pos), atol=1e-5)
        ours, theirs = kv.new_cache(head.layers), kv.new_cache(head.layers)
        for part in (slice(0, 12), slice(12, 19), slice(19, 20)):  # several entries, then one
            assert torch.allclose(head(f[:, part], e[:, part], pos[:, part], cache=ours),
                                  transformers_pass(head, f[:, part], e[:, part], pos[:, part], cache=theirs),
                                  atol=1e-5)
        assert torch.allclose(ours.layers[0].keys, theirs.layers[0].keys, atol=1e-5)
        parents = (-1, 0, 0, 1, 2)
        mask, positions = kv.tree_mask(head.layers, 20, 20, parents, range(1, 5))
        ft, et = torch.randn(1, 4, 384, generator=g), torch.randn(1, 4, 384, generator=g)
        assert torch.allclose(head(ft, et, positions[None] + 3, cache=ours, attention_mask=mask),
                              transformers_pass(head, ft, et, positions[None] + 3, cache=theirs, attention_mask=mask),
                              atol=1e-5)


def fresh_features(pair, ids: list[int]) -> torch.Tensor:
    """The target's last hidden state at every position of `ids`, computed from scratch."""
    return kv.forward(pair.target, ids, kv.new_cache(pair.target), 1, pair.vocab_size, features=True)[1]


@pytest.mark.parametrize("tree", [None, (2, 2), "dynamic"])
def test_after_every_step_the_head_holds_entries_built_from_the_targets_real_features(pair, tree):
    """Between steps the drafter holds the target's features of exactly the committed positions, and its cache
    equals a fresh run of the head over them: a guessed entry never survives a step, even an accepted one. (The
    head in float32, so that the two runs agree to float32's rounding, not bfloat16's.)"""
    pair = dataclasses.replace(pair, eagle=load_head(HEAD, pair.target, lowered=False))
    engine = Engine(pair, cache_tokens=0)
    prompt = pair.encode("def parse(path):\n    with open(path) as f:")
    r = Request(engine.next_id(), prompt, 40, SamplingParams(temperature=1.0), StopRule(), engine.drafter("eagle"),
                make_policy(4), torch.Generator().manual_seed(0), tree=make_tree_policy(tree, adaptive=None))
    drafted = 0
    with engine.running(r):
        while not r.done:
            engine.step(r)
            d = r.drafter
            f = fresh_features(pair, r.ids)
            assert d.first == 0 and len(d.features) == len(r.ids) - 1
            assert torch.allclose(d.features, f[:-1], atol=1e-4)
            n = kv.length(d.cache)
            drafted += n > 0
            if n:  # entries start .. start + n - 1 read f_{start - 1} .. and tokens x_start ..
                cache = kv.new_cache(d.head.layers)
                ids = torch.tensor([r.ids[d.start:d.start + n]])
                pos = torch.arange(d.start, d.start + n)[None]
                d.head(f[None, d.start - 1:d.start - 1 + n], d.embed(ids), pos, cache=cache)
                assert torch.allclose(d.cache.layers[0].keys, cache.layers[0].keys, atol=1e-4)
    assert drafted >= 3 and r.stats.accepted > 0


@pytest.mark.parametrize("options", [dict(k=1), dict(k=4), dict(k="adaptive"), dict(tree=(2, 2)),
                                     dict(tree=(3, 2, 1)), dict(tree=(1, 1, 1, 1)), dict(tree="dynamic"),
                                     dict(tree="adaptive")])
def test_greedy_eagle_is_plain_decoding_token_for_token_cold_and_warm(pair, options):
    cold, warm = Engine(pair, cache_tokens=0), Engine(pair)
    prompts = ['The "with" statement', 'The "with" statement is used to wrap', "Return a new dictionary"]
    for prompt in prompts:
        plain = cold.generate(prompt, 48, speculate=None)
        assert cold.generate(prompt, 48, speculate="eagle", **options).tokens == plain.tokens
        assert warm.generate(prompt, 48, speculate="eagle", **options).tokens == plain.tokens
    assert warm.generate(prompts[1], 48, speculate="eagle", **options).stats.cached_tokens > 0
    assert sum(e.kind in ("draft", "tree_draft") and e.drafter == "eagle" for e in cold.events) >= 10


def test_a_head_without_a_draft_vocabulary_reads_every_token_and_is_plain_decoding(pair):
    head = EagleHead(pair.eagle.config)  # the bundled head's weights, no table
    head.load_state_dict(pair.eagle.state_dict())
    engine = Engine(dataclasses.replace(pair, eagle=head), cache_tokens=0)
    assert engine.drafter("eagle").lm_head is pair.target.get_output_embeddings()
    for options in (dict(k=4), dict(tree=(2, 2))):
        plain = engine.generate("Return a new dictionary", 32, speculate=None).tokens
        assert engine.generate("Return a new dictionary", 32, speculate="eagle", **options).tokens == plain


@pytest.mark.parametrize("options", [dict(k=2), dict(tree=(2, 2))])
def test_sampled_eagle_output_is_the_targets_law(pair, options):
    """Four tokens at temperature 1, top-k 2 (16 outcomes): the first step is plain (no features yet), the next
    ones draft from the head (sampled guesses read q over the whole vocabulary: `EagleDrafter.reduce_sampled`;
    over the draft vocabulary, `test_draft_vocab.py`); a chi-square test against the target's exact law."""
    prompt = pair.encode("def parse(path):\n    with open(path) as f:")
    law = target_law(pair, prompt, SamplingParams(temperature=1.0, top_k=2), 4)
    engine, n = Engine(pair, cache_tokens=0), 1200
    counts = dict.fromkeys(law, 0)
    for seed in range(n):
        counts[tuple(engine.generate(prompt, 4, temperature=1.0, top_k=2, speculate="eagle", seed=seed,
                                     **options).tokens)] += 1
    assert sum(e.kind in ("draft", "tree_draft") for e in engine.events) >= n  # the head really drafted
    assert follows(law, counts) > 1e-3


def test_a_pair_without_a_head_refuses_eagle_by_name(pair):
    bare = load_pair(target=pair.target, draft=pair.draft, tokenizer=pair.tokenizer)
    with pytest.raises(ValueError, match=r"speculate='eagle' needs an EAGLE head trained for this target"):
        Engine(bare).generate("x", 4, speculate="eagle")
