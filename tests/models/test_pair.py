"""Loading pairs: the bundled one offline, real ones from folders, and the checks that two models can be paired."""

import time

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from teachspec import load_pair
from teachspec.models import BUNDLED


def test_bundled_pair_loads_offline_quickly(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    pair = load_pair("tiny")
    assert time.perf_counter() - t0 < 5  # generous: "under a second" on an idle machine
    target, draft, tokenizer = pair
    assert target.dtype == torch.float32 and draft.dtype == torch.float32  # stored in fp16, upcast at load
    assert pair.vocab_size == len(tokenizer) == 4096
    assert pair.context >= 2048
    assert sum(p.numel() for p in draft.parameters()) < sum(p.numel() for p in target.parameters()) / 5


def test_bundled_models_open_with_plain_transformers():
    model = AutoModelForCausalLM.from_pretrained(BUNDLED["tiny"] / "target")
    assert model.config.model_type == "llama"


def test_bundled_weights_are_small_and_half_precision_on_disk():
    files = sorted(BUNDLED["tiny"].rglob("*.safetensors"))
    assert [f.parent.name for f in files] == ["draft", "eagle", "target"]
    assert sum(f.stat().st_size for f in files) < 40e6
    from safetensors import safe_open
    for file in files:
        with safe_open(str(file), "pt") as f:
            assert {f.get_tensor(k).dtype for k in f.keys()} <= {torch.float16, torch.bfloat16}


@pytest.mark.parametrize("text", ["def f(x):\n    return x + 1\n", "Return a new dictionary. é ü 中文 🙂", " "])
def test_tokenizer_round_trip(text):
    pair = load_pair("tiny")
    ids = pair.encode(text)
    assert all(0 <= i < pair.vocab_size for i in ids)
    assert pair.decode(ids) == text


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_config_built_pairs_load_from_folders(model_dir, arch):
    pair = load_pair(target=model_dir(arch, "t", seed=1), draft=model_dir(arch, "d", seed=2, layers=1))
    assert pair.vocab_size == 4096
    assert pair.target.config.model_type == pair.draft.config.model_type


def test_padded_vocabularies_are_sliced_to_the_shared_size(model_dir):
    # like Qwen2.5-7B (152,064 rows) against 0.5B (151,936): same tokenizer, extra padding rows in one model
    pair = load_pair(target=model_dir("qwen2", "t", vocab_size=4160), draft=model_dir("qwen2", "d", vocab_size=4096))
    assert pair.vocab_size == 4096


def test_different_tokenizers_are_refused_naming_both(model_dir, tmp_path):
    target = model_dir("llama", "t")
    draft = model_dir("llama", "d", vocab_size=512, tokenizer=False)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel()
    tok.train_from_iterator(["some other text entirely"] * 10, trainers.BpeTrainer(vocab_size=300))
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<e>").save_pretrained(draft)
    with pytest.raises(ValueError, match=r"draft=.*cannot be paired with target=.*4096 tokens.*draft vocabulary"):
        load_pair(target=target, draft=draft)


def test_a_model_too_small_for_the_tokenizer_is_refused(model_dir):
    with pytest.raises(ValueError, match="tokenizer has 4096 tokens"):
        load_pair(target=model_dir("llama", "t", vocab_size=1000))


def test_unknown_name_lists_the_bundled_pairs():
    with pytest.raises(ValueError, match=r"name='huge' is not a bundled pair; bundled pairs are \['tiny'\]"):
        load_pair("huge")


def test_missing_folder_names_the_parameter(tmp_path, model_dir):
    with pytest.raises(FileNotFoundError, match="draft=.*no such folder"):
        load_pair(target=model_dir("llama"), draft=tmp_path / "missing")


def test_name_and_target_together_are_refused(model_dir):
    with pytest.raises(ValueError, match="either a bundled pair name or target="):
        load_pair("tiny", target=model_dir("llama"))


@pytest.mark.parametrize("device, message", [("cuda:7", "device='cuda:7'"), ("tpu", "device='tpu'"),
                                              ("potato", "device='potato'")])
def test_devices_that_do_not_exist_are_refused(device, message):
    if device.startswith("cuda") and torch.cuda.device_count() > 7:
        pytest.skip("this machine really has 8 GPUs")
    with pytest.raises(ValueError, match=message):
        load_pair("tiny", device=device)


def test_unknown_dtype_is_refused():
    with pytest.raises(ValueError, match="dtype='float8'"):
        load_pair("tiny", dtype="float8")
