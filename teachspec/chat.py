"""A multi-turn chat that keeps its token ids, so each turn reuses the whole history from the radix cache.

Re-encoding the conversation's text every turn can tokenize the old part differently, and then the tree sees a
different prefix. Keeping the ids makes each turn's prompt *exactly* the previous prompt, plus the reply, plus
the new message: the cache serves everything but the new message (SGLang's multi-turn chat workload).
"""

from __future__ import annotations

from teachspec.decode import Generation
from teachspec.engine import Engine


class Chat:
    def __init__(self, engine: Engine, system: str = "", user: str = "User: ",
                 assistant: str = "\nAssistant:"):
        self.engine, self.user, self.assistant = engine, user, assistant
        self.ids: list[int] = engine.pair.encode(system) if system else []
        self.turns: list[tuple[str, str]] = []

    def say(self, message: str, max_new_tokens: int = 48, **generate) -> Generation:
        """Add a user message, generate the reply, and keep both in the history."""
        if not isinstance(message, str) or not message:
            raise ValueError(f"message must be a non-empty string, got {message!r}")
        opening = "\n\n" if self.ids else ""
        turn = self.engine.pair.encode(f"{opening}{self.user}{message}{self.assistant}")
        out = self.engine.generate(self.ids + turn, max_new_tokens, **generate)
        self.ids += turn + out.tokens
        self.turns.append((message, out.text))
        return out
