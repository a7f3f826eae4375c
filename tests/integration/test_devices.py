"""The engine runs unchanged on a GPU, and this machine has none: so these tests watch every tensor the package
itself creates while it generates, scores and verifies, and require each to be placed on a device explicitly. A
factory call without `device=` makes a CPU tensor, which on a GPU would meet the models' tensors in the next
operation and fail there (a gather with CPU indices into CUDA probabilities, say)."""

from __future__ import annotations

import pytest
import torch

from helpers.devices import Placements
from helpers.pairs import COPY_PROMPT, PROMPT, make_pair
from teachspec.decode import decode
from teachspec.engine import Engine
from teachspec.program.score import score
from teachspec.sampling import SamplingParams
from teachspec.speculative.verify import verify, verify_batch


def test_the_watch_sees_a_factory_without_a_device():
    import teachspec.sampling as sampling  # any module of the package: the watch goes by the caller's file
    code = compile("torch.arange(3)", sampling.__file__, "exec")
    with Placements() as watch:
        exec(code, {"torch": torch})
    assert len(watch.unplaced) == 1 and "torch.arange" in watch.unplaced[0]


@pytest.mark.parametrize("temperature, top_k, top_p", [(0.0, None, None), (1.0, 20, 0.9)])
def test_every_tensor_the_engine_makes_is_placed(temperature, top_k, top_p):
    engine = Engine(make_pair(), record_top=3)
    with Placements() as watch:
        for speculate, k in [("model", 3), ("model", "adaptive"), ("ngram", 4), ("oracle", 2), ("adversary", 2),
                             (None, 0)]:
            prompt = COPY_PROMPT if speculate == "ngram" else PROMPT
            engine.generate(prompt, 12, temperature=temperature, top_k=top_k, top_p=top_p, speculate=speculate,
                            k=k, seed=0)
        for speculate in ("model", "ngram"):  # trees: the draft grows one, the target checks it in one pass
            prompt = COPY_PROMPT if speculate == "ngram" else PROMPT
            engine.generate(prompt, 12, temperature=temperature, top_k=top_k, top_p=top_p, speculate=speculate,
                            tree=(2, 2), seed=0)
        engine.generate(PROMPT + [5, 6], 6, temperature=temperature, speculate="model", k=2, seed=1)  # a reuse
        score(engine, PROMPT, [[1, 2, 3], [4]])
        decode(engine.pair.target, PROMPT, 6, SamplingParams(temperature, top_k, top_p), torch.Generator(), None,
               engine.pair.vocab_size)
    assert watch.unplaced == []


def test_verify_places_its_draws_on_p_s_device():
    p = torch.softmax(torch.randn(2, 4, 10, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(2, 3, 10, dtype=torch.float64), -1)
    draft = torch.randint(0, 10, (2, 3))
    with Placements() as watch:
        verify(p[0], q[0], draft[0], torch.Generator().manual_seed(0))
        verify_batch(p, q, draft, torch.Generator().manual_seed(0))
    assert watch.unplaced == []


@pytest.mark.parametrize("name", ["draft", "q"])
def test_inputs_on_another_device_are_refused(name):
    p = torch.softmax(torch.randn(3, 10), -1)
    args = {"q": torch.softmax(torch.randn(2, 10), -1), "draft": torch.tensor([1, 2])}
    args[name] = args[name].to("meta")  # a device with no data: the check must come before any arithmetic
    with pytest.raises(ValueError, match=f"{name} is on meta and p on cpu"):
        verify(p, args["q"], args["draft"], torch.Generator())
