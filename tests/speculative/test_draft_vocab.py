"""The EAGLE head's reduced draft vocabulary (EAGLE-3): q read out over V' tokens, mapped back to token ids by a table.

Three kinds of checks:

- the law, by the chi-square harness of `test_verify_statistics` (`helpers.statistics`: a Markov "language" of 10
  tokens, k = 3 guesses a step, 200,000 rows): the guesses are drawn from q over a draft vocabulary of 6 of the 10
  tokens, mapped to their ids, and judged with that q widened to the full vocabulary (`speculative.eagle.widen`), as
  the drafter does. The emitted tokens must follow the target's law, tokens outside the draft vocabulary included
  (they come from resampling and the bonus); and the same harness must reject each classic bug of a reduced
  vocabulary;
- the table: checked where it is read (ids in range, each once, integers), with errors that name it;
- the drafter, on the bundled pair: guesses never leave the draft vocabulary, the q handed to verification is the
  q they were drawn from, greedy output is plain decoding's, and sampled output follows the target's law.
"""

import json

import pytest
import torch

from helpers.statistics import DRAFT_LOGITS, MUTANT_P, N, SOFTMAX, V, check_passes, run_tests, speculate
from teachspec import Engine, load_pair
from teachspec.models.eagle import EagleHead, check_draft_vocab, coverage, draft_vocabulary, head_config, \
    load_head, save_head
from teachspec.models.pair import BUNDLED
from teachspec.sampling import SamplingParams, sample, warp
from teachspec.speculative.eagle import EagleDrafter, widen

VOCAB = torch.tensor([0, 2, 3, 5, 7, 8])  # the draft vocabulary: 6 of the 10 tokens; 1, 4, 6 and 9 never guessed


# -- the law, with one bug at a time -----------------------------------------------------------------------------

def guess(q_reduced, q_full, g, bug):
    """One guess per row and the q verification is given: (token ids (b,), q (b, V))."""
    if bug == "guess from the full q, reduced q given":  # drafted over every token, judged by the reduced q
        return sample(q_full, g), widen(q_reduced, VOCAB, V)
    x = sample(q_reduced, g)  # (b,): entries of q, not token ids
    if bug == "entries taken for token ids":
        return x, widen(q_reduced, VOCAB, V)
    if bug == "q renormalised over the full vocabulary":  # the head's softmax over every token, as if no table
        return VOCAB[x], q_full
    if bug == "q widened by position":  # entry i put at token i
        return VOCAB[x], torch.nn.functional.pad(q_reduced, (0, V - len(VOCAB)))
    return VOCAB[x], widen(q_reduced, VOCAB, V)


def simulate(n: int, seed: int, bug: str | None = None):
    """Speculate until each of n rows has emitted K + 1 tokens, the draft guessing over VOCAB (see the module
    docstring), with `test_verify_statistics`' harness (`helpers.statistics`), whose tests this reuses."""
    q_reduced_all = warp(DRAFT_LOGITS[..., VOCAB], SOFTMAX)  # (2, V, V'): the draft's q over its vocabulary
    q_full_all = warp(DRAFT_LOGITS, SOFTMAX)  # (2, V, V)
    g = torch.Generator().manual_seed(seed)
    return speculate(n, g, lambda parity, token: guess(q_reduced_all[parity, token], q_full_all[parity, token], g,
                                                       bug))["tokens"]


def test_guesses_over_a_draft_vocabulary_leave_the_targets_law_unchanged():
    tokens = simulate(N, seed=11)
    assert set(tokens.ravel().tolist()) == set(range(V))  # tokens outside the draft vocabulary are still emitted
    check_passes(tokens)


BUGS = ["q renormalised over the full vocabulary", "guess from the full q, reduced q given",
        "entries taken for token ids", "q widened by position"]


@pytest.mark.parametrize("bug", BUGS)
def test_the_harness_rejects_each_classic_bug_of_a_draft_vocabulary(bug):
    results = run_tests(simulate(N, seed=12, bug=bug))
    smallest = min(p_value for p_value, _ in results.values())
    assert smallest < MUTANT_P, f"{bug} survived: smallest p = {smallest:.3g}"


def test_widen_puts_each_entry_at_its_token_and_zero_elsewhere():
    q = torch.tensor([[0.5, 0.25, 0.125, 0.0625, 0.0625, 0.0]])
    full = widen(q, VOCAB, V)
    assert full.shape == (1, V) and full[0, VOCAB].tolist() == q[0].tolist()
    assert full[0, [1, 4, 6, 9]].tolist() == [0.0] * 4 and full.sum() == 1


# -- the table -----------------------------------------------------------------------------------------------------

def test_the_most_frequent_tokens_make_the_table_and_coverage_counts_what_it_holds():
    counts = torch.tensor([5.0, 0.0, 9.0, 1.0, 9.0, 3.0])
    assert draft_vocabulary(counts, 3).tolist() == [0, 2, 4]  # ids in order; the tie at 9 does not matter here
    assert draft_vocabulary(counts, 4).tolist() == [0, 2, 4, 5]
    assert draft_vocabulary(torch.tensor([1.0, 2.0, 2.0]), 1).tolist() == [1]  # a tie: the smaller id
    assert coverage(torch.tensor([0, 2]), torch.tensor([[0, 1], [2, 2]])) == 0.75
    with pytest.raises(ValueError, match=r"size must be an int in \[1, 6\] \(the vocabulary's size\), got 7"):
        draft_vocabulary(counts, 7)


@pytest.mark.parametrize("table, message", [
    ([3, 7, 4096], r"draft_vocab must hold token ids in \[0, 4096\), the target's vocabulary \(in .*draft_vocab"
                   r"\.json\); it holds 4096 at position 2"),
    ([3, -1, 7], r"draft_vocab must hold token ids in \[0, 4096\).*; it holds -1 at position 1"),
    ([3, 7, 3], r"draft_vocab must list each token id once \(in .*\); 3 appears at positions \[0, 2\]"),
    ([3.0, 7.0], r"draft_vocab must be a list of integer token ids \(.*draft_vocab\.json\), got list \[3\.0, 7\.0\]"),
    ("3 7", r"draft_vocab must be a list of integer token ids \(.*\), got str 3 7"),
    ([], r"draft_vocab must be a non-empty 1-D tensor of integer token ids \(in .*\), got torch.int64 of shape "
         r"\(0,\)"),
])
def test_a_bad_table_is_refused_on_load_naming_what_is_wrong(tmp_path, table, message):
    pair = load_pair("tiny")
    save_head(EagleHead(head_config(pair.target), torch.tensor([3, 7])), tmp_path / "head")
    (tmp_path / "head" / "draft_vocab.json").write_text(json.dumps({"draft_vocab": table}))
    with pytest.raises(ValueError, match=message):
        load_head(tmp_path / "head", pair.target)


def test_the_table_is_checked_when_a_head_is_made_and_when_a_drafter_reads_it():
    config = head_config(load_pair("tiny").target)
    with pytest.raises(ValueError, match=r"draft_vocab must be a non-empty 1-D tensor of integer token ids, got "
                                         r"torch.float32 of shape \(2,\)"):
        EagleHead(config, torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"draft_vocab must list each token id once; 5 appears at positions \[0, 1\]"):
        check_draft_vocab(torch.tensor([5, 5]))
    pair = load_pair("tiny")
    head = EagleHead(config, torch.tensor([1, 4000]))
    with pytest.raises(ValueError, match=r"draft_vocab must hold token ids in \[0, 3000\), the target's vocabulary "
                                         r"\(the EAGLE head's, against the pair's vocabulary\); it holds 4000 at "
                                         r"position 1"):
        EagleDrafter(head, pair.target, 3000)  # a pair whose shared vocabulary is smaller than the target's


def test_a_head_keeps_its_table_through_saving_and_loading_and_one_without_reads_every_token(tmp_path):
    pair = load_pair("tiny")
    head = EagleHead(head_config(pair.target), torch.tensor([9, 2, 40]))
    save_head(head, tmp_path / "head")
    again = load_head(tmp_path / "head", pair.target, lowered=False)  # float32: the rows copied exactly
    assert again.draft_vocab.tolist() == [9, 2, 40] and again.draft_vocab.dtype == torch.long
    assert again.lm_head(pair.target).weight.shape == (3, 384)
    assert torch.equal(again.lm_head(pair.target).weight, pair.target.get_output_embeddings().weight[[9, 2, 40]])
    head.draft_vocab = None
    save_head(head, tmp_path / "head")  # the stale table goes
    assert not (tmp_path / "head" / "draft_vocab.json").exists()
    assert load_head(tmp_path / "head", pair.target, lowered=False).lm_head(pair.target) is \
        pair.target.get_output_embeddings()


def test_the_bundled_head_has_a_table_and_its_card_reports_coverage():
    pair = load_pair("tiny")
    assert pair.eagle.draft_vocab is not None and len(pair.eagle.draft_vocab) == 1024
    card = json.loads((BUNDLED["tiny"] / "eagle" / "config.json").read_text())["eagle"]["draft_vocab"]
    assert card["size"] == 1024 and 0.8 < card["coverage"] < 1  # of the target's own held-out tokens
    sizes = {int(v): row for v, row in card["sizes"].items()}
    assert sizes[4096]["coverage"] == 1.0 and sorted(sizes) == [256, 512, 1024, 2048, 4096]
    assert [sizes[v]["coverage"] for v in sorted(sizes)] == sorted(sizes[v]["coverage"] for v in sizes)


def test_the_model_card_reports_the_coverage_it_measured_and_the_heads_precision():
    """Re-measure the model card's coverage on a few of its held-out prompts (`teachspec.tools.card`): the
    card's number is not made up, and MODEL_CARD.md says what card.json holds."""
    from teachspec.tools.card import continuations, draft_vocab, held_out_prompts

    pair = load_pair("tiny")
    card = json.loads((BUNDLED["tiny"] / "card.json").read_text())
    vocab, run = card["eagle"]["draft_vocab"], card["eagle"]["precision"]
    prompts = held_out_prompts(pair, 8, card["measured_with"]["prompt_tokens"])
    measured = draft_vocab(pair, continuations(pair, prompts, 48))
    assert vocab["size"] == measured["size"] == 1024
    assert 0.8 < vocab["coverage"] <= 1 and abs(measured["coverage"] - vocab["coverage"]) < 0.05
    assert run["dtype"] in ("bfloat16", "float32") and run["packed"]
    text = (BUNDLED["tiny"] / "MODEL_CARD.md").read_text()
    assert f"**Coverage {vocab['coverage']:.3f}**" in text
    assert f"the head ran in {run['dtype']}, its linear layers and its read-out packed" in text


def greedy_by_full_passes(model, prompt: list[int], n: int) -> list[int]:
    """The model's greedy continuation, each token from a full forward pass over everything before it (no cache)."""
    ids = list(prompt)
    with torch.inference_mode():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


def test_the_model_cards_coverage_counts_the_targets_greedy_tokens_inside_the_draft_vocabulary():
    """`card.draft_vocab` on a small random pair built from a config, against a brute-force count: the target's
    greedy continuations by full passes, each token looked up in a Python set. The table holds every prompt token
    and every other distinct token of the continuations, so a count that took in the prompts, or the tokens outside
    the table, or the wrong continuations, would give another number."""
    from helpers.models import TOKENIZER_DIR, build_model
    from transformers import AutoTokenizer

    from teachspec.tools.card import continuations, draft_vocab
    from teachspec.models.pair import Pair

    target = build_model("llama", seed=1)
    prompts = [list(range(50, 62)), list(range(300, 310)), [7, 8, 9] * 4]
    written = [greedy_by_full_passes(target, prompt, 24) for prompt in prompts]
    distinct = sorted({x for cont in written for x in cont})
    table = sorted({x for prompt in prompts for x in prompt} | set(distinct[::2]))
    head = EagleHead(head_config(target), torch.tensor(table))
    pair = Pair(target, None, AutoTokenizer.from_pretrained(TOKENIZER_DIR), 4096, "llama", torch.device("cpu"),
                None, head)
    assert continuations(pair, prompts, 24) == written
    inside = sum(x in set(table) for cont in written for x in cont)
    assert 0 < inside < 72 and len(distinct) >= 4  # a count that can tell the right answer from others
    report = draft_vocab(pair, written)
    assert report["size"] == len(table) and report["tokens"] == 72
    assert report["coverage"] == pytest.approx(inside / 72, abs=1e-6)
    head.draft_vocab = None  # no table: q reads every token
    assert draft_vocab(pair, written) == {"size": 4096, "coverage": 1.0, "tokens": 72}


# -- the drafter on the bundled pair -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pair():
    return load_pair("tiny")


@pytest.fixture
def reduce_sampled(monkeypatch):
    """Sampled guesses over the draft vocabulary too (by default they read the whole vocabulary)."""
    monkeypatch.setattr(EagleDrafter, "reduce_sampled", True)


PROMPT = "def parse(path):\n    with open(path) as f:"


@pytest.mark.parametrize("options", [dict(k=4), dict(tree=(2, 2)), dict(tree="dynamic")])
def test_sampled_guesses_never_leave_the_draft_vocabulary_and_carry_the_q_they_were_drawn_from(pair, options,
                                                                                               reduce_sampled):
    engine, vocab = Engine(pair, cache_tokens=0), set(pair.eagle.draft_vocab.tolist())
    proposals = []
    drafter = engine.drafter("eagle")
    for method in ("propose", "propose_tree", "propose_dynamic"):  # every proposal the engine asks for
        original = getattr(drafter, method)

        def spy(*args, original=original, **kwargs):
            proposals.append(original(*args, **kwargs))
            return proposals[-1]
        setattr(drafter, method, spy)
    engine.drafter = lambda *args, **kwargs: drafter
    for seed in range(3):
        engine.generate(PROMPT, 24, temperature=1.0, speculate="eagle", seed=seed, **options)
    drafted = 0
    for proposal in proposals:
        tokens = list(proposal.tree.tokens[1:]) if hasattr(proposal, "tree") else proposal.tokens
        if not tokens:
            continue
        drafted += len(tokens)
        assert set(tokens) <= vocab
        q = proposal.q  # (k or nodes, V): zero outside the draft vocabulary, a distribution in every drawn row
        outside = torch.ones(q.shape[-1], dtype=torch.bool)
        outside[pair.eagle.draft_vocab] = False
        assert q[:, outside].abs().max() == 0
        rows = q.sum(-1)
        assert torch.allclose(rows[rows > 0], torch.ones_like(rows[rows > 0]), atol=1e-5)
    assert drafted >= 20


@pytest.mark.parametrize("options", [dict(k=3), dict(tree=(2, 1)), dict(tree="adaptive")])
def test_greedy_output_with_a_small_draft_vocabulary_is_plain_decodings(pair, options):
    """64 tokens: many of the target's choices are outside it, so guesses are often wrong; the output is not."""
    import dataclasses
    head = EagleHead(pair.eagle.config, draft_vocabulary(torch.arange(4096, 0, -1), 64))  # ids 0 .. 63
    head.load_state_dict(pair.eagle.state_dict())
    small = dataclasses.replace(pair, eagle=head)
    engine = Engine(small, cache_tokens=0)
    for prompt in ['The "with" statement', "Return a new dictionary"]:
        plain = engine.generate(prompt, 32, speculate=None).tokens
        out = engine.generate(prompt, 32, speculate="eagle", **options)
        assert out.tokens == plain
    drafts = [e for e in engine.events if e.kind in ("draft", "tree_draft")]
    guessed = [t for e in drafts for t in (e.tokens if e.kind == "draft" else e.tokens[1:])]
    assert guessed and max(guessed) < 64


def test_sampled_output_with_the_draft_vocabulary_is_the_targets_law(pair, reduce_sampled):
    """Four tokens at temperature 1, top-k 2 (16 outcomes), the guesses read over the bundled head's 1,024 tokens:
    a chi-square test against the target's exact law (`helpers.laws.target_law`)."""
    from helpers.laws import follows, target_law
    prompt = pair.encode(PROMPT)
    law = target_law(pair, prompt, SamplingParams(temperature=1.0, top_k=2), 4)
    engine, n = Engine(pair, cache_tokens=0), 600
    counts = dict.fromkeys(law, 0)
    for seed in range(n):
        counts[tuple(engine.generate(prompt, 4, temperature=1.0, top_k=2, speculate="eagle", k=2,
                                     seed=seed).tokens)] += 1
    assert sum(e.kind == "draft" for e in engine.events) >= n  # the head really drafted
    assert follows(law, counts) > 1e-3
