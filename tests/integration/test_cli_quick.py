"""The `teachspec` command answers quickly and plainly: help without torch, every argument checked before a model
loads, one line and status 2 for a mistake, one line and status 130 for Ctrl-C."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from teachspec.cli import main, parser
from teachspec.speculate import DRAFTERS

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}

# Runs the command in a fresh interpreter and reports its exit status and whether torch or transformers were
# imported by the time it ended (stdout: one JSON line, last).
PROBE = """
import json, sys
from teachspec.cli import main
try:
    main(sys.argv[1:])
    code = 0
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "heavy": sorted(m for m in ("torch", "transformers") if m in sys.modules)}))
"""


def probe(*args: str, cwd=None) -> tuple[dict, subprocess.CompletedProcess]:
    run = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=300,
                         env=ENV, cwd=cwd)
    return json.loads(run.stdout.splitlines()[-1]), run


def commands(ap: argparse.ArgumentParser, words=()) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every (sub)command's words -> its parser."""
    found = {words: ap}
    for action in ap._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= commands(sub, (*words, name))
    return found


COMMANDS = commands(parser())
LEAVES = [words for words, ap in COMMANDS.items() if words and not any(
    isinstance(a, argparse._SubParsersAction) for a in ap._actions)]


def test_every_command_is_here():
    assert sorted(" ".join(w) for w in LEAVES) == sorted([
        "generate", "demo", "student", "traces", "pin", "course", "grading", "bench speculative", "bench mechanics",
        "bench radix", "bench program", "bench widgets", "bench contention", "bench serving", "bench batch",
        "bench routing", "serve"])


@pytest.mark.parametrize("words", list(COMMANDS), ids=lambda w: " ".join(w) or "teachspec")
def test_help_imports_neither_torch_nor_transformers(words):
    result, run = probe(*words, "--help")
    assert result == {"code": 0, "heavy": []}, run.stderr
    usage = run.stdout.split("\n")[0]
    assert usage.startswith(f"usage: {' '.join(('teachspec', *words))} "), usage


@pytest.mark.parametrize("words", LEAVES, ids=" ".join)
def test_every_option_and_argument_says_what_it_is(words):
    silent = [a.dest for a in COMMANDS[words]._actions if not a.help and not isinstance(a, argparse._HelpAction)]
    assert silent == [], f"teachspec {' '.join(words)}: no help text for {silent}"


def test_a_course_module_run_directly_is_the_same_command():
    for module, name in (("student", "student"), ("traces", "traces"), ("pin", "pin")):
        run = subprocess.run([sys.executable, "-m", f"teachspec.course.{module}", "--help"], capture_output=True,
                             text=True, timeout=120, env=ENV)
        assert run.returncode == 0 and run.stdout.startswith(f"usage: teachspec {name} "), run.stdout[:200]


# Each command with a bad argument: (words, what stderr must say, whether the check may import torch). Those the
# parsers check never do; the rest are checked after imports but before any model loads.
BAD = [
    (("generate", "x", "--max-new-tokens", "-1"), "argument --max-new-tokens: must be >= 0, got -1", False),
    (("generate", ""), "argument prompt: is empty", False),
    (("generate", "x", "--top-p", "1.5"), "argument --top-p: must be a number in (0, 1], got 1.5", False),
    (("generate", "x", "--stop", ""), "argument --stop: is empty", False),
    (("generate", "x", "--pair", "huge"), "argument --pair: 'huge' is not a bundled pair", False),
    (("generate", "x", "--device", "tpu"), "argument --device: 'tpu' is not a device name", False),
    (("demo", "--speculate", "psychic"), "argument --speculate: 'psychic' is not one of model, eagle, ngram", False),
    (("demo", "--k", "-2"), "argument --k: must be a whole number >= 0 or one of adaptive", False),
    (("bench", "speculative", "--prompts", "0"), "argument --prompts: must be >= 1, got 0", False),
    (("bench", "speculative", "--json", "/no/such/folder/out.json"), "the folder of '/no/such/folder/out.json' "
                                                                      "does not exist", False),
    (("bench", "mechanics", "--hidden", "100"), "must be a multiple of 64 (the head size), got 100", False),
    (("bench", "radix", "--cache-tokens", "-5"), "argument --cache-tokens: must be >= 0, got -5", False),
    (("bench", "radix", "--nope"), "unrecognized arguments: --nope", False),
    (("bench", "program", "--speculate", "maybe"), f"'maybe' is not one of {', '.join(DRAFTERS)}, none", False),
    (("bench", "widgets", "--repeats", "0"), "argument --repeats: must be >= 1, got 0", False),
    (("bench", "contention", "--busy", "-1"), "argument --busy: must be >= 0, got -1", False),
    (("bench", "serving", "--concurrency", "0"), "argument --concurrency: must be >= 1, got 0", False),
    (("bench", "batch", "--batches", "4", "2"), "argument --batches: must be increasing, got 4 2", False),
    (("bench", "batch", "--k", "0"), "argument --k: must be >= 1, got 0", False),
    (("serve", "--speculate", "eagle"), "argument --speculate: 'eagle' is not one of none, model, ngram", False),
    (("serve", "--kv-blocks", "1"), "argument --kv-blocks: must be >= 2, got 1", False),
    (("serve", "--replicas", "0"), "argument --replicas: must be >= 1, got 0", False),
    (("serve", "--router", "fastest"), "argument --router: invalid choice: 'fastest'", False),
    (("bench", "routing", "--policies", "fastest"), "'fastest'", False),
    (("bench", "routing", "--replicas", "0"), "argument --replicas: must be >= 1, got 0", False),
    (("serve", "--pair", "/no/such/pair"), "'/no/such/pair' is neither tiny (the bundled pair) nor a folder", False),
    (("bench",), "the following arguments are required: BENCH", False),
    (("student", "/no/such.ipynb"), "argument solution: '/no/such.ipynb' is not a file", False),
    (("pin", "/no/such.ipynb"), "argument notebooks: '/no/such.ipynb' is not a file", False),
    (("pin", "README.md"), "'README.md' is not a notebook (.ipynb)", False),
    (("course", "pyproject.toml"), "dest='pyproject.toml' is a file", False),
    (("bench", "radix", "--workloads", "sudoku"), "workloads ['sudoku'] are not workloads", True),
    (("bench", "program", "--examples", "sudoku"), "examples ['sudoku'] are not example programs", True),
    (("bench", "speculative", "--workloads", "sudoku"), "workloads ['sudoku'] are not workloads of this bench", True),
    (("bench", "speculative", "--scale", "0"), "argument --scale: must be >= 1, got 0", False),
    (("traces", "--pair", "nope"), "pair 'nope' is not one of", True),
]


@pytest.mark.parametrize("words, message, heavy", BAD, ids=[" ".join(b[0]) for b in BAD])
def test_a_bad_argument_ends_in_one_line_and_status_2(words, message, heavy):
    root = Path(__file__).parents[2]
    result, run = probe(*words, cwd=root)
    lines = run.stderr.strip().splitlines()
    name = "teachspec " + " ".join(words[:2] if words[0] == "bench" else words[:1])
    assert result["code"] == 2, run.stderr
    assert len(lines) == 1 and lines[0].startswith(f"{name}: error: ") and message in lines[0], run.stderr
    assert "Traceback" not in run.stderr
    if not heavy:
        assert result["heavy"] == [], f"checking {words} imported {result['heavy']}"


@pytest.mark.parametrize("content", ["not json", "{}"], ids=["not JSON", "JSON but no notebook"])
def test_a_file_that_is_no_notebook_is_refused_before_anything_runs(tmp_path, content):
    bad = tmp_path / "bad.ipynb"
    bad.write_text(content)
    for words in (("student", str(bad)), ("pin", "--strip", str(bad))):
        result, run = probe(*words)
        lines = run.stderr.strip().splitlines()
        assert result == {"code": 2, "heavy": []} and len(lines) == 1, run.stderr
        assert lines[0].startswith(f"teachspec {words[0]}: error: ") and "is not a readable notebook" in lines[0]
    assert bad.read_text() == content  # pin --strip left it alone


def test_a_missing_model_folder_is_one_line_too(tmp_path):
    result, run = probe("generate", "x", "--target", str(tmp_path / "nothing"))
    assert result["code"] == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert run.stderr.startswith("teachspec generate: error: ") and str(tmp_path / "nothing") in run.stderr


def test_none_means_plain_decoding_in_the_demo():
    run = subprocess.run([sys.executable, "-m", "teachspec.cli", "demo", "The with statement", "--speculate", "none",
                          "--max-new-tokens", "8", "--colour", "never"], capture_output=True, text=True, timeout=300,
                         env=ENV)
    assert run.returncode == 0, run.stderr
    assert "the engine, no drafter: 8 tokens" in run.stdout and "nothing was drafted" in run.stdout
    assert "identical to plain greedy decoding: True" in run.stdout


def test_generate_stops_at_a_stop_text():
    def generate(*extra):
        run = subprocess.run([sys.executable, "-m", "teachspec.cli", "generate", "Return a new dictionary",
                              "--max-new-tokens", "24", *extra], capture_output=True, text=True, timeout=300, env=ENV)
        assert run.returncode == 0, run.stderr
        return run.stdout[len("Return a new dictionary"):].rstrip("\n"), run.stderr

    full, _ = generate()
    word = next(w for w in full.split()[2:] if len(w) > 2)  # a word from the middle of the greedy continuation
    stopped, stderr = generate("--stop", "never appears in it", "--stop", word)
    assert "stopped by stop" in stderr and stopped.endswith(word) and len(stopped) < len(full), (full, stopped)


def test_ctrl_c_ends_the_demo_with_one_line_and_status_130():
    demo = subprocess.Popen([sys.executable, "-m", "teachspec.cli", "demo", "--max-new-tokens", "1500", "--colour",
                             "never"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        demo.stdout.readline()  # the legend: the live part has begun
        demo.send_signal(signal.SIGINT)
        _, stderr = demo.communicate(timeout=120)
    finally:
        demo.kill()
    assert demo.returncode == 130, stderr
    assert "Traceback" not in stderr and stderr.strip().splitlines()[-1] == "teachspec demo: interrupted", stderr


def test_the_course_is_written_where_asked_and_never_over_a_students_work(tmp_path, capsys):
    dest = tmp_path / "my course"
    main(["course", str(dest)])
    out = capsys.readouterr().out
    for name in ("index.ipynb", "01_why_decoding_is_slow.ipynb", "nbval.cfg", "assignments/a1_acceptance_rule.ipynb",
                 "traces/speculation.jsonl"):
        assert (dest / name).is_file(), name
    assert "jupyter lab index.ipynb" in out and f"cd '{dest}'" in out
    assignment = (dest / "assignments/a1_acceptance_rule.ipynb").read_text()  # the student version, by default
    assert "NotImplementedError" in assignment and "BEGIN SOLUTION" not in assignment
    assert not (dest / "INSTRUCTORS.md").exists()
    (dest / "index.ipynb").write_text("my notes")
    with pytest.raises(SystemExit) as refused:
        main(["course", str(dest)])
    assert refused.value.code == 2 and "already holds" in capsys.readouterr().err
    assert (dest / "index.ipynb").read_text() == "my notes"
    main(["course", str(dest), "--force"])
    assert (dest / "index.ipynb").read_text() != "my notes"
    key = tmp_path / "key"
    main(["course", str(key), "--with-solutions"])
    assert "for instructors only" in capsys.readouterr().out
    assert "### BEGIN SOLUTION" in (key / "assignments/a1_acceptance_rule.ipynb").read_text()
    assert (key / "INSTRUCTORS.md").is_file()


@pytest.mark.parametrize("link", ["index.ipynb", "traces"])
def test_the_course_is_never_written_through_a_link_out_of_its_folder(tmp_path, capsys, link):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "index.ipynb").write_text("not the course's")
    dest = tmp_path / "course"
    dest.mkdir()
    # a link to a file outside, or a subfolder that is a link: either would be written through
    (dest / link).symlink_to(outside / "index.ipynb" if link == "index.ipynb" else outside)
    for force in ([], ["--force"]):  # --force overwrites a file of the course, never one outside it
        with pytest.raises(SystemExit) as refused:
            main(["course", str(dest), *force])
        err = capsys.readouterr().err
        assert refused.value.code == 2 and f"points to {outside}" in err and "outside dest=" in err, err
    assert (outside / "index.ipynb").read_text() == "not the course's"
    assert sorted(p.name for p in outside.iterdir()) == ["index.ipynb"]  # nothing new written out there
    assert sorted(p.name for p in dest.iterdir()) == [link]  # refused before anything was written


def test_a_link_that_stays_inside_the_course_is_allowed(tmp_path):
    dest = tmp_path / "course"
    (dest / "kept").mkdir(parents=True)
    (dest / "traces").symlink_to(dest / "kept")
    main(["course", str(dest)])
    assert (dest / "kept/speculation.jsonl").is_file()


def test_grading_lays_the_assignments_out_for_nbgrader_and_otter(tmp_path, capsys):
    main(["grading", "nbgrader", str(tmp_path / "nbgrader")])
    assert "nbgrader generate_assignment" in capsys.readouterr().out
    assert "teachspec.course.autograde.JudgeFirst" in (tmp_path / "nbgrader/nbgrader_config.py").read_text()
    assert (tmp_path / "nbgrader/teachspec_grading.json").is_file()  # the course's file, beside the config
    assert (tmp_path / "nbgrader/source/a2_radix_tree/a2_radix_tree.ipynb").is_file()
    main(["grading", "otter", str(tmp_path / "otter")])
    assert "# ASSIGNMENT CONFIG" in (tmp_path / "otter/a3_choose_k/a3_choose_k.ipynb").read_text()
    with pytest.raises(SystemExit) as refused:
        main(["grading", "otter", str(tmp_path / "otter")])
    assert refused.value.code == 2 and "--force" in capsys.readouterr().err


def test_default_outputs_never_go_into_the_package():
    import teachspec
    from teachspec.tools import train

    package = Path(teachspec.__file__).resolve().parent
    traces = parser().parse_args(["traces"]).out
    assert not traces.is_absolute() and traces == Path("traces")  # the current folder
    assert not train.OUT.is_absolute() and not (Path.cwd() / train.OUT).resolve().is_relative_to(package)
