"""Workloads: seeded, sized as asked (counted with the bundled tokenizer), sharing exactly the prefixes they claim;
best_hit_rate against a brute-force count over every order."""

import itertools
import random
import re

import pytest
from transformers import AutoTokenizer

from teachspec import workloads as W
from teachspec.models import BUNDLED, corpus
from teachspec.radix.schedule import common_prefix

TOKENIZER = AutoTokenizer.from_pretrained(BUNDLED["tiny"])


def encode(text):
    return TOKENIZER.encode(text, add_special_tokens=False)


def tokens(workload):
    return [encode(r.prompt) for r in workload.requests]


def shared(seqs):
    """The prefix every one of the sequences shares."""
    return min(common_prefix(seqs[0], s) for s in seqs)


@pytest.fixture(scope="module")
def defaults():
    return {name: W.get(name) for name in W.WORKLOADS}


# -- determinism and sizes ---------------------------------------------------------------------------------------

def test_every_workload_is_deterministic_under_its_seed(defaults):
    for name, workload in defaults.items():
        assert W.get(name) == workload, name
        assert W.get(name, seed=1) != workload, name
        assert workload.name == name and workload.requests and workload.description


def test_workloads_with_the_same_seed_draw_different_text(defaults):
    firsts = {w.requests[0].prompt[-120:] for w in defaults.values()}
    assert len(firsts) == len(defaults)


def test_system_prompt_sizes():
    w = W.system_prompt(n_requests=6, system_tokens=400, question_tokens=30, max_new_tokens=5)
    seqs = tokens(w)
    assert len(seqs) == 6 and {r.max_new_tokens for r in w.requests} == {5}
    assert 380 <= shared(seqs) <= 410
    for request in w.requests:
        system, question = request.prompt.split("Question: ")
        assert 26 <= len(encode("Question: " + question)) <= 30
    bigger = tokens(W.system_prompt(n_requests=2, system_tokens=1200))
    assert 1150 <= shared(bigger) <= 1210


def test_few_shot_shares_a_long_prefix_of_worked_examples():
    w = W.few_shot(n_questions=6, shots=5, example_tokens=180, question_tokens=40)
    seqs = tokens(w)
    prefix = shared(seqs)
    assert 5 * 170 <= prefix <= 5 * 180 + 40  # the examples, plus the header
    assert all(20 <= len(s) - prefix <= 45 for s in seqs)  # then a short question
    assert {r.max_new_tokens for r in w.requests} == {1}  # the answer is one letter, as in 5-shot MMLU
    head = w.requests[0].prompt[:len(TOKENIZER.decode(seqs[0][:prefix]))]
    assert head.count("Question: ") == 5 and head.count("Answer: ") == 5 and head.count(W.BLANK) == 5
    assert w.requests[0].prompt.endswith("\nD. " + w.requests[0].prompt.split("\nD. ")[-1])
    assert w.requests[0].prompt.endswith("\nAnswer:")
    assert 2 * 90 <= shared(tokens(W.few_shot(n_questions=2, shots=2, example_tokens=100))) <= 2 * 100 + 40


def test_few_shot_examples_are_multiple_choice_with_the_blanked_word_among_the_choices():
    w = W.few_shot(n_questions=1, shots=20)
    examples = w.requests[0].prompt.split("Question: ")[1:-1]
    letters = []
    for example in examples:
        body, answer = example.rsplit("\nAnswer: ", 1)
        passage, *options = body.split("\n")
        assert [o[:3] for o in options] == ["A. ", "B. ", "C. ", "D. "]
        choices = [o[3:] for o in options]
        assert len(set(choices)) == 4 and W.BLANK in passage
        letter = answer.strip()
        letters.append(letter)
        right = choices["ABCD".index(letter)]
        assert all(c.lower() in passage.lower() for c in choices if c != right)  # distractors from the passage
        # the blank hides the right word: putting it back reads as the documentation did
        assert re.search(r"\b" + re.escape(right) + r"\b", passage.replace(W.BLANK, right), re.I)
    assert len(set(letters)) >= 3  # the right letter moves about


def test_few_shot_subjects_interleave_different_prefixes():
    w = W.few_shot(n_questions=8, subjects=2)
    seqs = tokens(w)
    assert [r.group for r in w.requests] == ["subject 0", "subject 1"] * 4
    assert shared(seqs[0::2]) > 850 and shared(seqs[1::2]) > 850
    header = len(encode(W.FEW_SHOT_HEADER.rstrip()))
    assert header <= common_prefix(seqs[0], seqs[1]) < header + 8  # the header and "Question:", nothing more


def test_multi_turn_histories_grow_and_each_is_a_prefix_of_the_next():
    w = W.multi_turn(n_conversations=3, turns=4, message_tokens=60, max_new_tokens=24, system_tokens=300)
    assert len(w.conversations) == 3 and all(len(c.messages) == len(c.replies) == 4 for c in w.conversations)
    assert [r.group for r in w.requests] == [f"conversation {c}" for c in range(3)] * 4  # round-robin arrival
    seqs = tokens(w)
    system = w.conversations[0].system
    assert system.startswith(W.CHAT_SYSTEM) and {c.system for c in w.conversations} == {system}
    assert 290 <= len(encode(system)) <= 300
    assert shared(seqs) >= len(encode(system)) - 1  # every conversation opens with the one system prompt
    for c in range(3):
        turns = seqs[c::3]
        assert 60 <= len(turns[0]) - len(encode(system)) <= 72  # "\n\nUser: " + message + "\nAssistant:"
        for before, after in zip(turns, turns[1:]):
            assert common_prefix(before, after) == len(before)  # the whole earlier prompt is reused
            assert 75 <= len(after) - len(before) <= 60 + 24 + 12  # a reply and a message
    first = w.requests[3]  # conversation 0, turn 1
    assert first.turns == [w.conversations[0].messages[0], w.conversations[0].replies[0],
                           w.conversations[0].messages[1]]
    assert first.prompt == W.chat_prompt(first.turns, system)
    bare = W.multi_turn(n_conversations=1, turns=1, system_tokens=0)
    assert bare.conversations[0].system == W.CHAT_SYSTEM


def test_a_chat_runner_supplies_its_own_replies():
    conversation = W.multi_turn(n_conversations=1, turns=3, system_tokens=0).conversations[0]
    prompt = conversation.prompt(2, ["first reply", "second reply"])
    assert prompt.startswith(W.CHAT_SYSTEM + "\n\nUser: ")
    assert prompt.endswith(f"User: {conversation.messages[2]}\nAssistant:")
    assert "\nAssistant: first reply\n\nUser: " in prompt and "\nAssistant: second reply\n\nUser: " in prompt
    assert conversation.replies[0] not in prompt
    with pytest.raises(ValueError, match="turn 2 needs the replies"):
        conversation.prompt(2, ["only one"])
    with pytest.raises(ValueError, match="turn must be < 3"):
        conversation.prompt(3)
    assert W.chat_prompt(["hi", "hello", "bye"]) == "User: hi\nAssistant: hello\n\nUser: bye\nAssistant:"
    with pytest.raises(ValueError, match="odd"):
        W.chat_prompt(["user", "assistant"])


def test_no_document_is_used_twice_in_a_workload():
    w = W.multi_turn(n_conversations=20, turns=10, message_tokens=60, max_new_tokens=24)
    texts = [t for c in w.conversations for t in c.messages + c.replies]
    openings = [t[:60] for t in texts]
    assert len(texts) == 400 and len(set(openings)) == 400
    for i, text in enumerate(texts):
        assert not any(o in text for j, o in enumerate(openings) if j != i), text


def test_tree_of_thought_children_extend_their_parent():
    w = W.tree_of_thought(branches=2, depth=3, root_tokens=200, thought_tokens=40)
    seqs = tokens(w)
    assert len(seqs) == 1 + 2 + 4 + 8
    assert 190 <= len(seqs[0]) <= 200
    for child in range(1, len(seqs)):
        parent = (child - 1) // 2  # breadth-first numbering of a binary tree
        assert common_prefix(seqs[parent], seqs[child]) == len(seqs[parent])
        assert 40 <= len(seqs[child]) - len(seqs[parent]) <= 52
    assert w.requests[-1].prompt.count("Thought ") == 3 and "Thought 2.2.2: " in w.requests[-1].prompt


def test_no_reuse_prompts_share_nothing():
    w = W.no_reuse(n_requests=20, prompt_tokens=400)
    seqs = tokens(w)
    assert all(380 <= len(s) <= 400 for s in seqs)
    assert len({s[0] for s in seqs}) == 20
    assert W.best_hit_rate(seqs) == 0


def test_copy_heavy_prompt_already_holds_its_continuation():
    w = W.copy_heavy(n_prompts=5, passage_tokens=64, max_new_tokens=32)
    for request in w.requests:
        passage, opening = request.prompt.split("\n\nRepeat the text above.\n\n")
        assert passage.startswith(opening)
        assert 56 <= len(encode(passage)) <= 64 and 26 <= len(encode(opening)) <= 32
        ids = encode(request.prompt)
        tail = ids[-4:]  # what a prompt-lookup drafter matches: the last few tokens occur earlier in the prompt
        assert any(ids[i:i + 4] == tail for i in range(len(ids) - 4))
    with pytest.raises(ValueError, match="passage_tokens must be > max_new_tokens=32"):
        W.copy_heavy(passage_tokens=32, max_new_tokens=32)


def test_code_edits_rewrite_each_file_several_times_and_each_prompt_ends_in_its_opening():
    w = W.code_edits(n_files=2, edits=3, passage_tokens=80, opening_tokens=12, max_new_tokens=40)
    assert [r.group for r in w.requests] == ["file 0"] * 3 + ["file 1"] * 3
    files = []
    for request in w.requests:
        file, rest = request.prompt[len("File:\n"):].split("\n\nRewrite the file above, ")
        edit, opening = rest.split(".\n\n", 1)
        assert file.startswith(opening) and len(encode(opening)) <= 12 and 70 <= len(encode(file)) <= 80
        assert request.max_new_tokens == 40
        files.append((file, edit))
    assert files[0][0] == files[2][0] != files[3][0]  # the same file edited, then the next one
    assert len({edit for _, edit in files[:3]}) == 3  # a different change each time
    for build, message in ((lambda: W.code_edits(edits=len(W.EDITS) + 1), "edits must be <= "),
                           (lambda: W.code_edits(passage_tokens=16, opening_tokens=16), "opening_tokens must be <")):
        with pytest.raises(ValueError, match=message):
            build()


def test_docs_completion_continues_held_out_documentation():
    w = W.docs_completion(n_prompts=10, prompt_tokens=64, max_new_tokens=32)
    for request in w.requests:
        assert corpus.is_validation(corpus.Document(request.group, "", ""), 0.05, 0), request.group
        assert 50 <= len(encode(request.prompt)) <= 64
    with pytest.raises(ValueError, match="n_prompts must be <="):
        W.docs_completion(n_prompts=10_000)


def test_sizes_count_in_the_tokens_of_the_encoder_given():
    def utf8(text):
        return list(text.encode())
    w = W.no_reuse(n_requests=4, prompt_tokens=300, encode=utf8)
    assert all(280 <= len(r.prompt.encode()) <= 300 for r in w.requests)
    assert w.footprint(utf8).prompt_tokens == sum(len(r.prompt.encode()) for r in w.requests)


def test_footprint_of_a_hand_made_workload():
    w = W.Workload("toy", "", [W.Job("abcd", 1, "a"), W.Job("abxy", 1, "a"), W.Job("zz", 1, "z")])
    f = w.footprint(lambda s: [ord(c) for c in s])
    assert (f.requests, f.prompt_tokens, f.longest_prompt) == (3, 10, 4)
    assert f.shared_tokens == pytest.approx((2 + 2 + 0) / 3)
    assert f.best_hit_rate == pytest.approx(2 / 10)


# -- best_hit_rate -----------------------------------------------------------------------------------------------

def brute_force_best(prompts):
    """Try every order with an unlimited cache: a request reuses its longest cached prefix, never its last token."""
    best = 0
    for perm in itertools.permutations(prompts):
        cached, hit = set(), 0
        for p in perm:
            hit += max(k for k in range(len(p)) if tuple(p[:k]) in cached | {()})
            cached |= {tuple(p[:k]) for k in range(1, len(p) + 1)}
        best = max(best, hit)
    return best / sum(map(len, prompts))


@pytest.mark.parametrize("prompts, expected", [
    ([[1, 2, 3]], 0),
    ([[1, 2, 3], [1, 2, 3]], 2 / 6),               # a duplicate still runs its last token
    ([[1, 2, 3], [1, 2]], 2 / 5),                  # only if [1, 2] runs first
    ([[1, 2, 3, 4], [1, 2, 5, 6], [7]], 2 / 9),
    ([[1], [1], [1]], 0),
    ([[5, 5, 5, 5], [5, 5], [5, 5, 5], [5]], 6 / 10),
])
def test_best_hit_rate_on_hand_made_cases(prompts, expected):
    assert W.best_hit_rate(prompts) == pytest.approx(expected)
    assert brute_force_best(prompts) == pytest.approx(expected)


def test_best_hit_rate_matches_a_brute_force_search_over_every_order():
    rng = random.Random(0)
    for _ in range(60):
        prompts = [[rng.randrange(3) for _ in range(rng.randint(1, 5))] for _ in range(rng.randint(1, 5))]
        assert W.best_hit_rate(prompts) == pytest.approx(brute_force_best(prompts)), prompts


def test_best_hit_rate_refuses_empty_input():
    with pytest.raises(ValueError, match="prompts is empty"):
        W.best_hit_rate([])
    with pytest.raises(ValueError, match="at least one token"):
        W.best_hit_rate([[1, 2], []])


# -- the registry and its errors ---------------------------------------------------------------------------------

def test_get_builds_by_name_and_lists_the_names_when_wrong():
    assert W.get("few_shot", n_questions=2, shots=1).requests[1].group == "subject 0"
    with pytest.raises(ValueError, match="'chat' is not a workload; workloads are .*'few_shot'.*'multi_turn'"):
        W.get("chat")
    with pytest.raises(TypeError):
        W.get("no_reuse", shots=2)


@pytest.mark.parametrize("build, message", [
    (lambda: W.system_prompt(n_requests=0), "n_requests must be >= 1, got 0"),
    (lambda: W.few_shot(example_tokens=4), "example_tokens must be >= 40, got 4"),
    (lambda: W.few_shot(question_tokens=20), "question_tokens must be >= 40, got 20"),
    (lambda: W.multi_turn(turns=0), "turns must be >= 1, got 0"),
    (lambda: W.tree_of_thought(depth=-1), "depth must be >= 0, got -1"),
    (lambda: W.no_reuse(prompt_tokens=1.5), "prompt_tokens must be an integer"),
    (lambda: W.docs_completion(seed="a"), "seed must be an integer"),
    (lambda: W.no_reuse(encode=42), "encode must be a function"),
])
def test_bad_parameters_are_named(build, message):
    with pytest.raises((ValueError, TypeError), match=message):
        build()


# -- tenants -----------------------------------------------------------------------------------------------------

def test_tenants_each_have_their_own_system_prompt_and_a_zipf_share_of_the_requests(defaults):
    w = defaults["tenants"]
    assert len(w.requests) == 48 and all(r.tenant and r.group.startswith(r.tenant) for r in w.requests)
    counts = [sum(r.tenant == f"tenant {t}" for r in w.requests) for t in range(6)]
    assert counts == sorted(counts, reverse=True) and counts[0] >= 2 * counts[-1]
    systems, end = {}, "Answer each question in one short sentence."
    for r in w.requests:
        system = r.prompt.split(end)[0] + end
        assert systems.setdefault(r.tenant, system) == system
    firsts = [encode(s) for s in systems.values()]
    assert all(180 <= len(s) <= 195 for s in firsts), [len(s) for s in firsts]
    assert max(common_prefix(a, b) for a, b in itertools.combinations(firsts, 2)) < 32  # not one shared block
    sizes = [len(s) for s in tokens(w)]
    assert 200 <= min(sizes) and max(sizes) <= 400


def test_tenants_mix_few_shot_questions_and_chats_whose_turns_arrive_in_order(defaults):
    w = defaults["tenants"]
    kinds = {r.group.split(" ")[2] for r in w.requests}
    assert kinds == {"few-shot", "chat"}
    for c in w.conversations:
        prompts = [r.prompt for r in w.requests if r.group == c.group]
        assert prompts == [c.prompt(i) for i in range(len(prompts))]  # in order, each a prefix of the next
        assert all(a in b for a, b in zip(prompts, prompts[1:]))
    few_shot = [r for r in w.requests if r.group.endswith("few-shot") and r.tenant == "tenant 0"]
    assert len({r.prompt.rsplit("Question: ", 1)[0] for r in few_shot}) == 1  # the tenant's own worked examples
    assert all(r.prompt.count("Question: ") == 3 for r in few_shot)  # 2 shots and the question


def test_tenants_interleave_arrivals_differently_per_seed():
    a, b = W.tenants(n_tenants=3, n_requests=12, seed=1), W.tenants(n_tenants=3, n_requests=12, seed=2)
    assert [r.tenant for r in a.requests] != [r.tenant for r in b.requests]
    assert W.tenants(n_tenants=2, n_requests=6, zipf=0, chat_turns=1).requests[0].max_new_tokens == 8
    with pytest.raises(ValueError, match="zipf must be a number >= 0"):
        W.tenants(zipf=-1)
