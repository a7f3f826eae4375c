"""A newcomer's first hour: each mistake is refused at once, naming the parameter, the value and what is allowed,
before anything changes; nothing quietly stands in for what was asked; the command line answers in seconds."""

from __future__ import annotations

import copy
import io
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from teachspec import Engine, load_pair
from teachspec.chat import Chat
from teachspec.events import EventLog, TraceError
from teachspec.speculative.tree import TokenTree


@pytest.fixture(scope="module")
def pair():
    return load_pair("tiny")


# -- load_pair -------------------------------------------------------------------------------------------------

def test_a_draft_without_a_target_is_refused_not_replaced_by_the_bundled_one(pair):
    with pytest.raises(ValueError, match=r"draft='/nonexistent' needs target="):
        load_pair(draft="/nonexistent")
    with pytest.raises(ValueError, match=r"draft=.* needs target="):
        load_pair(draft=pair.draft)
    with pytest.raises(ValueError, match=r"give either a bundled pair name or target=/draft=, not both"):
        load_pair("tiny", draft="/nonexistent")


def test_a_missing_target_folder_is_named_as_the_target():
    with pytest.raises(FileNotFoundError, match=r"^target='/nonexistent': no such folder"):
        load_pair(target="/nonexistent")


def test_a_tokenizer_or_eagle_head_of_the_wrong_type_is_named(pair):
    with pytest.raises(TypeError, match=r"tokenizer must be a hub id, a local folder or a transformers tokenizer.*"
                                        r"got int 42"):
        load_pair(target=pair.target, tokenizer=42)
    with pytest.raises(TypeError, match=r"eagle must be a folder holding an EAGLE head .* got int 123"):
        load_pair("tiny", eagle=123)


def test_a_hub_id_with_no_network_is_refused_in_seconds(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(FileNotFoundError, match=r"target='gpt2': a hub id that is not in the local cache, and the "
                                                r"hub cannot be reached from here .*hf download gpt2"):
        load_pair(target="gpt2", draft="distilgpt2")


# -- packed weights --------------------------------------------------------------------------------------------

def test_models_copy_and_pickle_after_speculating():
    """The packed copy of a weight (teachspec.models.packed) is an opaque oneDNN tensor: it is left out of a copy
    and made again on the next pass, which gives the same logits."""
    pair = load_pair("tiny")
    Engine(pair).generate("def parse(path):", 8, speculate="model", k=3)
    target = copy.deepcopy(pair.target)
    draft = pickle.loads(pickle.dumps(pair.draft))
    ids = torch.tensor([pair.encode("def parse(path):")])
    with torch.inference_mode():
        assert torch.equal(target(ids).logits, pair.target(ids).logits)
        assert torch.equal(draft(ids).logits, pair.draft(ids).logits)


# -- Chat ------------------------------------------------------------------------------------------------------

def test_chat_says_it_needs_an_engine():
    with pytest.raises(TypeError, match=r"engine must be an Engine, e.g. Chat\(Engine\(load_pair\('tiny'\)\)\), "
                                        r"got str 'tiny'"):
        Chat("tiny")


@pytest.mark.parametrize("name, value", [("user", None), ("system", 5), ("assistant", b"A:")])
def test_chat_openings_must_be_text(pair, name, value):
    with pytest.raises(TypeError, match=rf"{name} must be a string .* got {type(value).__name__}"):
        Chat(Engine(pair), **{name: value})


# -- the engine ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [{"prompt": ""}, {"prompt": [1, 10**9]}, {"seed": -1}, {"seed": "x"}])
@pytest.mark.parametrize("setting", [{"k": "adaptive"}, {"tree": "adaptive"}])
def test_a_refused_request_leaves_no_adaptive_policy_behind(pair, bad, setting):
    engine = Engine(pair)
    with pytest.raises((ValueError, TypeError)):
        engine.generate(**{"prompt": "def f", "max_new_tokens": 4, **setting, **bad})
    assert engine.adaptive == {} and len(engine.events) == 0


def test_a_token_tree_says_its_nodes_are_a_sequence():
    with pytest.raises(TypeError, match=r"parents must be a sequence of ints, one per node .* got int 3"):
        TokenTree(3, (1,))
    with pytest.raises(TypeError, match=r"tokens must be a sequence of ints, one per node .* got str '12'"):
        TokenTree((-1, 0), "12")


# -- traces ----------------------------------------------------------------------------------------------------

HEADER = json.dumps({"format": "teachspec-trace", "version": 2})


@pytest.mark.parametrize("line, message", [
    ("[" * 100_000, "line 2: JSON nested too deeply"),
    ('{"kind": "finish", "t": NaN, "request": 0, "new_tokens": 1, "reason": "eos", "ms": 1.0}',
     "line 2: NaN is not a JSON number"),
    ('{"kind": "finish", "t": 1e999, "request": 0, "new_tokens": 1, "reason": "eos", "ms": 1.0}',
     "line 2: 1e999 is too large"),
], ids=["deep", "NaN", "infinite"])
def test_a_corrupted_trace_line_is_a_trace_error_naming_the_line(tmp_path, line, message):
    path = tmp_path / "t.jsonl"
    path.write_text(f"{HEADER}\n{line}\n")
    with pytest.raises(TraceError, match=message):
        EventLog.load(path)


def test_a_trace_path_that_is_no_file_is_said_so(tmp_path):
    with pytest.raises(IsADirectoryError, match="is a folder; give the .jsonl file inside it"):
        EventLog.load(tmp_path)
    with pytest.raises(TypeError, match="path must be the trace file's path .* got NoneType None"):
        EventLog.load(None)


# -- the command line ------------------------------------------------------------------------------------------

PROBE = """
import json, sys, time
t0 = time.perf_counter()
from teachspec.cli import main
try:
    main(sys.argv[1:])
    code = 0
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "s": time.perf_counter() - t0,
                  "heavy": sorted(m for m in ("torch", "transformers") if m in sys.modules)}))
"""
NO_DRIVER = not (Path("/proc/driver/nvidia/version").exists() or Path("/dev/nvidiactl").exists())
MISTAKES = [
    (("generate", "x", "--dtype", "half"), "argument --dtype: 'half' is not a dtype; use one of float32, fp32, "
                                           "bfloat16, bf16, float16, fp16"),
    (("generate", "x", "--target", "/nonexistent"), "argument --target: '/nonexistent': no such folder"),
    (("generate", "x", "--draft", "/nonexistent"), "unrecognized arguments: --draft"),
    (("demo", "--draft", "/nonexistent"), "argument --draft: '/nonexistent': no such folder"),
    (("demo", "--draft", "teachspec/models/tiny/draft"), "--draft needs --target"),
    (("demo", "--pair", "tiny", "--target", "teachspec/models/tiny/target"), "give --pair or --target, not both"),
    (("demo", "--target", "gpt2", "--draft", "distilgpt2"),
     "argument --target: 'gpt2': a hub id that is not in the local cache, and the hub cannot be reached"),
    (("bench", "speculative", "--dtype", "fp8"), "argument --dtype: 'fp8' is not a dtype"),
]
if NO_DRIVER:
    MISTAKES.append((("generate", "x", "--device", "cuda"), "'cuda': this machine has no NVIDIA driver"))
if sys.platform != "darwin":
    MISTAKES.append((("demo", "--device", "mps"), "'mps' is Apple silicon's GPU"))


@pytest.mark.parametrize("words, message", MISTAKES, ids=[" ".join(m[0]) for m in MISTAKES])
def test_each_first_hour_mistake_is_refused_in_under_2_s(tmp_path, words, message):
    env = {k: v for k, v in __import__("os").environ.items() if k != "HF_HUB_OFFLINE"}
    env |= {"HF_HUB_CACHE": str(tmp_path), "HF_ENDPOINT": "http://127.0.0.1:9"}  # no model cached, no hub answers
    run = subprocess.run([sys.executable, "-c", PROBE, *words], capture_output=True, text=True, timeout=120, env=env,
                         cwd=Path(__file__).parents[2])
    result = json.loads(run.stdout.splitlines()[-1])
    lines = run.stderr.strip().splitlines()
    assert result["code"] == 2 and len(lines) == 1 and message in lines[0], run.stderr
    assert result["s"] < 2.0, f"{' '.join(words)} took {result['s']:.1f} s to be refused"
    assert result["heavy"] == [], f"refusing {words} imported {result['heavy']}"


def test_the_dtype_names_are_those_load_pair_takes():
    from teachspec.cli import DTYPES
    from teachspec.device import DTYPES as TORCH_DTYPES

    assert set(DTYPES) == set(TORCH_DTYPES)


def test_generate_decodes_the_target_alone_quietly_and_counts_in_words(capsys):
    from teachspec.cli import main, pair_from, parser

    args = parser().parse_args(["generate", "x"])
    assert not hasattr(args, "draft") and pair_from(args, draft=False).draft is None
    capsys.readouterr()
    main(["generate", "def f", "--max-new-tokens", "1"])
    err = capsys.readouterr().err
    assert "-- 1 token in" in err and "1 target pass," in err and "Loading weights" not in err, err


def test_the_demo_reports_tokens_per_target_pass_by_that_name_alone(pair):
    from teachspec.demo import run

    out = io.StringIO()
    run(pair, "def f", 12, 0.0, 2, "model", 0, colour=False, out=out)
    text = out.getvalue()
    assert "tokens per target pass" in text and "acceptance length" not in text and "tokens per pass" not in text
