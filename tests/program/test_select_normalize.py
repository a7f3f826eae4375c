"""select's choices_method: the summed log p (teachspec's default) or its mean per token (SGLang's default,
`token_length_normalized`), the same rule on the local engine and on a server (RemoteEngine), and a wrong name
refused where the program wrote it."""

from __future__ import annotations

import pytest
import torch

from helpers.pairs import make_pair
from teachspec.engine import Engine
from teachspec.program import ProgramError, run, select
from teachspec.program.calls import CHOICES_METHODS, check_choices_method
from teachspec.serving.remote import RemoteEngine


@pytest.fixture(scope="module")
def pair():
    return make_pair()


PROMPT = "Question: what does sorted return\nAnswer:"
CHOICES = [" list", " a new list", " the sorted items of it"]  # 1, 3 and 5 tokens: the sum and the mean can differ


def direct_logprobs(pair, prompt: list[int], choice: list[int]) -> list[float]:
    """log p(choice[i] | prompt, choice[:i]) from one plain forward pass over prompt + choice, no cache anywhere."""
    ids = torch.tensor([prompt + choice])
    with torch.inference_mode():
        logits = pair.target(input_ids=ids).logits[0, :, :pair.vocab_size].double()
    logp = torch.log_softmax(logits, dim=-1)
    return [float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(choice)]


def pick(s, choices_method=None):
    s += PROMPT
    s += select("answer", CHOICES) if choices_method is None else \
        select("answer", CHOICES, choices_method=choices_method)


def test_the_default_is_the_sum_and_normalized_is_the_mean_per_token(pair):
    engine = Engine(pair, cache_tokens=4096)
    prompt = pair.encode(PROMPT)
    direct = {c: direct_logprobs(pair, prompt, pair.encode(c, special=False)) for c in CHOICES}
    summed = {c: sum(lp) for c, lp in direct.items()}
    mean = {c: sum(lp) / len(lp) for c, lp in direct.items()}
    default, explicit = run(pick, engine=engine), run(pick, engine=engine, choices_method="sum")
    normalized = run(pick, engine=engine, choices_method="token_length_normalized")
    for state in (default, explicit):
        assert state.scores["answer"] == pytest.approx(summed, abs=1e-4)
        assert state["answer"] == max(CHOICES, key=summed.get)
    assert max(CHOICES, key=summed.get) != max(CHOICES, key=mean.get)  # so this test tells the two rules apart
    assert normalized.scores["answer"] == pytest.approx(mean, abs=1e-4)
    assert normalized["answer"] == max(CHOICES, key=mean.get)
    assert normalized.text == PROMPT + normalized["answer"]


def test_one_token_choices_rank_alike_under_both_methods(pair):
    def one_token(s, choices_method):
        s += PROMPT
        s += select("answer", [" no", " count", " dict"], choices_method=choices_method)

    engine = Engine(pair, cache_tokens=4096)
    assert all(len(pair.encode(c, special=False)) == 1 for c in (" no", " count", " dict"))
    a = run(one_token, engine=engine, choices_method="sum")
    b = run(one_token, engine=engine, choices_method="token_length_normalized")
    assert a["answer"] == b["answer"]
    assert a.scores["answer"] == pytest.approx(b.scores["answer"], abs=1e-4)  # the second run reads the cache


@pytest.mark.parametrize("bad", ["mean", "normalized", "", None, 1, ["sum"]])
def test_a_choices_method_that_is_not_one_is_refused_by_name_at_the_programs_line(bad):
    with pytest.raises(ValueError, match=r"choices_method must be one of \['sum', 'token_length_normalized'\], got "):
        check_choices_method(bad)

    def program():
        return select("answer", CHOICES, choices_method=bad)

    with pytest.raises(ProgramError) as info:
        program()  # select refuses it as it is made, before any state or engine is touched
    message = str(info.value)
    assert message.startswith("select('answer', ") and "at program line" in message
    assert f"choices_method must be one of ['sum', 'token_length_normalized'], got {bad!r}" in message
    assert isinstance(info.value.__cause__, ValueError)


def test_the_methods_are_the_sum_and_the_mean():
    assert list(CHOICES_METHODS) == ["sum", "token_length_normalized"]
    assert CHOICES_METHODS["sum"]([-1.0, -2.0]) == -3.0
    assert CHOICES_METHODS["token_length_normalized"]([-1.0, -2.0]) == -1.5


class FakeServer(RemoteEngine):
    """A RemoteEngine whose /v1/completions answers select's request from given per-token log-probabilities."""

    def __init__(self, pair, logprobs: dict[tuple[int, ...], list[float]]):
        super().__init__("http://127.0.0.1:1", pair, model="fake")  # a model given: nothing is asked of the URL
        self.logprobs = logprobs

    def complete(self, body: dict) -> dict:
        choices = []
        for index, ids in enumerate(body["prompt"]):
            tail = next(t for t in self.logprobs if tuple(ids[len(ids) - len(t):]) == t)
            head = [None] + [{str(t): {"logprob": -0.5}} for t in ids[1:len(ids) - len(tail)]]
            rows = head + [{str(t): {"logprob": lp}} for t, lp in zip(tail, self.logprobs[tail])]
            choices.append({"index": index, "prompt_logprobs": rows, "text": "", "token_ids": []})
        return {"choices": choices}


def test_a_server_ranks_by_the_same_rule(pair):
    short, long = pair.encode(" list", special=False), pair.encode(" the sorted items of it", special=False)
    assert len(short) == 1 and len(long) > 2
    # the short choice has the higher sum, the long one the higher mean per token
    server = FakeServer(pair, {tuple(short): [-1.0], tuple(long): [-0.6] * len(long)})

    def two(s, choices_method):
        s += PROMPT
        s += select("answer", [" list", " the sorted items of it"], choices_method=choices_method)

    summed = run(two, engine=server, choices_method="sum")
    mean = run(two, engine=server, choices_method="token_length_normalized")
    assert summed["answer"] == " list" and mean["answer"] == " the sorted items of it"
    assert summed.scores["answer"] == pytest.approx({" list": -1.0, " the sorted items of it": -0.6 * len(long)})
    assert mean.scores["answer"] == pytest.approx({" list": -1.0, " the sorted items of it": -0.6})
