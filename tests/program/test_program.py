"""Structured programs on real (config-built) models: cache on equals cache off, select equals a direct
comparison of log-probabilities, forks share their prefix in the tree, and mistakes are reported at their line."""

from __future__ import annotations

import inspect

import pytest
import torch

from helpers.pairs import make_pair
from teachspec.engine import Engine
from teachspec.events import ProgramSpan, ProgramStep
from teachspec.program import ProgramError, assistant, gen, run, run_batch, select, system, user
from teachspec.program.score import score


@pytest.fixture(scope="module")
def pair():
    return make_pair()


EXAMPLES = "Question: what does len return\nAnswer: a count\n\nQuestion: what does sorted return\nAnswer: a list\n\n"
CHOICES = [" list", " count", " dict", " a new list"]  # " list" and " a new list" overlap after their first token


def quiz(s, question, branches):
    s += EXAMPLES
    s += "Question: " + question + "\nAnswer:"
    s += select("answer", CHOICES)
    s += "\nBecause"
    s += gen("why", max_tokens=6)
    s.forks = s.fork(branches)  # kept on the state for the tests to look at
    for i, f in enumerate(s.forks):
        f += f"\nThought {i}:"
        f += gen("thought", max_tokens=5)


def chat(s, messages):
    s += system("A conversation about Python.")
    for i, m in enumerate(messages):
        s += user(m)
        s += assistant(gen(f"reply_{i}", max_tokens=6))


def outputs(state):
    return state.ids, state.text, state.variables, [(b.ids, b.variables) for b in state.forks]


def direct_logprob(pair, prompt: list[int], choice: list[int]) -> float:
    """log p(choice | prompt) from one plain forward pass over prompt + choice, no cache anywhere."""
    ids = torch.tensor([prompt + choice])
    with torch.inference_mode():
        logits = pair.target(input_ids=ids).logits[0, :, :pair.vocab_size].double()
    logp = torch.log_softmax(logits, dim=-1)
    return float(sum(logp[len(prompt) - 1 + i, t] for i, t in enumerate(choice)))


# -- correctness -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("speculate", ["model", None])
def test_programs_give_the_same_outputs_with_the_cache_on_and_off(pair, speculate):
    on, off = Engine(pair, cache_tokens=4096), Engine(pair, cache_tokens=0)
    for question in ("what does zip return", "what does dict.get return"):
        a = run(quiz, engine=on, speculate=speculate, question=question, branches=3)
        b = run(quiz, engine=off, speculate=speculate, question=question, branches=3)
        assert outputs(a) == outputs(b)
        assert a.run.hit_rate > 0.5 and b.run.hit_rate == 0.0
    a = run(chat, engine=on, speculate=speculate, messages=["hi", "what is a list", "thanks"])
    b = run(chat, engine=off, speculate=speculate, messages=["hi", "what is a list", "thanks"])
    assert (a.ids, a.text, a.variables) == (b.ids, b.text, b.variables)
    assert a.text.startswith("A conversation about Python.\n\nUser: hi\nAssistant:")


def test_select_agrees_with_a_direct_comparison_of_summed_log_probs(pair):
    for cache_tokens in (4096, 0):
        engine = Engine(pair, cache_tokens=cache_tokens)
        for question in ("what does zip return", "what does min return"):
            state = run(quiz, engine=engine, question=question, branches=1)
            prompt = pair.encode(EXAMPLES) + pair.encode("Question: " + question + "\nAnswer:")
            direct = {c: direct_logprob(pair, prompt, pair.encode(c)) for c in CHOICES}
            assert state.scores["answer"] == pytest.approx(direct, abs=1e-4)
            assert state["answer"] == max(CHOICES, key=direct.get)
            assert state.ids[len(prompt):len(prompt) + len(pair.encode(state["answer"]))] == \
                pair.encode(state["answer"])


def test_score_computes_the_prompt_once_and_reuses_it_for_every_continuation(pair):
    prompt = list(range(100, 160))
    tails = [[5, 6, 7], [5, 6, 8], [9], [5]]  # shared first tokens, and a tail inside another's
    on = score(Engine(pair, cache_tokens=4096), prompt, tails)
    off = score(Engine(pair, cache_tokens=0), prompt, tails)
    assert [s.stats.cached_tokens for s in off] == [0] * 4
    assert on[0].stats.cached_tokens == 0
    assert [s.stats.cached_tokens for s in on[1:]] == [len(prompt)] * 3  # the prompt, computed by the first
    again = Engine(pair, cache_tokens=4096)
    score(again, prompt, tails[:1])
    assert score(again, prompt + [3], tails)[0].stats.cached_tokens == len(prompt)  # stored for the next call
    for a, b, tail in zip(on, off, tails):
        assert a.tokens == b.tokens == tail
        assert a.logprob == pytest.approx(b.logprob, abs=1e-4)
        assert a.logprob == pytest.approx(direct_logprob(pair, prompt, tail), abs=1e-4)


def test_fork_branches_share_the_prefix_in_the_tree(pair):
    engine = Engine(pair, cache_tokens=4096)
    state = run(quiz, engine=engine, question="what does zip return", branches=3)
    tree, shared = engine.radix, len(state.ids)  # the root state ends where the fork happened

    def path(ids):
        """The nodes of the tree that hold ids, walked from the root by hand; (node, tokens before it)."""
        node, depth, nodes = tree.root, 0, []
        while depth < len(ids) and (child := node.children.get(ids[depth])) is not None \
                and tuple(ids[depth:depth + len(child.key)]) == child.key:
            nodes.append((child, depth))
            node, depth = child, depth + len(child.key)
        return nodes

    paths = [path(b.ids) for b in state.forks]
    for p in paths:  # each branch's prompt is cached to its last generated token but one
        assert sum(len(n.key) for n, _ in p) >= len(state.forks[0].ids) - 6
    # the node that holds the fork point's last token is one and the same node on every branch's path
    holders = [next(n for n, start in p if start < shared <= start + len(n.key)) for p in paths]
    assert all(h is holders[0] for h in holders)
    # and below it the branches go their own ways: three different leaves
    assert len({id(p[-1][0]) for p in paths}) == 3
    # the shared part is stored once: the tree holds far less than the three branches laid end to end
    assert tree.total_size < sum(len(b.ids) for b in state.forks) - 2 * (shared - 1)


def test_stop_cuts_the_text_and_the_kept_ids_spell_it(pair):
    engine = Engine(pair, cache_tokens=0)

    def free(s):
        s += EXAMPLES
        s += gen("x", max_tokens=12)

    full = run(free, engine=engine)["x"]
    stop = full[len(full) // 2:len(full) // 2 + 2]
    assert stop.strip(), f"pick a visible stop string from {full!r}"

    def stopped(s):
        s += EXAMPLES
        s += gen("x", max_tokens=12, stop=["@@never", stop])

    state = run(stopped, engine=engine)
    start = len(pair.encode(EXAMPLES))
    assert state["x"] == full[:full.index(stop)]
    assert pair.decode(state.ids[start:]) == state["x"] and state.text == EXAMPLES + state["x"]


def test_run_batch_shares_one_tree_and_checks_every_argument_first(pair):
    engine = Engine(pair, cache_tokens=4096)
    states = run_batch(quiz, [{"question": q, "branches": 1} for q in ("zip", "min", "max")], engine=engine)
    assert [s.variables.keys() for s in states] == [{"answer", "why"}] * 3
    select_calls = [[c for c in s.run.calls if c.kind == "select"][0] for s in states]
    assert select_calls[0].cached_tokens < select_calls[1].cached_tokens  # the examples come from the tree
    events = len(engine.events)
    with pytest.raises(TypeError, match="quiz.*question"):
        run_batch(quiz, [{"question": "a", "branches": 1}, {"branches": 1}], engine=engine)
    assert len(engine.events) == events  # nothing ran


# -- the trace ---------------------------------------------------------------------------------------------------

def test_every_call_is_traced_with_its_variable_line_and_span(pair):
    engine = Engine(pair, cache_tokens=4096)
    state = run(quiz, engine=engine, question="zip", branches=2)
    steps, spans = engine.events.of(ProgramStep), engine.events.of(ProgramSpan)
    assert len(steps) == len(spans) == len(state.run.calls)
    assert {e.program for e in steps} == {"quiz"} and len({e.run for e in steps + spans}) == 1
    kinds = [(e.call, e.name) for e in steps if e.call != "text"]
    assert kinds == [("select", "answer"), ("gen", "why"), ("fork", ""), ("gen", "thought"), ("gen", "thought")]
    branches = {0: state, **{b.branch: b for b in state.forks}}
    for step, span in zip(steps, spans):  # every step ends before the next starts, with the span it added
        assert (step.call, step.name, step.branch) == (span.call, span.name, span.branch)
        assert step.position == span.start
        ids = branches[span.branch].ids[span.start:span.stop]
        assert pair.decode(ids) == span.text or span.call == "fork"
    select_step = next(e for e in steps if e.call == "select")
    assert select_step.line == quiz.__code__.co_firstlineno + 3
    # the engine's own events for the select run between its step and its span
    i, j = engine.events.events.index(select_step), engine.events.events.index(spans[steps.index(select_step)])
    assert sum(e.kind == "score" for e in engine.events.events[i:j]) == len(CHOICES)


def test_the_tree_view_shows_the_running_step(pair):
    from teachspec.widgets import RadixTreeView

    engine = Engine(pair, cache_tokens=4096)
    run(quiz, engine=engine, question="zip", branches=1)
    view = RadixTreeView(engine.events, decode=pair)
    captions = [f["caption"] for f in view.frames]
    programs = [f["meta"]["program"] for f in view.frames if "meta" in f and f["meta"].get("program")]
    assert any("select('answer'" in c for c in captions)
    assert any(p.startswith("quiz: select('answer'") for p in programs)
    assert view.snapshot().meta["program"].startswith("quiz: gen('thought'")


# -- mistakes ----------------------------------------------------------------------------------------------------

def test_mistakes_name_the_call_and_the_program_line_before_anything_changes(pair):
    engine = Engine(pair, cache_tokens=4096)

    def program(s, mistake):
        s += "Question: what does zip return\nAnswer:"
        if mistake == "no choices":
            s += select("answer", choices=[])
        elif mistake == "duplicates":
            s += select("answer", [" a", " b", " a"])
        elif mistake == "reused":
            s += gen("answer", max_tokens=2)
            s += select("answer", [" a", " b"])
        elif mistake == "fork":
            s.fork(0)
        elif mistake == "unknown":
            s["answr"]
        elif mistake == "bad part":
            s += 42
        elif mistake == "too long":
            s += gen("essay", max_tokens=10_000)

    source, first = inspect.getsourcelines(program)
    for mistake, written, call, message in [
            ("no choices", 'select("answer", choices=[])', "select('answer', choices=[])",
             "choices must be a non-empty list of distinct"),
            ("duplicates", 'select("answer", [" a", " b", " a"])', "select('answer', choices=[' a', ' b', ' a'])",
             "distinct"),
            ("reused", 'select("answer", [" a", " b"])', "select('answer', choices=[' a', ' b'])",
             "the variable 'answer' is already set, by gen('answer', max_tokens=2) at program line"),
            ("fork", "s.fork(0)", "fork(0)", "n must be an int >= 1"),
            ("unknown", 's["answr"]', "s['answr']", "no call has set a variable 'answr'"),
            ("bad part", "s += 42", "s += 42", "a state takes text"),
            ("too long", "max_tokens=10_000", "gen('essay', max_tokens=10000)", "exceeds the model's context")]:
        line = first + next(i for i, text in enumerate(source) if written in text)
        states = []
        with pytest.raises(ProgramError) as info:
            run(lambda s, mistake: states.append(s) or program(s, mistake), engine=engine, mistake=mistake)
        assert str(info.value).startswith(f"{call} at program line {line}: "), str(info.value)
        assert message in str(info.value)
        state = states[0]  # the failing call changed nothing: the state holds what came before it
        before = len(pair.encode("Question: what does zip return\nAnswer:"))
        assert len(state.ids) == before + (2 if mistake == "reused" else 0)
        assert list(state.variables) == (["answer"] if mistake == "reused" else [])


def test_bad_calls_are_refused_where_they_are_written():
    with pytest.raises(ProgramError, match=r"gen\('x', max_tokens=0\) at .* max_tokens must be an int >= 1"):
        gen("x", max_tokens=0)
    with pytest.raises(ProgramError, match="temperature must be a finite number"):
        gen("x", temperature=-1)
    with pytest.raises(ProgramError, match="stop must be a non-empty string"):
        gen("x", stop=[""])
    with pytest.raises(ProgramError, match="name must be a non-empty string"):
        select("", [" a"])
    with pytest.raises(ProgramError, match=r"user\(3\) .* a user turn holds text"):
        user(3)


def test_run_and_score_refuse_bad_arguments(pair):
    engine = Engine(pair, cache_tokens=0)
    with pytest.raises(TypeError, match="engine must be a teachspec Engine"):
        run(quiz, engine="tiny", question="q", branches=1)
    with pytest.raises(TypeError, match=r"quiz\(s, question, branches\) cannot take the arguments \['question'\]"):
        run(quiz, engine=engine, question="q")
    with pytest.raises(ValueError, match="speculate='psychic' is not a drafter"):
        run(quiz, engine=engine, speculate="psychic", question="q", branches=1)
    with pytest.raises(ValueError, match="k=-1|k must be >= 0"):
        run_batch(quiz, [{"question": "q", "branches": 1}], engine=engine, k=-1)
    assert len(engine.events) == 0  # refused before anything ran
    with pytest.raises(ValueError, match="continuations must be a non-empty list"):
        score(engine, [1, 2], [])
    with pytest.raises(ValueError, match=r"continuations\[1\] is '', which holds no token"):
        score(engine, [1, 2], [" a", ""])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        score(engine, [1, 2], [[5, 99999]])
