"""Structured LLM programs: the small language of SGLang (Zheng et al., arXiv:2312.07104, section 2), on the
teachspec engine.

A program is a Python function of a state `s`. Text, generation and choices are appended to it, and each call's
prompt is everything before it; so consecutive calls, the questions of a batch and the branches of a fork share
prefixes, and the radix tree (RadixAttention) computes each shared prefix once:

    from teachspec.program import assistant, gen, run, run_batch, select, system, user

    def react(s, question):
        s += "Question: " + question + "\\n"
        for i in range(3):
            s += f"Thought {i + 1}:"
            s += gen(f"thought_{i}", max_tokens=24, stop="\\n")
            s += f"\\nAction {i + 1}:"
            s += select(f"action_{i}", [" search", " finish"])
            if s[f"action_{i}"] == " finish":
                break
            s += "\\nObservation: ...\\n"

    state = run(react, engine=engine, question="...")      # the final state: state["thought_0"], state.text

    gen(name, max_tokens, stop, temperature)   the model continues; s[name] is its text
    select(name, choices)                      the choice with the highest summed log-probability
                                               (choices_method="token_length_normalized": the highest mean
                                               per token, SGLang's default)
    s.fork(n)                                  n branches sharing everything before the fork
    system(...), user(...), assistant(...)     chat turns, laid out as teachspec.chat.Chat lays them out

Files: calls.py (the calls, checked where the program makes them), state.py (the state; running a call on the
engine), score.py (what `select` ranks by: `score.score(engine, prompt, continuations)`), run.py (run and
run_batch). `teachspec bench program` measures the cache's speedup on such programs.
"""

from teachspec.program.calls import ProgramError, assistant, gen, select, system, user
from teachspec.program.run import run, run_batch
from teachspec.program.state import State

__all__ = ["ProgramError", "State", "assistant", "gen", "run", "run_batch", "select", "system", "user"]
