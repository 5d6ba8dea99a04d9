"""A conversation's ids as SFT trains them and `zoo generate` prompts them, under one rule:
text a user wrote never becomes a control token. A chat template's own markers
(`<|im_start|>`, BOS) are control tokens; the same string inside a message's content stays
the text it is, as a prompt/completion row keeps it (split_special_tokens). Hugging Face's
`apply_chat_template(tokenize=True)` (and TRL through it) would turn `<|eos|>` typed in a
message into the real end marker, which lets data or a prompt end a turn, or forge one.

    ids = prompt_ids(tokenizer, "Say <|eos|> twice.")  # `<|eos|>` as text, not the end marker

A conversation whose content holds no special-token string gets exactly
`tokenizer.apply_chat_template(messages)`'s ids, tokenized whole (the fast path)."""

from __future__ import annotations

import re

from core.data import DataError

MASK = "\ue000"  # a private-use character: stands in for a special-token string's characters
PROBE = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}]


def special_strings(tokenizer) -> list[str]:
    """The strings the tokenizer reads as control tokens, longest first."""
    found = {token.content for token in tokenizer.added_tokens_decoder.values() if token.special}
    return sorted(found, key=len, reverse=True)


def masked(tokenizer, messages: list[dict]) -> list[dict] | None:
    """The messages with every special-token string in a content replaced by as many MASK
    characters, or None when no content holds one."""
    strings = special_strings(tokenizer)
    if not strings or not any(s in m["content"] for m in messages for s in strings):
        return None
    pattern = re.compile("|".join(map(re.escape, strings)))
    return [{**m, "content": pattern.sub(lambda found: MASK * len(found[0]), m["content"])}
            for m in messages]


def encode_rendered(tokenizer, text: str, masked_text: str) -> tuple[list[int], list[tuple]]:
    """(ids, character offsets) of a rendered conversation whose masked rendering
    (`masked_text`, the same length) shows which special-token strings the template wrote:
    those become their control tokens, every other character is tokenized as text, one
    stretch between two control tokens at a time (as a tokenizer splits on them itself)."""
    if len(masked_text) != len(text):
        raise DataError("the chat template changes the length of message text, so a special-"
                        "token string in a message cannot be kept as text; remove it from "
                        "the message")
    strings = special_strings(tokenizer)
    ids, offsets, start = [], [], 0
    for marker in [*re.finditer("|".join(map(re.escape, strings)), masked_text), None]:
        end = marker.start() if marker else len(text)
        if end > start:
            piece = tokenizer(text[start:end], add_special_tokens=False,
                              split_special_tokens=True, return_offsets_mapping=True,
                              verbose=False)
            ids += piece["input_ids"]
            offsets += [(a + start, b + start) for a, b in piece["offset_mapping"]]
        if marker:
            ids.append(tokenizer.convert_tokens_to_ids(marker[0]))
            offsets.append(marker.span())
            start = marker.end()
    return ids, offsets


def prompt_ids(tokenizer, prompt: str) -> list[int]:
    """A prompt as a chat-tuned run was trained to read it: one user turn rendered by the
    tokenizer's template with the assistant's opening (the generation prompt)."""
    messages = [{"role": "user", "content": prompt}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    hidden = masked(tokenizer, messages)
    if hidden is None:
        return tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
    return encode_rendered(tokenizer, text, tokenizer.apply_chat_template(
        hidden, tokenize=False, add_generation_prompt=True))[0]


def check_template(tokenizer, source: str) -> None:
    """A template that cannot render a plain user/assistant exchange is broken: refused in one
    line naming where it came from (`source`, e.g. "data.tokenizer=DIR"), before any row is
    blamed for it."""
    from jinja2 import TemplateError  # jinja2, with transformers

    try:
        tokenizer.apply_chat_template(PROBE, tokenize=False)
    except (TemplateError, TypeError, ValueError, KeyError, AttributeError,
            IndexError) as error:
        raise DataError(f"the chat template of tokenizer {name(tokenizer)} ({source}: its "
                        "tokenizer_config.json 'chat_template' or chat_template.jinja) is "
                        f"broken, it cannot render a user/assistant exchange: "
                        f"{first_line(error)}; fix the template or set data.tokenizer=... to "
                        "a tokenizer with a working one") from None


def name(tokenizer) -> str:
    return getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__


def first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
