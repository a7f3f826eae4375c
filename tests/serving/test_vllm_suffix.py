"""vLLM's suffix decoding (`start_vllm(speculate="suffix")`): its settings, the clear error without arctic-inference,
and against a real server the same greedy tokens as teachspec, with guesses made and accepted.

vLLM's method "suffix" imports Snowflake's arctic-inference, a source distribution built apart from vLLM
(teachspec.serving.launch.ARCTIC_INSTALL). The live test needs vLLM (TEACHSPEC_VLLM_PYTHON) and arctic-inference
in vLLM's Python (installed there, or built with `pip install --target DIR` and named by
TEACHSPEC_VLLM_PYTHONPATH); without them it is skipped, unless TEACHSPEC_REQUIRE_ARCTIC=1 makes that a failure.
How arctic's drafts compare with teachspec's own: tests/serving/test_suffix_oracle.py.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

import teachspec
from teachspec import workloads
from teachspec.serving import RemoteEngine, ServerError, Watcher, metrics, start_vllm, vllm_python
from teachspec.serving.launch import SPECULATE, arctic_missing, command, server_environment
from teachspec.speculative.suffix import DEPTH, FACTOR

SERVED_HERE = "suffix" in SPECULATE  # teachspec.speculate marks the suffix drafter as one vLLM serves
NOT_SERVED = "teachspec.speculate does not mark the suffix drafter served=True, so start_vllm refuses it"


def test_the_servers_suffix_decoding_guesses_as_teachspecs_suffix_drafter(tmp_path):
    cmd = command("python", {"target": tmp_path / "target"}, 8000, "ipc://e", "ipc://r", "suffix", 8, 32, 1024, None)
    config = json.loads(cmd[cmd.index("--speculative-config") + 1])
    assert config == {"method": "suffix", "num_speculative_tokens": 8, "suffix_decoding_max_tree_depth": DEPTH,
                      "suffix_decoding_max_spec_factor": FACTOR, "suffix_decoding_min_token_prob": 0.1}


def test_vllms_pythonpath_is_only_what_teachspec_vllm_pythonpath_names(monkeypatch, tmp_path):
    monkeypatch.setenv("PYTHONPATH", "/ours")  # teachspec's own path never reaches vLLM's environment
    monkeypatch.delenv("TEACHSPEC_VLLM_PYTHONPATH", raising=False)
    assert "PYTHONPATH" not in server_environment()
    monkeypatch.setenv("TEACHSPEC_VLLM_PYTHONPATH", f"{tmp_path}/a{os.pathsep}{tmp_path}/b")
    assert server_environment()["PYTHONPATH"] == f"{tmp_path}/a{os.pathsep}{tmp_path}/b"


def stand_in(tmp_path, body: str) -> str:
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(0o755)
    return str(script)


@pytest.mark.skipif(not SERVED_HERE, reason=NOT_SERVED)
def test_suffix_without_arctic_is_one_clear_error_before_anything_starts(monkeypatch, tmp_path):
    monkeypatch.setenv("TEACHSPEC_VLLM_PYTHON", stand_in(
        tmp_path, 'echo "ModuleNotFoundError: No module named \'arctic_inference\'"; exit 1'))
    work = tmp_path / "work"
    with pytest.raises(ServerError, match=r"needs Snowflake's arctic-inference(.|\n)*No module named "
                                          r"'arctic_inference'(.|\n)*pip wheel(.|\n)*TEACHSPEC_VLLM_PYTHONPATH"):
        start_vllm("tiny", speculate="suffix", k=8, workdir=work)
    assert not work.exists()  # nothing laid out, nothing started


# -- against a real server -----------------------------------------------------------------------------------------

def _missing() -> str | None:
    try:
        python = vllm_python()
    except ServerError as e:
        return f"vLLM is not installed: {e}"
    why = arctic_missing(python)
    return None if why is None else f"vLLM's Python cannot import arctic-inference: {why}"


MISSING = _missing() if SERVED_HERE else NOT_SERVED
if MISSING and os.environ.get("TEACHSPEC_REQUIRE_ARCTIC") == "1":
    raise RuntimeError(f"TEACHSPEC_REQUIRE_ARCTIC=1 but vLLM's suffix decoding cannot run: {MISSING}")

N_PROMPTS, NEW_TOKENS, K = 4, 48, 8


@pytest.mark.vllm
@pytest.mark.skipif(MISSING is not None, reason=str(MISSING))
def test_vllms_suffix_decoding_gives_teachspecs_greedy_tokens_and_guesses():
    pair = teachspec.load_pair("tiny")
    work = workloads.docs_completion(N_PROMPTS, prompt_tokens=48, max_new_tokens=NEW_TOKENS)
    prompts = [pair.encode(r.prompt) for r in work.requests]
    engine = teachspec.Engine(pair, cache_tokens=0)
    plain = [engine.generate(ids, NEW_TOKENS, speculate=None).tokens for ids in prompts]
    with start_vllm("tiny", speculate="suffix", k=K) as server, Watcher(server) as watcher:
        remote = RemoteEngine(server, pair)
        before = watcher.settle().counters
        one_at_a_time = [remote.generate(ids, NEW_TOKENS).tokens for ids in prompts + prompts]  # again: cached
        spent = metrics.difference(watcher.settle().counters, before)
        with ThreadPoolExecutor(max_workers=N_PROMPTS) as pool:  # in flight at once, batched in each step
            at_once = list(pool.map(lambda ids: remote.generate(ids, NEW_TOKENS).tokens, prompts))
    assert one_at_a_time == plain + plain and at_once == plain
    assert spent["drafts"] > 0 and spent["accepted"] > 0
    s = metrics.stats(spent)
    assert 0 < s.alpha <= 1 and len(s.acceptance_per_position) <= K
