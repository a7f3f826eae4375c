"""Request workloads shaped like the SGLang paper's benchmarks, built offline from the bundled corpus.

A prefix cache is only as good as the reuse in its traffic. The SGLang paper (Zheng et al., arXiv:2312.07104,
section 6) measures RadixAttention on programs whose prompts share prefixes in different shapes; each function
here builds a small, seeded stand-in for one shape, its text drawn from the corpus the bundled pair was trained on
(`teachspec.models.corpus`: Python's help topics and standard-library docstrings):

    system_prompt    one long shared instruction block, then distinct short questions      (every chat service)
    few_shot         k worked examples shared by every question, a short answer each       (5-shot MMLU, HellaSwag)
    multi_turn       each turn's prompt is the whole conversation so far                   (multi-turn chat)
    tree_of_thought  a root question, branches that each extend the shared prefix          (tree-of-thought)
    no_reuse         unrelated documents that share not even a first token                 (the overhead control)
    copy_heavy       a passage, then its opening again: the continuation is in the prompt  (prompt lookup)
    code_edits       one passage edited again and again, the whole text rewritten each time (code agents)
    docs_completion  openings of held-out documentation to continue                        (plain decoding)
    tenants          many tenants, each its own system prompt, few-shot questions and chats (a shared service)

Sizes are in tokens of the bundled tokenizer (or of any `encode` you pass), measured rather than guessed: texts
are cut at word boundaries to the requested size. The defaults are small enough for the 15.7M-parameter bundled
target on two CPU cores (a 1000-token prefill costs about 170 ms there), a few seconds of model time per
workload; every size is a parameter to scale up.

`best_hit_rate` gives the most any cache could reuse from a set of prompts, the yardstick for the scheduling
policies in `teachspec.radix.schedule`.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from transformers import AutoTokenizer

from teachspec.models import BUNDLED, Pair, corpus
from teachspec.radix.schedule import common_prefix
from teachspec.renamed import old_names
from teachspec.validate import check_int

Encoder = Callable[[str], list[int]]

CHARS_PER_TOKEN = 5    # generous: the bundled tokenizer averages 3.6 characters a token on the documentation
BLANK = "____"
FEW_SHOT_HEADER = "The following are multiple choice questions (with answers) about Python's documentation.\n\n"
CHOICES = "ABCD"
SYSTEM_HEADER = ("You are an assistant for Python programmers. Answer each question in one short sentence, using "
                 "the reference below.\n\nReference:\n")
CHAT_SYSTEM = "A conversation between a user and an assistant who knows Python's standard library."


# -- what a workload is ------------------------------------------------------------------------------------------

@dataclass
class Job:
    """One request a workload sends: a prompt and its token budget (the engine's running state of a request is
    `teachspec.request.Request`)."""
    prompt: str
    max_new_tokens: int
    group: str                        # what the prompt shares with others ("system", "subject 1", ...), for reports
    turns: list[str] | None = None    # chat only: the history the prompt renders (user, assistant, ..., user)
    answer: str | None = None         # few-shot only: the letter of the right choice
    tenant: str | None = None         # tenants only: whose request it is ("tenant 3"), the session key a client sends


@dataclass
class Conversation:
    """A chat whose replies are only known at run time: a runner feeds the model `prompt(turn, replies)`."""
    messages: list[str]               # the user's messages, one per turn
    replies: list[str]                # stand-in assistant replies from the corpus, for runs without a model
    max_new_tokens: int
    group: str
    system: str = ""                  # the text before the first turn

    def history(self, turn: int, replies: Sequence[str] | None = None) -> list[str]:
        """The messages up to `turn`: user, assistant, ..., user. `replies` default to the stand-ins."""
        replies = self.replies if replies is None else replies
        check_int("turn", turn, 0)
        if turn >= len(self.messages):
            raise ValueError(f"turn must be < {len(self.messages)} (the conversation's turns), got {turn}")
        if len(replies) < turn:
            raise ValueError(f"turn {turn} needs the replies to turns 0..{turn - 1}, got {len(replies)} replies")
        history = []
        for t in range(turn):
            history += [self.messages[t], replies[t]]
        return history + [self.messages[turn]]

    def prompt(self, turn: int, replies: Sequence[str] | None = None) -> str:
        return chat_prompt(self.history(turn, replies), self.system)


@dataclass(frozen=True)
class Footprint:
    """A workload measured in tokens."""
    requests: int
    prompt_tokens: int      # all prompts together
    longest_prompt: int     # the smallest cache budget a scheduling simulation accepts
    shared_tokens: float    # mean over prompts of the longest prefix each shares with another prompt
    best_hit_rate: float    # see best_hit_rate


@dataclass
class Workload:
    name: str
    description: str
    requests: list[Job]
    conversations: list[Conversation] = field(default_factory=list)  # multi-turn chat only

    def tokens(self, encode: Encoder | Pair | None = None) -> list[list[int]]:
        """Every request's prompt as token ids (the bundled tokenizer by default)."""
        enc = _encoder(encode)
        return [enc(r.prompt) for r in self.requests]

    def footprint(self, encode: Encoder | Pair | None = None) -> Footprint:
        """The workload's size and reuse in tokens (the bundled tokenizer by default)."""
        seqs = self.tokens(encode)
        return Footprint(len(seqs), sum(map(len, seqs)), max(map(len, seqs)),
                         sum(_shared(seqs)) / len(seqs), best_hit_rate(seqs))


def chat_prompt(history: Sequence[str], system: str = "") -> str:
    """A chat history (user, assistant, ..., user) as one prompt that ends where the assistant's reply begins.

    The layout is teachspec.chat.Chat's: the system text, then for each turn "\n\nUser: <message>\nAssistant:"
    followed by the reply, which starts with a space as a model's reply after "Assistant:" does. Each prompt is
    a text prefix of the next turn's, and stays a token prefix too: a byte-level BPE like the bundled one splits
    punctuation from the word after it before merging anything, so the ":" keeps its token."""
    if len(history) % 2 == 0:
        raise ValueError(f"history must alternate user and assistant messages and end with a user message (an odd "
                         f"number of messages), got {len(history)}")
    text = system
    for i, message in enumerate(history):
        if i % 2:
            text += f" {message}"
        else:
            text += ("\n\n" if text else "") + f"User: {message}\nAssistant:"
    return text


def flatten(conversations: Sequence[Conversation]) -> list[Job]:
    """Every turn of every conversation as one request whose prompt is the history so far with the stand-in
    replies, so a scheduler or benchmark can run a chat without a model. Turns arrive round-robin (every
    conversation's first turn, then every second turn, ...), as concurrent users would send them."""
    requests = []
    for turn in range(max((len(c.messages) for c in conversations), default=0)):
        for c in conversations:
            if turn < len(c.messages):
                requests.append(Job(c.prompt(turn), c.max_new_tokens, c.group, c.history(turn)))
    return requests


# -- the most any cache could reuse ------------------------------------------------------------------------------

def best_hit_rate(prompts: Sequence[Sequence[int]]) -> float:
    """The largest fraction of prompt tokens a cache of unlimited size could serve, over every order of the prompts.

    Count prefixes, each distinct one once, in the trie of all prompts. Each node of the trie must be computed at
    least once: the first request through it finds nothing cached there. And every request computes its own last
    token even when cached, because that token's logits sample the first new token (SGLang caps a match at
    len - 1): n copies of one prompt compute its last token n times. So the least computed is

        (nodes of the trie) + (prompts that duplicate an earlier one),

    and lexicographic order achieves it: sorted, a prompt shares with its predecessor the longest prefix it
    shares with any earlier prompt, every node is computed when first reached (a shorter prompt sorts before
    its extensions, so it never needs its last token again), and only exact duplicates recompute. Hence

        best = sum over sorted prompts of min(prefix shared with the previous one, len - 1) / total tokens.

    Theorem 3.1 of the SGLang paper: a DFS order (sorted order is one) reaches this with a cache that holds only
    the longest request; `teachspec.radix.schedule.simulate` checks it.
    """
    if not prompts:
        raise ValueError("prompts is empty: give at least one prompt")
    seqs = sorted(tuple(p) for p in prompts)
    if not seqs[0]:
        raise ValueError("every prompt needs at least one token; got an empty prompt")
    hit = sum(min(common_prefix(a, b), len(b) - 1) for a, b in zip(seqs, seqs[1:]))
    return hit / sum(map(len, seqs))


def _shared(seqs: list[list[int]]) -> list[int]:
    """For each prompt, the longest prefix it shares with any other: in sorted order that is a neighbour."""
    rank = sorted(range(len(seqs)), key=lambda i: seqs[i])
    shared = [0] * len(seqs)
    for a, b in zip(rank, rank[1:]):
        n = common_prefix(seqs[a], seqs[b])
        shared[a], shared[b] = max(shared[a], n), max(shared[b], n)
    return shared


# -- text of a given size ----------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _documentation() -> tuple[tuple[corpus.Document, ...], tuple[corpus.Document, ...]]:
    """(train, validation) topics and docstrings, split as the bundled pair was trained; read once (seconds)."""
    train, val = corpus.build(with_source=False)
    return tuple(train), tuple(val)


@functools.lru_cache(maxsize=1)
def _bundled_encoder() -> Encoder:
    tokenizer = AutoTokenizer.from_pretrained(BUNDLED["tiny"])
    return functools.partial(tokenizer.encode, add_special_tokens=False)


def _encoder(encode: Encoder | Pair | None) -> Encoder:
    if encode is None:
        return _bundled_encoder()
    if hasattr(encode, "encode"):  # a Pair
        return encode.encode
    if callable(encode):
        return encode
    raise TypeError(f"encode must be a function text -> token ids, an object with .encode(text) such as a Pair, or "
                    f"None for the bundled tokenizer; got {type(encode).__name__}")


def _fit(text: str, n_tokens: int, encode: Encoder) -> str:
    """The longest run of whole words from the start of `text` that encodes to at most `n_tokens` tokens."""
    if len(encode(text)) <= n_tokens:
        return text
    words = re.findall(r"\S+\s*", text)  # each word with the whitespace after it, so joining restores the text
    lo, hi = 0, len(words)  # words[:lo] fits, words[:hi] does not: bisect between them
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if len(encode("".join(words[:mid]))) <= n_tokens:
            lo = mid
        else:
            hi = mid
    return "".join(words[:lo]).rstrip()


class _Texts:
    """Passages of the documentation cut to sizes in tokens, each document used at most once per workload.

    A passage starts at a random unused document and, when that one is too short, runs on through the ones after
    it in corpus order (the next pieces of the same help topic, the next docstrings of the same module), so a
    long passage still reads as one text; it jumps to another random document only where the next one is used."""

    def __init__(self, docs: Sequence[corpus.Document], rng: random.Random, encode: Encoder):
        self.docs, self.rng, self.encode = docs, rng, encode
        self._starts = iter(rng.sample(range(len(docs)), len(docs)))
        self._used: set[int] = set()

    def _unused(self) -> int:
        i = next((i for i in self._starts if i not in self._used), None)
        if i is None:
            raise ValueError("the bundled documentation ran out of text: ask for fewer or shorter requests")
        return i

    def passage(self, n_tokens: int, one_line: bool = False) -> str:
        """About `n_tokens` tokens of text. `one_line` flattens all whitespace to single spaces (for questions,
        chat messages and thoughts)."""
        parts, chars, i = [], 0, self._unused()
        while chars < CHARS_PER_TOKEN * n_tokens:
            if i == len(self.docs) or i in self._used:
                i = self._unused()
            self._used.add(i)
            text = self.docs[i].text
            parts.append(" ".join(text.split()) if one_line else text.strip())
            chars += len(parts[-1])
            i += 1
        return _fit((" " if one_line else "\n\n").join(parts), n_tokens, self.encode)


def _rng(workload: str, seed: int) -> random.Random:
    """A generator per workload and seed, so two workloads built with the same seed draw different texts."""
    check_int("seed", seed)
    return random.Random(f"{workload}/{seed}")


def _start(workload: str, seed: int, encode: Encoder | Pair | None) -> _Texts:
    return _Texts(_documentation()[0], _rng(workload, seed), _encoder(encode))


def _room(texts: _Texts, frame: str, n_tokens: int) -> int:
    """Tokens left for the content of `frame` (a format string, {} for the content) in `n_tokens` in all.

    The frame is measured around a one-token stand-in, since a space before the content merges into its first
    token rather than counting on its own."""
    return max(1, n_tokens - len(texts.encode(frame.format("x"))) + 1)


# -- the workloads -----------------------------------------------------------------------------------------------

def system_prompt(n_requests: int = 8, system_tokens: int = 400, question_tokens: int = 30,
                  max_new_tokens: int = 16, *, seed: int = 0, encode: Encoder | Pair | None = None) -> Workload:
    """A shared system prompt (instructions and a reference passage) followed by distinct short questions."""
    for name, value in (("n_requests", n_requests), ("system_tokens", system_tokens),
                        ("question_tokens", question_tokens), ("max_new_tokens", max_new_tokens)):
        check_int(name, value, 1)
    texts = _start("system_prompt", seed, encode)
    frame = SYSTEM_HEADER + "{}\n\n"
    system = frame.format(texts.passage(_room(texts, frame, system_tokens)))
    question = "Question: {}\nAnswer:"
    room = _room(texts, question, question_tokens)
    requests = [Job(system + question.format(texts.passage(room, True)), max_new_tokens, "system")
                for _ in range(n_requests)]
    return Workload("system_prompt", f"{n_requests} short questions after one shared ~{system_tokens}-token "
                                     f"system prompt", requests)


def few_shot(n_questions: int = 32, shots: int = 5, example_tokens: int = 180, question_tokens: int = 40,
             subjects: int = 1, max_new_tokens: int = 1, *, seed: int = 0,
             encode: Encoder | Pair | None = None) -> Workload:
    """k worked multiple-choice examples shared by every question of a subject, then a short question.

    Shaped like the paper's 5-shot MMLU (SGLang's `benchmark/mmlu` decodes one token, the answer's letter): a
    long shared prefix (about 900 tokens at the defaults), a short question with four choices, and a one-token
    answer. Each question is a passage of the documentation with one word blanked out; the choices are that word
    and three others from the same passage. With `subjects` > 1 each subject has its own examples (MMLU has 57)
    and the questions cycle through the subjects in arrival order, so first-come-first-served alternates between
    different prefixes.
    """
    # the frame of one question (four choices, "Answer: X") takes 33 bundled tokens; below about 40 in all, no
    # passage leaves the four words the choices need
    for name, value, least in (("n_questions", n_questions, 1), ("shots", shots, 0),
                               ("example_tokens", example_tokens, 40), ("question_tokens", question_tokens, 40),
                               ("subjects", subjects, 1), ("max_new_tokens", max_new_tokens, 1)):
        check_int(name, value, least)
    texts = _start("few_shot", seed, encode)
    prefixes = [FEW_SHOT_HEADER + "".join("Question: {}\nAnswer: {}\n\n".format(*_multiple_choice(texts, example_tokens))
                                          for _ in range(shots)) for _ in range(subjects)]
    requests = []
    for q in range(n_questions):
        question, letter = _multiple_choice(texts, question_tokens)
        requests.append(Job(f"{prefixes[q % subjects]}Question: {question}\nAnswer:", max_new_tokens,
                                f"subject {q % subjects}", answer=letter))
    return Workload("few_shot", f"{n_questions} multiple-choice questions after {shots} shared worked examples of "
                                f"~{example_tokens} tokens ({subjects} subject{'s' * (subjects > 1)})", requests)


def _multiple_choice(texts: _Texts, n_tokens: int) -> tuple[str, str]:
    """About n_tokens of "Question: ...\nA. ...\nAnswer: X": a one-line passage with one word of its opening
    blanked out, four lower-case choices (that word and three others from the passage), and the answer's letter."""
    frame = "Question: {}\nA. choice\nB. choice\nC. choice\nD. choice\nAnswer: A\n\n"
    while True:
        words = texts.passage(_room(texts, frame, n_tokens), one_line=True).split(" ")
        word = re.compile(r"[A-Za-z]{4,}")
        candidates = [i for i in range(1, min(len(words), 30)) if word.fullmatch(words[i])]
        if not candidates:
            continue
        i = texts.rng.choice(candidates)
        answer = words[i].lower()
        others = sorted({w.lower() for w in words if word.fullmatch(w)} - {answer})
        if len(others) < 3:
            continue
        choices = texts.rng.sample(others, 3) + [answer]
        texts.rng.shuffle(choices)
        options = "".join(f"\n{letter}. {choice}" for letter, choice in zip(CHOICES, choices))
        return " ".join(words[:i] + [BLANK] + words[i + 1:]) + options, CHOICES[choices.index(answer)]


def multi_turn(n_conversations: int = 4, turns: int = 6, message_tokens: int = 32, max_new_tokens: int = 8,
               system_tokens: int = 1500, *, seed: int = 0, encode: Encoder | Pair | None = None) -> Workload:
    """Chats in which every turn's prompt is the whole conversation so far, after one shared system prompt.

    The system prompt (an instruction and a ~`system_tokens`-token reference passage; 0 for the instruction
    alone) is the same for every conversation, as a chat service's is. The replies are only known when a model
    writes them: `conversations` gives the structure for a runner that feeds `conversation.prompt(turn, replies)`;
    `requests` are the flattened turns with stand-in replies of `max_new_tokens` tokens drawn from the corpus,
    for schedulers and benchmarks that run without a model.
    """
    for name, value, least in (("n_conversations", n_conversations, 1), ("turns", turns, 1),
                               ("message_tokens", message_tokens, 1), ("max_new_tokens", max_new_tokens, 1),
                               ("system_tokens", system_tokens, 0)):
        check_int(name, value, least)
    texts = _start("multi_turn", seed, encode)
    system = CHAT_SYSTEM
    if system_tokens:
        frame = CHAT_SYSTEM + "\n\nReference:\n{}"
        system = frame.format(texts.passage(_room(texts, frame, system_tokens)))
    conversations = [Conversation([texts.passage(message_tokens, True) for _ in range(turns)],
                                  [texts.passage(max_new_tokens, True) for _ in range(turns)],
                                  max_new_tokens, f"conversation {c}", system) for c in range(n_conversations)]
    return Workload("multi_turn", f"{n_conversations} conversations of {turns} turns, ~{message_tokens}-token "
                                  f"user messages, after a shared ~{system_tokens}-token system prompt",
                    flatten(conversations), conversations)


def tree_of_thought(branches: int = 3, depth: int = 2, root_tokens: int = 200, thought_tokens: int = 40,
                    max_new_tokens: int = 16, *, seed: int = 0, encode: Encoder | Pair | None = None) -> Workload:
    """A fan-out: a root problem, then `branches` thoughts extending each prompt, `depth` levels deep.

    Every node of the tree is one request whose prompt is the root plus the thoughts on its path, so a parent's
    prompt is a prefix of each child's. Requests arrive level by level (breadth first), as a program that expands
    the tree one level at a time would send them: 1 + b + b^2 + ... + b^depth in all.
    """
    for name, value, least in (("branches", branches, 1), ("depth", depth, 0), ("root_tokens", root_tokens, 1),
                               ("thought_tokens", thought_tokens, 1), ("max_new_tokens", max_new_tokens, 1)):
        check_int(name, value, least)
    texts = _start("tree_of_thought", seed, encode)
    root = "Problem: {}\nThink it through, one thought per line.\n"
    level = [("", root.format(texts.passage(_room(texts, root, root_tokens), True)))]  # (label, prompt) pairs
    requests = [Job(level[0][1], max_new_tokens, "tree")]
    for _ in range(depth):
        children = []
        for label, prompt in level:
            for b in range(1, branches + 1):
                child = f"{label}.{b}" if label else str(b)  # "2.3": the third thought after the second
                children.append((child, f"{prompt}Thought {child}: {texts.passage(thought_tokens, True)}\n"))
        level = children
        requests += [Job(prompt, max_new_tokens, "tree") for _, prompt in level]
    return Workload("tree_of_thought", f"a thought tree, {branches} branches, {depth} levels deep, over a "
                                       f"~{root_tokens}-token root", requests)


def no_reuse(n_requests: int = 8, prompt_tokens: int = 400, max_new_tokens: int = 16, *, seed: int = 0,
             encode: Encoder | Pair | None = None) -> Workload:
    """Unrelated documents whose prompts start with different tokens, so no cache can serve any of them.

    The control for the cache's overhead: the paper reports under 0.3% throughput lost with no reuse.
    """
    for name, value in (("n_requests", n_requests), ("prompt_tokens", prompt_tokens),
                        ("max_new_tokens", max_new_tokens)):
        check_int(name, value, 1)
    texts = _start("no_reuse", seed, encode)
    requests, firsts = [], set()
    while len(requests) < n_requests:
        text = texts.passage(prompt_tokens)
        first = texts.encode(text)[0]
        if first not in firsts:  # documents opening with the same word would share that token
            firsts.add(first)
            requests.append(Job(text, max_new_tokens, f"document {len(requests)}"))
    return Workload("no_reuse", f"{n_requests} unrelated ~{prompt_tokens}-token documents", requests)


def copy_heavy(n_prompts: int = 8, passage_tokens: int = 64, max_new_tokens: int = 32, *, seed: int = 0,
               encode: Encoder | Pair | None = None) -> Workload:
    """A passage, an instruction to repeat it, then its opening again: the continuation is already in the prompt.

    The passage's last `max_new_tokens` tokens are left out of the repeat, so a model that copies writes them
    and a prompt-lookup drafter (n-gram matching against the prompt) finds every one of them to propose.
    """
    for name, value in (("n_prompts", n_prompts), ("passage_tokens", passage_tokens),
                        ("max_new_tokens", max_new_tokens)):
        check_int(name, value, 1)
    if passage_tokens <= max_new_tokens:
        raise ValueError(f"passage_tokens must be > max_new_tokens={max_new_tokens} so that some of the passage is "
                         f"repeated before the model continues it, got {passage_tokens}")
    texts = _start("copy_heavy", seed, encode)
    requests = []
    for i in range(n_prompts):
        passage = texts.passage(passage_tokens, one_line=True)
        opening = _fit(passage, passage_tokens - max_new_tokens, texts.encode)
        requests.append(Job(f"{passage}\n\nRepeat the text above.\n\n{opening}", max_new_tokens,
                                f"passage {i}"))
    return Workload("copy_heavy", f"{n_prompts} prompts to repeat a ~{passage_tokens}-token passage", requests)


EDITS = ("renaming one word", "fixing a typo", "shortening the first sentence", "adding a comma",
         "changing the tone", "removing one word")


def code_edits(n_files: int = 3, edits: int = 4, passage_tokens: int = 120, opening_tokens: int = 16,
               max_new_tokens: int = 96, *, seed: int = 0, encode: Encoder | Pair | None = None) -> Workload:
    """Repeated edits of the same files, each request asking for the whole text back with one change, as a coding
    agent asks for a file it edits step after step.

    Each prompt holds the file, the edit asked for and the first `opening_tokens` tokens of the file again, so a
    model that copies writes the rest: prompt lookup finds it in the prompt, and from the second edit of a file on
    the suffix drafter finds it in the earlier requests' outputs as well. `n_files` files, `edits` requests each,
    file after file.
    """
    for name, value in (("n_files", n_files), ("edits", edits), ("passage_tokens", passage_tokens),
                        ("opening_tokens", opening_tokens), ("max_new_tokens", max_new_tokens)):
        check_int(name, value, 1)
    if edits > len(EDITS):
        raise ValueError(f"edits must be <= {len(EDITS)}, the edits there are to ask for, got {edits}")
    if opening_tokens >= passage_tokens:
        raise ValueError(f"opening_tokens must be < passage_tokens={passage_tokens} so that the model has text left "
                         f"to rewrite, got {opening_tokens}")
    texts = _start("code_edits", seed, encode)
    requests = []
    for f in range(n_files):
        passage = texts.passage(passage_tokens)
        opening = _fit(passage, opening_tokens, texts.encode)
        for e in EDITS[:edits]:
            requests.append(Job(f"File:\n{passage}\n\nRewrite the file above, {e}.\n\n{opening}", max_new_tokens,
                                f"file {f}"))
    return Workload("code_edits", f"{n_files} ~{passage_tokens}-token files, each rewritten {edits} times",
                    requests)


def docs_completion(n_prompts: int = 8, prompt_tokens: int = 64, max_new_tokens: int = 32, *, seed: int = 0,
                    encode: Encoder | Pair | None = None) -> Workload:
    """The openings of held-out documentation (the validation split: never trained on), to continue.

    Only documents with at least `prompt_tokens + max_new_tokens` tokens are used, so each has a true
    continuation as long as the one asked for.
    """
    for name, value in (("n_prompts", n_prompts), ("prompt_tokens", prompt_tokens),
                        ("max_new_tokens", max_new_tokens)):
        check_int(name, value, 1)
    rng, enc = _rng("docs_completion", seed), _encoder(encode)
    long_enough = [d for d in _documentation()[1] if len(enc(d.text)) >= prompt_tokens + max_new_tokens]
    if len(long_enough) < n_prompts:
        raise ValueError(f"n_prompts must be <= {len(long_enough)}, the held-out documents with at least "
                         f"prompt_tokens + max_new_tokens = {prompt_tokens + max_new_tokens} tokens; got {n_prompts}")
    docs = rng.sample(long_enough, n_prompts)
    requests = [Job(_fit(d.text.strip(), prompt_tokens, enc), max_new_tokens, d.name) for d in docs]
    return Workload("docs_completion", f"{n_prompts} held-out documentation openings of ~{prompt_tokens} tokens",
                    requests)


TENANT_FRAME = "Reference for tenant {}:\n{}\n\nAnswer each question in one short sentence."


def tenants(n_tenants: int = 6, n_requests: int = 48, zipf: float = 1.2, system_tokens: int = 192, shots: int = 2,
            example_tokens: int = 48, question_tokens: int = 24, chat_turns: int = 3, message_tokens: int = 16,
            max_new_tokens: int = 8, *, seed: int = 0, encode: Encoder | Pair | None = None) -> Workload:
    """Many tenants sharing a cluster: each has its own long system prompt, and asks few-shot questions and chats.

    The traffic a multi-tenant service sends its replicas (the case for cache-aware routing: SGLang v0.4's
    cache-aware load balancer, vllm-router's `cache_aware`). Tenant t's system prompt is an instruction around a
    ~`system_tokens`-token passage of its own; its requests are
        few-shot   the system prompt, `shots` worked examples of its own (~`example_tokens` each), a question
        chat       the system prompt, then the whole conversation so far, `chat_turns` turns in order
    mixed half and half. How many requests each tenant sends follows a Zipf law, P(t) ~ 1 / (t + 1)^zipf, drawn
    (seeded) and sorted so that tenant 0 sends the most. Arrivals interleave every tenant's questions and chats at
    random (seeded), each chat's turns in order. `Job.tenant` names the tenant ("tenant 3", the session key a
    client would send), `Job.group` the finer group ("tenant 3 few-shot", "tenant 3 chat 1"). The defaults are
    sized for two replicas of the bundled pair on two CPU cores: prompts of about 200 to 350 tokens, so a
    tenant's shared prefix spans several of vLLM's 32-token blocks.
    """
    for name, value, least in (("n_tenants", n_tenants, 1), ("n_requests", n_requests, 1),
                               ("system_tokens", system_tokens, 1), ("shots", shots, 0),
                               ("example_tokens", example_tokens, 4), ("question_tokens", question_tokens, 1),
                               ("chat_turns", chat_turns, 1), ("message_tokens", message_tokens, 1),
                               ("max_new_tokens", max_new_tokens, 1)):
        check_int(name, value, least)
    if isinstance(zipf, bool) or not isinstance(zipf, (int, float)) or zipf < 0:
        raise ValueError(f"zipf must be a number >= 0 (0: every tenant equally busy), got {zipf!r}")
    texts, draws = _start("tenants", seed, encode), _rng("tenants arrivals", seed)
    picks = draws.choices(range(n_tenants), [1 / (t + 1) ** zipf for t in range(n_tenants)], k=n_requests)
    counts = sorted((picks.count(t) for t in range(n_tenants)), reverse=True)
    question, example = "Question: {}\nAnswer:", "Question: {}\nAnswer: {}\n\n"
    asked = example_tokens * 2 // 3  # of an example's tokens, the question's; the answer has the rest
    streams: list[list[Job]] = []    # one per question, one per chat: arrivals keep each stream's order
    conversations = []
    for t, count in enumerate(counts):
        tenant = f"tenant {t}"
        system = TENANT_FRAME.format(t, texts.passage(_room(texts, TENANT_FRAME.format(t, "{}"), system_tokens)))
        shown = "".join(example.format(texts.passage(_room(texts, question, asked), True),
                                       texts.passage(max(1, example_tokens - asked - 3), True))
                        for _ in range(shots))
        while count:
            if draws.random() < 0.5:
                prompt = f"{system}\n\n{shown}" + question.format(texts.passage(_room(texts, question,
                                                                                        question_tokens), True))
                streams.append([Job(prompt, max_new_tokens, f"{tenant} few-shot", tenant=tenant)])
                count -= 1
            else:
                turns = min(chat_turns, count)
                chat = Conversation([texts.passage(message_tokens, True) for _ in range(turns)],
                                    [texts.passage(max_new_tokens, True) for _ in range(turns)], max_new_tokens,
                                    f"{tenant} chat {len(conversations)}", system)
                conversations.append(chat)
                streams.append([Job(chat.prompt(i), max_new_tokens, chat.group, chat.history(i), tenant=tenant)
                                for i in range(turns)])
                count -= turns
    order = [s for s, stream in enumerate(streams) for _ in stream]
    draws.shuffle(order)  # a uniformly random interleaving of the streams, each kept in order
    pending = [iter(stream) for stream in streams]
    return Workload("tenants", f"{n_requests} requests from {n_tenants} tenants (Zipf {zipf}), each with its own "
                               f"~{system_tokens}-token system prompt: {shots}-shot questions and "
                               f"{chat_turns}-turn chats", [next(pending[s]) for s in order], conversations)


WORKLOADS: dict[str, Callable[..., Workload]] = {
    f.__name__: f for f in (system_prompt, few_shot, multi_turn, tree_of_thought, no_reuse, copy_heavy,
                            code_edits, docs_completion, tenants)
}


def get(name: str, **kwargs: Any) -> Workload:
    """Build the workload called `name` with its keyword arguments, e.g. get("few_shot", shots=20)."""
    if name not in WORKLOADS:
        raise ValueError(f"name={name!r} is not a workload; workloads are {sorted(WORKLOADS)}")
    return WORKLOADS[name](**kwargs)


__getattr__ = old_names(__name__, {"Request": "Job"}, globals())  # Request: the engine's own
