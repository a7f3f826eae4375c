"""Re-record the traces that ship beside the notebooks, so a lecturer can step through every demo with no model.

    teachspec traces [--pair tiny] [--out traces]        # from a checkout: --out notebooks/traces

Each trace is an `EventLog` saved with `EventLog.save`; a notebook replays one with

    SpeculationView(EventLog.load("traces/speculation.jsonl"))      or RadixTreeView(...)

The recordings are seeded, so re-recording with the same pair and library versions gives the same events (the
timestamps differ). `vllm_blocks` is recorded from a vLLM server (teachspec.serving) and needs vLLM installed
(TEACHSPEC_VLLM_PYTHON names its Python); without it, or with a pair other than the bundled one that the server
serves, it is skipped with a message and the other traces are recorded as usual.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from teachspec import workloads
from teachspec.chat import Chat
from teachspec.engine import Engine
from teachspec.events import EventLog
from teachspec.program import gen, run

PROMPT = "Return a new dictionary"


def speculation(pair) -> EventLog:
    """Lecture 2: one sampled generation with the draft model, k = 4, the top alternatives recorded."""
    engine = Engine(pair, record_top=3, cache_tokens=0)
    engine.generate(PROMPT, max_new_tokens=40, temperature=0.8, k=4, seed=0)
    return engine.events


def radix_shared(pair) -> EventLog:
    """Lecture 5: a shared system prompt, then few-shot questions (one-letter answers), then a three-turn chat, in
    one cache."""
    engine = Engine(pair, cache_tokens=8192)
    system = workloads.system_prompt(n_requests=4, system_tokens=120, question_tokens=20, max_new_tokens=8)
    engine.serve(system.requests, speculate=None, seed=0)
    shots = workloads.few_shot(n_questions=3, shots=3, example_tokens=60, question_tokens=40)
    engine.serve(shots.requests, speculate=None, seed=0)
    chat = Chat(engine, system=workloads.CHAT_SYSTEM)
    for message in ("What does dict.get return?", "And with a default?", "Thanks."):
        chat.say(message, max_new_tokens=12, speculate=None, seed=0)
    return engine.events


def radix_eviction(pair) -> EventLog:
    """Lecture 5: the same kind of traffic through a cache of 400 tokens: LRU leaves go first, locked ones never."""
    engine = Engine(pair, cache_tokens=400)
    shots = workloads.few_shot(n_questions=6, shots=2, example_tokens=80, question_tokens=40)
    engine.serve(shots.requests, speculate=None, seed=0)
    engine.serve(workloads.no_reuse(n_requests=3, prompt_tokens=120, max_new_tokens=8).requests, speculate=None,
                 seed=0)
    return engine.events


def together(pair) -> EventLog:
    """Lecture 7: a system-prompt workload served with speculation and prefix reuse, in lpm order."""
    engine = Engine(pair, cache_tokens=8192)
    system = workloads.system_prompt(n_requests=4, system_tokens=120, question_tokens=20, max_new_tokens=16)
    engine.serve(system.requests, schedule="lpm", speculate="model", k=3, seed=0)
    return engine.events


# -- lecture 11: vLLM on the same requests -----------------------------------------------------------------------

class Unavailable(RuntimeError):
    """A trace that cannot be recorded here (no vLLM, another pair); `record` skips it and says why."""


VLLM_KV_BLOCKS = 16     # the server's KV cache: 16 blocks of 32 tokens, which the requests below overflow
CONTINUATIONS = ("Return a new dictionary", 'The "with" statement is used to',
                 "def read(path):\n    with open(path) as")


# the lecture's three programs, as it writes them: the trace names them, and the lecture finds their runs by name
def continue_text(s, text, max_tokens):
    s += text
    s += gen("continuation", max_tokens=max_tokens)


def answer(s, question):
    s += question
    s += gen("answer", max_tokens=1)


def conversation(s, system_text, messages, max_tokens):
    s += system_text + "\n\n"
    for i, message in enumerate(messages):
        s += "User: " + message + "\nAssistant:"
        s += gen(f"reply_{i}", max_tokens=max_tokens)
        s += "\n"


def vllm_requests(pair) -> list[tuple]:
    """Lecture 11's programs with the arguments of each run, in the order it sends them: [(program, [dict])]."""
    few_shot = workloads.few_shot(n_questions=4, shots=2, example_tokens=60, question_tokens=40, encode=pair)
    chats = workloads.multi_turn(n_conversations=2, turns=3, message_tokens=24, max_new_tokens=12,
                                 system_tokens=100, encode=pair).conversations
    return [(continue_text, [dict(text=t, max_tokens=32) for t in CONTINUATIONS]),
            (answer, [dict(question=r.prompt) for r in few_shot.requests]),
            (conversation, [dict(system_text=c.system, messages=c.messages, max_tokens=12) for c in chats])]


def vllm_blocks(pair) -> EventLog:
    """Lecture 11: vLLM serving the bundled pair (its draft model, k = 3, a KV cache of VLLM_KV_BLOCKS blocks),
    watched: its blocks as Insert and Evict events, its counters, and the programs' steps and requests, for three
    greedy continuations, four few-shot questions and two three-turn chats, sent one at a time (so what the cache
    finds does not depend on timing). Raises Unavailable where vLLM is not installed or the pair is another."""
    from teachspec.serving import RemoteEngine, ServerError, Watcher, start_vllm, vllm_python

    if pair.name != "tiny":
        raise Unavailable(f"the server serves the bundled pair, and this is {pair.name!r}: record it with --pair tiny")
    try:
        vllm_python()
    except ServerError as e:
        why = str(e).splitlines()[0].rstrip(":")
        raise Unavailable(why if "TEACHSPEC_VLLM_PYTHON" in why else why + " (TEACHSPEC_VLLM_PYTHON)") from None
    with tempfile.TemporaryDirectory() as folder, \
            start_vllm("tiny", speculate="model", k=3, kv_blocks=VLLM_KV_BLOCKS, max_model_len=384,
                       workdir=folder) as server, Watcher(server) as watcher:
        remote = RemoteEngine(server, pair, events=watcher.log)
        for program, arguments in vllm_requests(pair):
            for a in arguments:
                run(program, engine=remote, **a)
                watcher.settle()  # each run after the server's events about the last one have arrived
    return watcher.log


TRACES = {"speculation": speculation, "radix_shared": radix_shared, "radix_eviction": radix_eviction,
          "together": together, "vllm_blocks": vllm_blocks}


def record(pair, out: Path) -> dict[str, Path]:
    """Record every trace with `pair` into `out`; returns name -> path. A trace that cannot be recorded here
    (`Unavailable`: vllm_blocks without vLLM) is skipped with a line that says why, its old file left as it was."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, make in TRACES.items():
        try:
            log = make(pair)
        except Unavailable as e:
            print(f"{name:16s} skipped: {e}")
            continue
        written[name] = log.save(out / f"{name}.jsonl")
    return written


def main(argv: list[str] | None = None) -> None:
    """`python -m teachspec.course.traces ...` is `teachspec traces ...`: the same parser (`teachspec.arguments`)."""
    from teachspec.arguments import run_course

    run_course("traces", command, argv)


def command(args) -> None:
    """`teachspec traces`, its arguments parsed (`teachspec.arguments.traces_arguments`)."""
    from teachspec.course.pairs import pick_pair

    if args.threads is not None:
        from teachspec.threads import set_threads

        set_threads(args.threads)
    for name, path in record(pick_pair(args.pair), args.out).items():
        print(f"{name:16s} {path}  ({path.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
