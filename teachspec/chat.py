"""A multi-turn chat that keeps its token ids, so each turn reuses the whole history from the radix cache.

Re-encoding the conversation's text every turn can tokenize the old part differently, and then the tree sees a
different prefix. Keeping the ids makes each turn's prompt *exactly* the previous prompt, plus the reply, plus
the new message: the cache serves everything but the new message (SGLang's multi-turn chat workload).

When the tokenizer has a chat template (every instruct model's does), each prompt is the template's
`apply_chat_template(messages, add_generation_prompt=True)`, and the held ids are extended with the new text only
(`teachspec.templates.extend`; a template that rewrites earlier turns gets a fresh encoding instead). Without a
template, turns are laid out as plain text: "User: ...\\nAssistant:".
"""

from __future__ import annotations

from teachspec.decode import Generation
from teachspec.engine import Engine
from teachspec.templates import extend, render


class Chat:
    """`Chat(engine, system="...")`, then `chat.say("message")` once a turn. `template=None` uses the tokenizer's
    chat template when it has one; False forces the plain layout (`user` and `assistant` set its openings)."""

    def __init__(self, engine: Engine, system: str = "", user: str = "User: ", assistant: str = "\nAssistant:",
                 template: bool | None = None):
        if not isinstance(engine, Engine):
            raise TypeError(f"engine must be an Engine, e.g. Chat(Engine(load_pair('tiny'))), got "
                            f"{type(engine).__name__} {engine!r}")
        for name, value in (("system", system), ("user", user), ("assistant", assistant)):
            if not isinstance(value, str):
                raise TypeError(f"{name} must be a string (the text the plain layout puts there; '' for none), got "
                                f"{type(value).__name__} {value!r}")
        if template is not None and not isinstance(template, bool):
            raise TypeError(f"template must be None (the tokenizer's chat template when it has one), True or False, "
                            f"got {type(template).__name__} {template!r}")
        self.engine, self.user, self.assistant = engine, user, assistant
        pair = engine.pair
        if template and not pair.chat_template:
            raise ValueError(f"template=True, but the tokenizer of {pair.name!r} has no chat template; use "
                             f"template=None (the plain layout then) or a tokenizer with one")
        self.template = pair.chat_template if template is None else bool(template)
        self.messages: list[dict] = [{"role": "system", "content": system}] if system else []
        self.ids: list[int] = []
        if system and not self.template:
            self.ids = pair.encode(system)  # the first text of the conversation: with the tokenizer's BOS
        self.turns: list[tuple[str, str]] = []

    def prompt(self, message: str) -> list[int]:
        """The ids of the next turn's prompt: the history held so far, then `message` and the reply's opening."""
        pair = self.engine.pair
        if self.template:
            text = render(pair.tokenizer, self.messages + [{"role": "user", "content": message}],
                          add_generation_prompt=True)
            return extend(pair, self.ids, text)
        opening = "\n\n" if self.ids else ""
        return self.ids + pair.encode(f"{opening}{self.user}{message}{self.assistant}", special=not self.ids)

    def say(self, message: str, max_new_tokens: int = 48, **generate) -> Generation:
        """Add a user message, generate the reply, and keep both in the history."""
        if not isinstance(message, str) or not message:
            raise ValueError(f"message must be a non-empty string, got {message!r}")
        ids = self.prompt(message)
        out = self.engine.generate(ids, max_new_tokens, **generate)
        reply = out.tokens[:-1] if out.tokens and out.tokens[-1] in self.engine.pair.eos else out.tokens
        self.ids = ids + out.tokens
        self.messages += [{"role": "user", "content": message},
                          {"role": "assistant", "content": self.engine.pair.decode(reply)}]
        self.turns.append((message, out.text))
        return out
