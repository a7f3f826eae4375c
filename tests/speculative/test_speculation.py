"""`Speculation`: speculate=, k=, tree= and ngram= checked once, in one place, for every caller.

Each bad value is refused with its own name, without a pair or a model (the check is pure), and the engine, the
programs and the command line refuse it with the same words, because they all make a Speculation."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from teachspec import Engine
from teachspec.program import gen, run
from teachspec.speculate import DRAFTERS, Speculation
from teachspec.speculative.policies import Adaptive, Constant

PACKAGE = Path(__file__).parents[2] / "teachspec"

BAD = [
    (dict(speculate="psychic"), ValueError, r"speculate='psychic' is not a drafter; use one of"),
    (dict(speculate=3), ValueError, r"speculate=3 is not a drafter"),
    (dict(k=-1), ValueError, r"k must be .*-1"),
    (dict(k="fast"), ValueError, r"k='fast' is not a draft-length policy"),
    (dict(k=2.5), TypeError, r"k must be an int"),
    (dict(ngram=0), ValueError, r"ngram must be .*0"),
    (dict(tree=(0, 2)), ValueError, r"tree must be None, 'adaptive', 'dynamic' or a tuple .* got \(0, 2\)"),
    (dict(tree=(2,) * 17), ValueError, r"tree must be None"),
    (dict(tree=(True, 2)), ValueError, r"tree must be None"),
    (dict(tree="wide"), ValueError, r"tree must be None"),
    (dict(speculate=None, tree=(2, 2)), ValueError, r"tree=\(2, 2\) needs a drafter that can propose several"),
    (dict(speculate="adversary", tree=(2,)), ValueError, r"needs a drafter that can propose several branches"),
    (dict(speculate="ngram", tree="dynamic"), ValueError, r"tree='dynamic' ranks the drafter's own probabilities"),
]


@pytest.mark.parametrize("given, error, message", BAD, ids=[str(b[0]) for b in BAD])
def test_each_bad_value_is_refused_with_its_name(given, error, message):
    with pytest.raises(error, match=message):
        Speculation(**given)


@pytest.mark.parametrize("given, error, message", BAD, ids=[str(b[0]) for b in BAD])
def test_the_engine_refuses_with_the_same_words_before_anything_runs(given, error, message, tiny_engine):
    with pytest.raises(error) as by_value:
        Speculation(**given)
    events = len(tiny_engine.events)
    with pytest.raises(error) as by_engine:
        tiny_engine.generate("Hello", 4, **given)
    assert str(by_engine.value) == str(by_value.value)
    assert len(tiny_engine.events) == events  # refused before a request began


def test_a_program_refuses_with_the_same_words(tiny_engine):
    def program(s):
        s += gen("x", max_tokens=2)

    for given in (dict(speculate="psychic"), dict(k="fast")):
        with pytest.raises(ValueError) as by_value:
            Speculation(**given)
        with pytest.raises(ValueError) as by_run:
            run(program, engine=tiny_engine, **given)
        assert str(by_run.value) == str(by_value.value)


def test_good_values_are_kept_and_a_listed_shape_becomes_a_tuple():
    assert Speculation().speculate == "model" and Speculation().k == 2 and Speculation().tree is None
    assert Speculation("model", 3, [3, 2, 1]).tree == (3, 2, 1)
    assert Speculation("eagle", "adaptive", "dynamic").adaptive_k
    assert not Speculation(None, "adaptive").adaptive_k  # plain decoding learns no k
    assert Speculation("ngram", Constant(4), ngram=5).ngram == 5
    assert Speculation("model", Adaptive()).drafter is DRAFTERS["model"]
    assert Speculation(None).drafter is None
    for name, drafter in DRAFTERS.items():
        for tree in ((2, 1), "adaptive", "dynamic"):
            fits = drafter.trees and (tree != "dynamic" or drafter.dynamic)
            if fits:
                assert Speculation(name, 2, tree).tree == tree
            else:
                with pytest.raises(ValueError):
                    Speculation(name, 2, tree)


def test_it_is_a_value_that_cannot_change_after_its_check():
    how = Speculation("model", 2)
    with pytest.raises(AttributeError):
        how.k = -1
    assert how == Speculation("model", 2) and hash(how) == hash(Speculation("model", 2))


def test_reading_the_registry_imports_no_torch():
    """The command line lists the drafters in its --help from the registry: that must not wait for torch."""
    code = "import sys; from teachspec.speculate import DRAFTERS, Speculation; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def messages(path: Path) -> list[str]:
    """The string constants of a module (f-strings' literal parts included)."""
    return [n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)]


@pytest.mark.parametrize("words", ["is not a drafter", "tree must be None", "needs a drafter that can propose",
                                   "is not a draft-length policy"])
def test_each_refusal_is_written_once_in_the_package(words):
    where = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if any(words in m for m in messages(p))]
    assert len(where) == 1, where


@pytest.fixture(scope="module")
def tiny_engine():
    return Engine("tiny", cache_tokens=0)
