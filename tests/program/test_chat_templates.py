"""Chat templates: `Chat` and the program roles build exactly the prompt `apply_chat_template` builds, and every
earlier turn of a conversation is served from the radix tree."""

import pytest

from helpers.models import build_model, chat_tokenizer
from teachspec import Engine, load_pair
from teachspec.chat import Chat
from teachspec.events import RequestStart
from teachspec.program import assistant, gen, run, system, user

MESSAGES = ["Open a file for reading.", "Now read the first line.", "Close it again.", "Thanks!"]
SYSTEM = "You write short Python."


def instruct_pair(template: str | None = None):
    tok = chat_tokenizer()
    if template is not None:
        tok.chat_template = template
    target, draft = build_model("llama", vocab_size=4160, seed=1), build_model("llama", vocab_size=4160, seed=2)
    end_of_turn = tok.convert_tokens_to_ids("<|im_end|>")
    target.generation_config.eos_token_id = [end_of_turn, 0]  # two ids, as Qwen2.5 instruct lists them
    return load_pair(target=target, draft=draft, tokenizer=tok)


def template_ids(tok, messages):
    return list(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"])


def test_chat_prompts_are_apply_chat_template_and_each_turn_reuses_every_earlier_one():
    pair = instruct_pair()
    tok, engine = pair.tokenizer, Engine(pair)
    assert pair.eos == {tok.convert_tokens_to_ids("<|im_end|>"), 0}
    chat, messages = Chat(engine, system=SYSTEM), [{"role": "system", "content": SYSTEM}]
    for i, message in enumerate(MESSAGES):
        messages.append({"role": "user", "content": message})
        prompt, held = chat.prompt(message), list(chat.ids)
        assert pair.decode(prompt) == tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        if i == 0:
            assert prompt == template_ids(tok, messages) and prompt[0] == tok.bos_token_id
        assert prompt[:len(held)] == held  # the earlier turns, token for token as the model produced them
        out = chat.say(message, 8, speculate="model", k=2)
        if i > 0:  # everything but the new message came from the tree
            assert out.stats.cached_tokens >= len(held) - 1
        messages.append({"role": "assistant", "content": chat.messages[-1]["content"]})
    assert len(chat.turns) == 4 and chat.messages == messages
    engine.radix.check_invariants()


def test_a_template_that_rewrites_earlier_turns_is_followed_and_the_tree_serves_what_did_not_change():
    """Like a reasoning model's template that drops earlier replies' thinking: earlier assistant turns shrink."""
    dropping = ("{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
                "{% if m['role'] == 'assistant' and not loop.last %}(earlier reply){% else %}{{ m['content'] }}"
                "{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    pair = instruct_pair(dropping)
    engine, tok = Engine(pair), pair.tokenizer
    chat = Chat(engine, system=SYSTEM)
    chat.say(MESSAGES[0], 8, speculate="model", k=2)
    chat.say(MESSAGES[1], 8, speculate="model", k=2)
    held = list(chat.ids)
    prompt = chat.prompt(MESSAGES[2])
    assert pair.decode(prompt) == tok.apply_chat_template(chat.messages + [{"role": "user", "content": MESSAGES[2]}],
                                                          add_generation_prompt=True, tokenize=False)
    assert prompt[:len(held)] != held  # the last reply was rewritten: a fresh encoding
    out = chat.say(MESSAGES[2], 8, speculate="model", k=2)
    assert 0 < out.stats.cached_tokens < len(held) - 1  # the system turn and first exchange, not the last reply


def test_without_a_template_the_plain_layout_stays():
    pair = load_pair("tiny")
    chat = Chat(Engine(pair), system="Answer briefly.")
    assert not chat.template
    assert pair.decode(chat.prompt("Hi")) == "Answer briefly.\n\nUser: Hi\nAssistant:"
    with pytest.raises(ValueError, match=r"template=True, but the tokenizer of 'tiny' has no chat template"):
        Chat(Engine(pair), template=True)


def conversation(s, messages):
    s += system(SYSTEM)
    for i, message in enumerate(messages):
        s += user(message)
        s += assistant(gen(f"reply{i}", max_tokens=6))


def test_program_roles_lay_turns_out_with_the_chat_template():
    pair = instruct_pair()
    tok, engine = pair.tokenizer, Engine(pair)
    state = run(conversation, engine=engine, messages=MESSAGES[:3])
    prompts = [e.prompt for e in engine.events.of(RequestStart)]
    messages = [{"role": "system", "content": SYSTEM}]
    for i, message in enumerate(MESSAGES[:3]):
        messages.append({"role": "user", "content": message})
        assert pair.decode(prompts[i]) == tok.apply_chat_template(messages, add_generation_prompt=True,
                                                                  tokenize=False)
        if i == 0:
            assert prompts[0] == template_ids(tok, messages)
        else:  # the earlier turns' ids are kept: a prefix of this prompt
            assert prompts[i][:len(prompts[i - 1])] == prompts[i - 1]
        messages.append({"role": "assistant", "content": state[f"reply{i}"]})
    assert state.messages == messages
    assert pair.decode(state.ids) == tok.apply_chat_template(messages, tokenize=False)
    assert state.run.hit_rate > 0.5


@pytest.mark.parametrize("name", ["smollm2-instruct", "qwen2.5-instruct"])
def test_the_instruct_pairs_fall_back_to_the_bundled_pair_without_a_network(name, monkeypatch, capsys):
    from teachspec.course import pairs

    monkeypatch.delenv(pairs.ENV, raising=False)
    monkeypatch.setattr(pairs, "_reachable", lambda host, **kw: False)  # as on a machine with no network
    pair = pairs.pick_pair(name, quiet=True)
    out = capsys.readouterr().out
    assert pair.name == "tiny" and f"Could not load the {name} pair" in out and "-Instruct" in out
