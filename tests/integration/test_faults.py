"""Nothing lost, nothing corrupted: whatever fails in the middle of a request, the radix cache's locks go back, the
tree stays sound, the next request is unaffected, and torch's global random state is the user's alone."""

import pytest
import torch

from teachspec import Engine, load_pair
from teachspec.chat import Chat
from teachspec.decode import generate as plain_generate
from teachspec.program import gen, run
from teachspec.program.score import score

PROMPT = "def parse(path):\n    with open(path) as f:\n       "
NEXT = "Return a new dictionary"

OPERATIONS = {
    "generate": lambda e: e.generate(PROMPT + " return", 12, speculate="model", k=3, temperature=1.0, seed=1),
    "serve": lambda e: e.serve([PROMPT + " x", PROMPT + " y"], max_new_tokens=6, speculate="ngram", k=2),
    "score": lambda e: score(e, PROMPT, [" yes", " no"]),
    "chat": lambda e: Chat(e, system="Be brief.").say("Hi", 6, speculate="model", k=2),
}


@pytest.fixture(scope="module")
def pair():
    return load_pair("tiny")


def warm(pair) -> Engine:
    """An engine whose small cache already holds a prefix of every operation's prompt: requests match, lock,
    split and evict."""
    engine = Engine(pair, cache_tokens=30)
    engine.generate(PROMPT, 10)
    return engine


def kinds_emitted(pair, operation) -> list[str]:
    engine = warm(pair)
    seen: list[str] = []
    engine.events.subscribe(lambda e: seen.append(e.kind) if e.kind not in seen else None)
    OPERATIONS[operation](engine)
    return seen


@pytest.fixture(scope="module")
def reference(pair):
    return warm(pair).generate(NEXT, 10, speculate="model", k=2).tokens


CASES = [(op, kind) for op in OPERATIONS for kind in kinds_emitted(load_pair("tiny"), op)]


def test_the_cases_cover_the_lock_the_tree_and_the_speculation_events():
    kinds = {kind for _, kind in CASES}
    assert {"lock", "unlock", "match", "insert", "evict", "draft", "verify", "finish", "score"} <= kinds


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the raising subscriber is reported, then dropped
@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
@pytest.mark.parametrize("operation, kind", CASES)
def test_a_failure_at_any_event_leaves_no_lock_a_sound_tree_and_the_next_request_unchanged(pair, reference,
                                                                                           operation, kind, error):
    engine = warm(pair)
    fired = []

    def fail(event):
        if event.kind == kind and not fired:
            fired.append(event)
            raise error(f"injected at {kind}")

    engine.events.subscribe(fail)
    with pytest.raises(error, match=f"injected at {kind}"):
        OPERATIONS[operation](engine)
    assert engine.radix.protected_size == 0
    engine.radix.check_invariants()
    assert engine.generate(NEXT, 10, speculate="model", k=2).tokens == reference
    engine.radix.check_invariants()


CALLS = {
    "Engine.generate": lambda pair: Engine(pair).generate(NEXT, 8, temperature=1.0),
    "decode.generate": lambda pair: plain_generate(NEXT, 8, temperature=1.0, pair=pair),
    "Engine.serve": lambda pair: Engine(pair).serve([NEXT, PROMPT], max_new_tokens=4, temperature=1.0),
    "program.score": lambda pair: score(Engine(pair), NEXT, [" a", " b"]),
    "Chat.say": lambda pair: Chat(Engine(pair)).say("Hi", 4, temperature=1.0),
    "program.run": lambda pair: run(lambda s: s.__iadd__(NEXT).__iadd__(gen("x", 4, temperature=1.0)),
                                    engine=Engine(pair), seed=None),
}


@pytest.mark.parametrize("call", CALLS)
def test_no_call_touches_torchs_global_random_state(pair, call):
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    CALLS[call](pair)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("make, error, message", [
    (lambda pair: Engine(None), TypeError, r"pair must be a bundled pair name .* got NoneType None"),
    (lambda pair: Engine(pair, events=[], cache_tokens=0), TypeError, r"events must be an EventLog or None, got list"),
    (lambda pair: Engine(pair).serve("def f"), TypeError, r"requests must be a list of prompts .* got str 'def f'"),
    (lambda pair: Engine(pair).generate(NEXT, 4, seed=2**63), ValueError, r"seed must be < 2\*\*63 .* got 9223372036854775808"),
    (lambda pair: Engine(pair).generate(NEXT, 4, seed=-1), ValueError, r"seed must be >= 0, got -1"),
    (lambda pair: plain_generate(NEXT, 4, seed=2**64, pair=pair), ValueError, r"seed must be < 2\*\*63"),
    (lambda pair: Engine(pair).events.subscribe(42), TypeError, r"callable"),
])
def test_inputs_that_used_to_break_later_are_refused_at_once(pair, make, error, message):
    with pytest.raises(error, match=message):
        make(pair)
