"""Plain decoding: token-identical to transformers' own greedy `generate`, and strict about its inputs."""

import pytest
import torch

from helpers.models import build_model
from teachspec import load_pair
from teachspec.decode import decode, generate
from teachspec.events import Bonus, Draft, EventLog, Finish, Verify
from teachspec.sampling import SamplingParams


def hf_greedy(model, prompt: list[int], n: int) -> list[int]:
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                         do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def ours_greedy(model, prompt: list[int], n: int, vocab: int) -> list[int]:
    tokens, reason, stats = decode(model, prompt, n, SamplingParams(), None, None, vocab)
    assert reason == "length" and stats.target_passes == n
    return tokens


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_greedy_matches_transformers_generate_on_config_built_models(arch):
    model = build_model(arch, seed=3)
    for prompt in ([5, 17, 300, 9], list(range(40, 90))):
        assert ours_greedy(model, prompt, 24, 4096) == hf_greedy(model, prompt, 24)


def test_greedy_matches_transformers_generate_on_the_bundled_target():
    pair = load_pair("tiny")
    for text in ["Return a new dictionary", "The \"with\" statement is used to", "def parse(path):\n"]:
        prompt = pair.encode(text)
        assert ours_greedy(pair.target, prompt, 40, pair.vocab_size) == hf_greedy(pair.target, prompt, 40)


def test_generate_reports_text_stats_and_events():
    log = EventLog()
    out = generate("Return a new", max_new_tokens=12, events=log)
    assert len(out.tokens) == out.stats.new_tokens <= 12
    assert out.text == load_pair("tiny").decode(out.tokens)
    assert out.stats.tokens_per_s > 0 and out.stats.tokens_per_target_pass == 1.0
    kinds = [e.kind for e in log]
    assert kinds[:2] == ["request_start", "prefill"] and kinds[-1] == "finish"
    # recorded as the engine records a k = 0 step: one Verify over one position and one Bonus, no Draft
    assert [e.token for e in log.of(Bonus)] == out.tokens
    assert [e.n for e in log.of(Verify)] == [1] * len(out.tokens) and not log.of(Draft)
    assert log.of(Finish)[0].new_tokens == len(out.tokens)


def test_sampling_is_seeded_and_stops_at_eos():
    a = generate("The", max_new_tokens=30, temperature=1.0, seed=7)
    b = generate("The", max_new_tokens=30, temperature=1.0, seed=7)
    c = generate("The", max_new_tokens=30, temperature=1.0, seed=8)
    assert a.tokens == b.tokens and a.tokens != c.tokens
    pair = load_pair("tiny")
    tokens, reason, _ = decode(pair.target, pair.encode("x"), 2000, SamplingParams(temperature=1.0),
                               torch.Generator().manual_seed(0), pair.eos_token_id, pair.vocab_size)
    assert reason == "eos" and tokens[-1] == pair.eos_token_id and pair.eos_token_id not in tokens[:-1]


def test_zero_new_tokens_runs_no_model():
    out = generate("Hello", max_new_tokens=0)
    assert out.tokens == [] and out.stats.target_passes == 0


@pytest.mark.parametrize("kwargs, error, message", [
    ({"max_new_tokens": -1}, ValueError, "max_new_tokens must be >= 0, got -1"),
    ({"max_new_tokens": 2.5}, TypeError, "max_new_tokens must be an integer"),
    ({"temperature": -0.5}, ValueError, "temperature"),
    ({"top_p": 1.5}, ValueError, "top_p"),
    ({"top_k": 0}, ValueError, "top_k"),
    ({"prompt": ""}, ValueError, "prompt is empty"),
    ({"prompt": "word " * 2100}, ValueError, r"exceeds the model's context of 2048 tokens"),
    ({"prompt": "hi", "max_new_tokens": 5000}, ValueError, "max_new_tokens=5000 exceeds"),
    ({"prompt": [1, -2]}, ValueError, r"prompt\[1\] must be >= 0"),
])
def test_bad_input_is_refused_with_the_parameter_named(kwargs, error, message):
    kwargs = {"prompt": "Hello", **kwargs}
    with pytest.raises(error, match=message):
        generate(**kwargs)
