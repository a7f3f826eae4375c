"""Four programs in the shapes of the SGLang paper's benchmarks (arXiv:2312.07104, section 6), each with its
arguments built offline from the bundled documentation (`teachspec.workloads`):

    classify         worked examples, a question, select among answers            5-shot MMLU, HellaSwag
    chat             user(...), assistant(gen(...)), turn after turn               multi-turn chat
    tree_of_thought  fork into thoughts, judge each with select, conclude         tree-of-thought
    react            thought (gen), action (select), observation, in a loop       ReAct agents

Where the tree pays: classify's examples are shared by every question of a batch; each chat turn and each ReAct
step extends the previous prompt; the branches of a thought tree share the problem. Each `*_arguments` function
returns a list of argument dicts for `run_batch`; `EXAMPLES` names them all for the benchmark.

`agent_requests` turns the same programs' generation calls into plain requests, in the order an agent running
them over many inputs sends them: the multi-request workload where suffix decoding (speculate="suffix") learns
from earlier outputs.
"""

from __future__ import annotations

from teachspec import workloads
from teachspec.program.calls import assistant, gen, select, system, user
from teachspec.validate import check_int

FEW_SHOT_QUESTION = "Question: "


# -- the programs ------------------------------------------------------------------------------------------------

def classify(s, examples, question, choices):
    s += examples
    s += FEW_SHOT_QUESTION + question + "\nAnswer:"
    s += select("answer", choices)


def chat(s, system_text, messages, max_tokens):
    s += system(system_text)
    for i, message in enumerate(messages):
        s += user(message)
        s += assistant(gen(f"reply_{i}", max_tokens=max_tokens, stop="\n"))


def tree_of_thought(s, problem, branches, max_tokens):
    s += "Problem: " + problem + "\nThink it through, one thought per line.\n"
    thoughts = s.fork(branches)
    for i, t in enumerate(thoughts):
        t += f"Thought {i + 1}:"
        t += gen("thought", max_tokens=max_tokens, stop="\n")
        t += "\nIs this thought useful? Answer:"
        t += select("useful", [" yes", " no"])
    best = max(thoughts, key=lambda t: t.scores["useful"][" yes"] - t.scores["useful"][" no"])
    s += "Best thought:" + best["thought"] + "\nConclusion:"
    s += gen("conclusion", max_tokens=max_tokens, stop="\n")


def react(s, question, observations, max_tokens):
    s += "Answer the question with thoughts, actions and observations.\n\nQuestion: " + question + "\n"
    for i, observation in enumerate(observations):
        s += f"Thought {i + 1}:"
        s += gen(f"thought_{i}", max_tokens=max_tokens, stop="\n")
        s += f"\nAction {i + 1}:"
        s += select(f"action_{i}", [" search", " lookup", " finish"])
        if s[f"action_{i}"] == " finish":
            break
        s += f"\nObservation {i + 1}: {observation}\n"


# -- their arguments ---------------------------------------------------------------------------------------------

def classify_arguments(n_questions: int = 8, shots: int = 5, example_tokens: int = 180, seed: int = 0,
                       encode=None) -> list[dict]:
    """Multiple-choice questions after `shots` worked examples (`workloads.few_shot`, shaped like 5-shot MMLU);
    the choices are the four letters, as in MMLU."""
    requests = workloads.few_shot(n_questions, shots, example_tokens, seed=seed, encode=encode).requests
    arguments = []
    for r in requests:
        cut = r.prompt.rindex(FEW_SHOT_QUESTION)
        question = r.prompt[cut + len(FEW_SHOT_QUESTION):-len("\nAnswer:")]
        arguments.append(dict(examples=r.prompt[:cut], question=question, choices=[" A", " B", " C", " D"]))
    return arguments


def chat_arguments(n_conversations: int = 2, turns: int = 3, message_tokens: int = 40, max_tokens: int = 16,
                   seed: int = 0, encode=None) -> list[dict]:
    conversations = workloads.multi_turn(n_conversations, turns, message_tokens, max_tokens, system_tokens=400,
                                         seed=seed, encode=encode).conversations
    return [dict(system_text=c.system, messages=c.messages, max_tokens=max_tokens) for c in conversations]


def tree_of_thought_arguments(n_problems: int = 2, branches: int = 3, problem_tokens: int = 200,
                              max_tokens: int = 16, seed: int = 0, encode=None) -> list[dict]:
    arguments = []
    for i in range(n_problems):
        root = workloads.tree_of_thought(1, 0, problem_tokens, seed=seed + i, encode=encode).requests[0].prompt
        problem = root[len("Problem: "):root.index("\n")]
        arguments.append(dict(problem=problem, branches=branches, max_tokens=max_tokens))
    return arguments


def react_arguments(n_questions: int = 2, steps: int = 3, observation_tokens: int = 60, max_tokens: int = 16,
                    seed: int = 0, encode=None) -> list[dict]:
    """Questions from the documentation, each with the observations a search tool would return, step by step."""
    docs = workloads.system_prompt(n_questions * (steps + 1), 8, observation_tokens, seed=seed,
                                   encode=encode).requests
    texts = [r.prompt.split("Question: ")[-1][:-len("\nAnswer:")] for r in docs]
    return [dict(question=texts[i * (steps + 1)], observations=texts[i * (steps + 1) + 1:(i + 1) * (steps + 1)],
                 max_tokens=max_tokens) for i in range(n_questions)]


def agent_requests(n_tasks: int = 6, max_new_tokens: int = 96, seed: int = 0, encode=None) -> workloads.Workload:
    """The generation calls of the programs above, run over `n_tasks` inputs, as plain requests in the order an
    agent sends them: per task the first ReAct thought, three tree-of-thought branches on one problem, and a
    classification where the program's `select` becomes a `gen` (the answer with its reason).

    Each prompt is what the program's state holds at that call, cut where it would `gen`; the budgets are longer
    than the programs' (whose calls stop at a newline) so that every request writes `max_new_tokens` tokens. What
    repeats is what an agent repeats: the same frames (`Thought 1:`, `Answer:`) over different inputs, and branches
    that differ in one number, so a model writes much the same text again from request to request (SuffixDecoding,
    Oliaro et al., arXiv:2411.04975, measures up to 5.3x on such agentic workloads)."""
    check_int("n_tasks", n_tasks, 1)
    check_int("max_new_tokens", max_new_tokens, 1)
    reacts = react_arguments(n_tasks, steps=1, seed=seed, encode=encode)
    problems = tree_of_thought_arguments(n_tasks, branches=3, seed=seed, encode=encode)
    questions = classify_arguments(n_tasks, seed=seed, encode=encode)
    jobs = []
    for i, (r, t, q) in enumerate(zip(reacts, problems, questions)):
        jobs.append(workloads.Job("Answer the question with thoughts, actions and observations.\n\nQuestion: "
                                  + r["question"] + "\nThought 1:", max_new_tokens, f"task {i}: react"))
        for b in range(t["branches"]):
            jobs.append(workloads.Job("Problem: " + t["problem"] + "\nThink it through, one thought per line.\n"
                                      f"Thought {b + 1}:", max_new_tokens, f"task {i}: tree of thought"))
        jobs.append(workloads.Job(q["examples"] + FEW_SHOT_QUESTION + q["question"] + "\nAnswer:", max_new_tokens,
                                  f"task {i}: classify"))
    return workloads.Workload("agentic", f"{n_tasks} tasks of an agent running the example programs: a ReAct "
                                         f"thought, three branches of thought, a classification each", jobs)


EXAMPLES = {
    "classify": (classify, classify_arguments, "few-shot classification: worked examples, a question, select"),
    "chat": (chat, chat_arguments, "multi-turn chat: user, then assistant(gen), turn after turn"),
    "tree_of_thought": (tree_of_thought, tree_of_thought_arguments,
                        "tree of thought: fork, gen a thought per branch, select to judge it, conclude"),
    "react": (react, react_arguments, "ReAct: thought (gen), action (select), observation, in a loop"),
}
