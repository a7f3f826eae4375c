"""The `teachspec` command, run as a user would run it."""

import json
import os
import subprocess
import sys


def teachspec(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "teachspec.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})


def test_generate_prints_the_continuation_and_its_speed():
    run = teachspec("generate", "Return a new dictionary", "--max-new-tokens", "12")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("Return a new dictionary") and len(run.stdout) > len("Return a new dictionary")
    assert "tokens/s" in run.stderr and "12 target passes" in run.stderr


def test_demo_colours_decisions_and_reports_the_stats():
    run = teachspec("demo", "The with statement", "--max-new-tokens", "24", "--colour", "always")
    assert run.returncode == 0, run.stderr
    assert "\033[32m" in run.stdout  # accepted tokens in green
    assert "identical to plain greedy decoding: True" in run.stdout
    assert "alpha" in run.stdout and "tokens per target pass" in run.stdout
    plain = teachspec("demo", "The with statement", "--max-new-tokens", "8", "--colour", "never")
    assert "\033[" not in plain.stdout


def test_bad_input_exits_with_a_message_naming_the_parameter():
    for args, message in [(("generate", "x", "--max-new-tokens", "-1"), "--max-new-tokens: must be >= 0"),
                          (("generate", "x", "--temperature", "-1"), "temperature"),
                          (("generate", "x", "--pair", "huge"), "'huge' is not a bundled pair"),
                          (("generate", "x", "--device", "cuda:9"), "'cuda:9'"),
                          (("demo", "x", "--k", "-2"), "--k: must be a whole number >= 0"),
                          (("demo", "x", "--speculate", "psychic"), "--speculate: 'psychic' is not one of")]:
        run = teachspec(*args)
        assert run.returncode == 2 and message in run.stderr, (args, run.stderr)


def test_bench_program_measures_the_cache_side_by_side(tmp_path):
    out = tmp_path / "program.json"
    run = teachspec("bench", "program", "--examples", "classify", "--questions", "2", "--rounds", "1",
                    "--json", str(out))
    assert run.returncode == 0, run.stderr
    assert "| classify | 2 |" in run.stdout and "bench program" in run.stderr  # the table and the progress bar
    row = json.loads(out.read_text())["examples"]["classify"]
    assert row["outputs_identical"] and row["hit_rate"] > 0.5 and row["hit_rate_off"] == 0.0
    assert abs(row["throughput_ratio"] - row["seconds_off"] / row["seconds_on"]) < 0.01 * row["throughput_ratio"]
    bad = teachspec("bench", "program", "--examples", "sudoku")
    assert bad.returncode == 2 and "examples ['sudoku'] are not example programs" in bad.stderr


def test_bench_mechanics_builds_its_target_from_the_shape_given():
    run = teachspec("bench", "mechanics", "--layers", "1", "--hidden", "64", "--prompts", "1", "--prompt-tokens", "8",
                    "--new-tokens", "8", "--ks", "2")
    assert run.returncode == 0, run.stderr
    assert "random llama 1x64" in run.stdout and "| ours oracle k=2 |" in run.stdout
    bad = teachspec("bench", "mechanics", "--hidden", "100")
    assert bad.returncode == 2 and "--hidden: must be a multiple of 64 (the head size), got 100" in bad.stderr
