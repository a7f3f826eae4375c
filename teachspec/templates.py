"""Chat templates: the text a tokenizer's template lays around each turn, and prompts that keep their prefix.

An instruct model was trained on conversations laid out one way ("<|im_start|>user\\n...<|im_end|>\\n" for Qwen,
"<|start_header_id|>user<|end_header_id|>\\n\\n...<|eot_id|>" for Llama 3), and its tokenizer carries that layout as
a Jinja template: `tokenizer.apply_chat_template(messages, add_generation_prompt=True)` is the prompt it expects.
The template's text already holds the special tokens it wants (a BOS among them), so it is encoded without adding
any more, as transformers does.

Prefix reuse needs one more thing: the prompt of turn n + 1 must *start with the very token ids* of turn n's prompt
and reply, or the radix tree sees a different prefix. Re-encoding the whole rendered conversation can split the
reply differently from how the model generated it. `extend` therefore keeps the ids already held and encodes only
the new text after them, whenever the new rendering starts with the text those ids spell. Templates that rewrite
earlier turns as the conversation grows (some reasoning models' templates drop the thinking of earlier replies)
break that: the rendering no longer starts with the held text, the prompt is encoded afresh, and the tree serves
only the part that did not change.
"""

from __future__ import annotations

SENTINEL = "\u2063teachspec-content\u2063"  # a message body no template changes (no spaces to trim)


def render(tokenizer, messages: list[dict], add_generation_prompt: bool = False) -> str:
    """The template's text for `messages` (each {"role": ..., "content": ...})."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def marks(tokenizer, history: list[dict], role: str) -> tuple[str, str]:
    """The text the template puts before and after a message of `role` that follows `history`: its opening (and
    anything the template adds first, such as a BOS or a default system prompt) and its closing."""
    before = render(tokenizer, history) if history else ""
    full = render(tokenizer, history + [{"role": role, "content": SENTINEL}])
    if SENTINEL not in full or not full.startswith(before):
        raise ValueError(f"the tokenizer's chat template does not lay a {role!r} turn after the turns so far as a "
                         f"plain continuation of them, so the turn cannot be added in place")
    opening, closing = full[len(before):].split(SENTINEL, 1)
    return opening, closing


def extend(pair, held: list[int], text: str) -> list[int]:
    """Token ids that spell `text` and start with `held` when `text` starts with what `held` spells (the new part
    encoded on its own, without special tokens added); otherwise `text` encoded afresh."""
    held_text = pair.decode(held) if held else ""
    if text.startswith(held_text):
        rest = text[len(held_text):]
        return list(held) + (pair.encode(rest, special=False) if rest else [])
    return pair.encode(text, special=False)
