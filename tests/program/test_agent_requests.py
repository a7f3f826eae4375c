"""The agentic workload: the example programs' generation calls as plain requests, in an agent's order."""

import pytest

from teachspec.program.examples import FEW_SHOT_QUESTION, agent_requests, classify_arguments, react_arguments


def test_each_task_sends_a_react_thought_three_branches_and_a_classification_in_that_order():
    w = agent_requests(n_tasks=2, max_new_tokens=24)
    assert w.name == "agentic" and len(w.requests) == 10
    assert [r.group for r in w.requests[:5]] == ["task 0: react"] + ["task 0: tree of thought"] * 3 + [
        "task 0: classify"]
    assert all(r.max_new_tokens == 24 for r in w.requests)
    react, branches, classify = w.requests[0], w.requests[1:4], w.requests[4]
    assert react.prompt.endswith("\nThought 1:") and react_arguments(2, steps=1)[0]["question"] in react.prompt
    assert [b.prompt[-11:] for b in branches] == [f"\nThought {i}:" for i in (1, 2, 3)]
    assert len({b.prompt[:-len("Thought 1:")] for b in branches}) == 1  # one problem, three numbered branches
    first = classify_arguments(2)[0]
    assert classify.prompt == first["examples"] + FEW_SHOT_QUESTION + first["question"] + "\nAnswer:"
    assert agent_requests(n_tasks=2, max_new_tokens=24) == w  # seeded: the same requests every time
    assert agent_requests(n_tasks=2, max_new_tokens=24, seed=1) != w


@pytest.mark.parametrize("kwargs, message", [({"n_tasks": 0}, "n_tasks must be >= 1"),
                                             ({"max_new_tokens": 0}, "max_new_tokens must be >= 1")])
def test_bad_sizes_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        agent_requests(**kwargs)
