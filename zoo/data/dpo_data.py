"""Preference data for DPO: rows of a prompt, a chosen and a rejected response -> two
examples a pair, each rendered exactly as SFT renders it (zoo/data/sft_data.py).

    pairs = load_pairs(DPODataConfig(source="data/prefs.jsonl"), tokenizer, seq_len=1024)
    pairs.tokens[pairs.starts[2 * p]:pairs.starts[2 * p + 1]]      # pair p: prompt + chosen
    pairs.tokens[pairs.starts[2 * p + 1]:pairs.starts[2 * p + 2]]  # pair p: prompt + rejected
    pairs.trained[...]                                             # the response tokens

Rows take TRL's shapes, so existing preference data loads as it is:
- strings: `prompt`, `chosen`, `rejected`; each example is SFT's prompt/completion row
  `BOS? prompt response EOS`;
- chat, explicit prompt: `prompt` a list of messages, `chosen` and `rejected` each one
  assistant message; each example is SFT's chat row `prompt + [response]`;
- chat, implicit prompt (no prompt column): `chosen` and `rejected` whole conversations
  that share every message but the last assistant answer, which is the response.
The loss sees the response and its end marker only, never the prompt. A pair must fit one
row of seq_len tokens with both its examples: too long, it is dropped, or (cut_prompt) both
prompts lose the same head tokens. A bad row is refused in one line naming its file and row.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from core.data import DataError
from zoo.data import sft_data
from zoo.data.sft_data import Encoded, Part, Piece, SFTDataConfig
from zoo.data.source import SourceConfig

DEFAULT_SOURCE = Path(__file__).resolve().parents[1] / "assets" / "preferences" / "train.jsonl"


@dataclasses.dataclass
class DPODataConfig(SourceConfig):
    """Preference rows. `source` "default": zoo/assets/preferences/train.jsonl (chat
    rows)."""

    prompt_field: str = "prompt"  # absent with chat rows: the implicit prompt
    chosen_field: str = "chosen"
    rejected_field: str = "rejected"
    # a pair longer than seq_len (both examples together): drop it (counted), or cut_prompt:
    # cut the same number of tokens from both prompts' heads (after BOS)
    truncation: str = "drop"
    # not a setting: what the rows held when the run trained on them (sft_data.recorded)
    row_format: str | None = None

    def __post_init__(self):
        super().__post_init__()
        sft_data.check_truncation(self.truncation)
        sft_data.check_row_format_key(self.row_format)


@dataclasses.dataclass(frozen=True)
class PreferencePairs:
    """Every kept pair's two examples, concatenated, and which tokens the loss sees."""

    tokens: np.ndarray  # int32 [N]: every kept example's ids, concatenated
    trained: np.ndarray  # bool [N]: True where the token is a target (response and end marker)
    starts: np.ndarray  # int64 [2P + 1]: example 2p is pair p's prompt+chosen, 2p+1 +rejected
    label: str  # e.g. "zoo/assets/preferences/train.jsonl (chat, 1,200 rows"
    format: str  # "prompt-completion" or "chat"
    rows: int  # rows read
    truncated: int  # pairs whose prompt head was cut (cut_prompt)
    dropped: int  # pairs dropped as too long

    @property
    def pairs(self) -> int:
        return (len(self.starts) - 1) // 2


def load_pairs(config: DPODataConfig, tokenizer, seq_len: int) -> PreferencePairs:
    """The source's rows as pairs whose two examples fit `seq_len` tokens together: from the
    token cache when it holds the same files, tokenizer, template and options, else encoded
    now and cached. Dropped rows are checked against data.max_skipped_share on every load."""
    files = sft_data.source_files(config, tokenizer, seq_len, DEFAULT_SOURCE, "preference rows")
    options = {"dpo": [config.source, config.split, config.subset, config.prompt_field,
                       config.chosen_field, config.rejected_field, config.truncation, seq_len]}
    return sft_data.load_cached(PreferencePairs, options, config, tokenizer, seq_len, files,
                                lambda: _encode_source(config, tokenizer, seq_len, files))


def _encode_source(config: DPODataConfig, tokenizer, seq_len: int,
                   files: list[str] | None) -> PreferencePairs:
    fields = [config.prompt_field, config.chosen_field, config.rejected_field]
    parts, label = sft_data.read_parts(config, files, DEFAULT_SOURCE, fields)
    form = _format(parts, config)
    sft_data.check_tokenizer(tokenizer, form)
    encode = _encode_chats if form == "chat" else _encode_strings
    fitted = sft_data.fit_rows(
        parts, lambda part, chunk: encode(part, chunk, tokenizer, config),
        lambda pair, where, number: _fit_pair(pair, seq_len, config.truncation, where, number))
    return PreferencePairs(**sft_data.laid_out(fitted, config.source, label, form))


def _format(parts: list[Part], config: DPODataConfig) -> str:
    """"chat" when the first row's chosen response is a list of messages, else
    "prompt-completion"; a later row of the other kind is refused as it is encoded."""
    first = next((row for part in parts for _, row in part.rows), {})
    return "chat" if isinstance(first.get(config.chosen_field), list) else "prompt-completion"


def _check_columns(part: Part, number: int, row: dict, fields: dict[str, str]) -> None:
    """Each of `fields` ({column: its data.<key>}) is in the row, else the columns there
    (the file's, when none of its rows has it) and the setting that names another."""
    for field, key in fields.items():
        if field not in row:
            columns = part.columns if field not in part.columns else list(row)
            raise DataError(f"{part.where} row {number} has no column '{field}' (columns: "
                            f"{', '.join(columns) or 'none'}); set data.{key}=... to the column "
                            "that holds it, or fix the row")


def _check_row_format(where: str, number: int, row: dict, config: DPODataConfig,
                      form: str) -> None:
    """A row whose responses are of the other format than the file's (decided by its first
    row: strings, or lists of messages) is that row's one line."""
    other, found, expected = ((str, "a string", "a list of messages") if form == "chat"
                              else (list, "a list of messages", "a string"))
    fields = [field for field in (config.chosen_field, config.rejected_field)
              if isinstance(row.get(field), other)]
    if fields:
        raise DataError(f"{where} row {number}: {' and '.join(map(repr, fields))} "
                        f"{'each ' * (len(fields) > 1)}holds {found}, not {expected} as in "
                        "the file's first row: its format differs from the file's; give every "
                        "row of a file one format")


def _identical(where: str, number: int, config: DPODataConfig) -> DataError:
    return DataError(f"{where} row {number}: '{config.chosen_field}' and "
                     f"'{config.rejected_field}' are identical, so there is no preference; "
                     "fix or remove the row")


def _empty(where: str, number: int, field: str, what: str) -> DataError:
    return DataError(f"{where} row {number}: '{field}' is empty ({what}), nothing to prefer; "
                     "fix or remove the row")


# ---------------------------------------------------------------- strings


def _encode_strings(part: Part, chunk: list, tokenizer,
                    config: DPODataConfig) -> list[tuple[Encoded, Encoded]]:
    """Each response as SFT's prompt/completion row with it as the completion."""
    for number, row in chunk:
        _check_row_format(part.where, number, row, config, "prompt-completion")
        _check_strings(part, number, row, config)
    chosen, rejected = (
        sft_data.encode_prompt_completion(
            chunk, part.where, tokenizer,
            SFTDataConfig(prompt_field=config.prompt_field, completion_field=field),
            "completion")
        for field in (config.chosen_field, config.rejected_field))
    return list(zip(chosen, rejected))


def _check_strings(part: Part, number: int, row: dict, config: DPODataConfig) -> None:
    _check_columns(part, number, row, {config.prompt_field: "prompt_field",
                                       config.chosen_field: "chosen_field",
                                       config.rejected_field: "rejected_field"})
    responses = [sft_data.text(row, number, part.where, field, empty_ok=True)
                 for field in (config.chosen_field, config.rejected_field)]
    for field, response in zip((config.chosen_field, config.rejected_field), responses):
        if not response.strip():
            raise _empty(part.where, number, field, "no text")
    if responses[0] == responses[1]:
        raise _identical(part.where, number, config)


# ---------------------------------------------------------------- chat


def _encode_chats(part: Part, chunk: list, tokenizer,
                  config: DPODataConfig) -> list[tuple[Encoded, Encoded]]:
    """Each response as SFT's chat row `prompt + [response]`; the loss on the response only
    (not on an assistant turn inside the prompt)."""
    for number, row in chunk:
        _check_row_format(part.where, number, row, config, "chat")
    explicit = config.prompt_field in part.columns
    split = [(number, _explicit(part, number, row, config) if explicit
              else _implicit(part, number, row, config)) for number, row in chunk]
    chosen, rejected = (
        [_response_only(encoded) for encoded in sft_data.encode_chat(
            [(number, {"messages": prompt + responses[side]})
             for number, (prompt, *responses) in split],
            part.where, tokenizer, SFTDataConfig(messages_field="messages"), "assistant")]
        for side in (0, 1))
    return list(zip(chosen, rejected))


def _explicit(part: Part, number: int, row: dict,
              config: DPODataConfig) -> tuple[list, list, list]:
    """(prompt, chosen, rejected) of a row with a prompt column."""
    _check_columns(part, number, row, {config.prompt_field: "prompt_field",
                                       config.chosen_field: "chosen_field",
                                       config.rejected_field: "rejected_field"})
    prompt = row[config.prompt_field]
    sft_data.check_messages(prompt, number, part.where, config.prompt_field)
    chosen, rejected = (_messages(part.where, number, row, field)
                        for field in (config.chosen_field, config.rejected_field))
    if chosen == rejected:
        raise _identical(part.where, number, config)
    for field, response in ((config.chosen_field, chosen), (config.rejected_field, rejected)):
        _check_one_answer(response, part.where, number, f"'{field}'")
    return prompt, chosen, rejected


def _implicit(part: Part, number: int, row: dict,
              config: DPODataConfig) -> tuple[list, list, list]:
    """(prompt, chosen, rejected) of two whole conversations: the prompt is the messages
    they share from the start, each response the one assistant answer after it."""
    _check_columns(part, number, row, {config.chosen_field: "chosen_field",
                                       config.rejected_field: "rejected_field"})
    chosen, rejected = (_messages(part.where, number, row, field)
                        for field in (config.chosen_field, config.rejected_field))
    if chosen == rejected:
        raise _identical(part.where, number, config)
    shared = next(i for i, (a, b) in enumerate(zip([*chosen, None], [*rejected, None]))
                  if a != b)
    for field, other, whole in ((config.chosen_field, config.rejected_field, chosen),
                                (config.rejected_field, config.chosen_field, rejected)):
        _check_one_answer(whole[shared:], part.where, number,
                          f"'{field}' after the {shared} messages it shares with '{other}' "
                          "(the prompt)")
    return chosen[:shared], chosen[shared:], rejected[shared:]


def _messages(where: str, number: int, row: dict, field: str) -> list:
    """The row's messages in `field`, with an assistant answer that says something."""
    messages = row[field]
    if isinstance(messages, list) and not any(
            isinstance(m, dict) and m.get("role") == "assistant"
            and isinstance(m.get("content"), str) and m["content"].strip() for m in messages):
        raise _empty(where, number, field, "no assistant message with content")
    sft_data.check_messages(messages, number, where, field)
    return messages


def _check_one_answer(response: list, where: str, number: int, what: str) -> None:
    """A response is one assistant message, as TRL's preference rows hold it."""
    if [m["role"] for m in response] != ["assistant"]:
        roles = ", ".join(m["role"] for m in response) or "none"
        raise DataError(f"{where} row {number}: {what} holds {len(response)} messages "
                        f"({roles}), not one assistant answer; fix or remove the row")


def _response_only(encoded: Encoded) -> Encoded:
    """The example trained from its response on: an assistant turn in the prompt is context."""
    return dataclasses.replace(
        encoded, trained=encoded.trained & (np.arange(len(encoded.ids)) >= encoded.keep_from))


# ---------------------------------------------------------------- seq_len


def _fit_pair(pair: tuple[Encoded, Encoded], seq_len: int, truncation: str, where: str,
              number: int) -> tuple[list[Piece], bool] | None:
    """The pair's two examples within seq_len together and whether they were cut: as they
    are, None (dropped), or both prompts' heads cut by the same count, responses whole."""
    chosen, rejected = pair
    excess = len(chosen.ids) + len(rejected.ids) - seq_len
    cut = max(0, -(-excess // 2))
    prompt = min(chosen.keep_from - chosen.head, rejected.keep_from - rejected.head)
    if cut and (truncation == "drop" or cut > prompt):
        return None
    pieces = [sft_data.cut_prompt(chosen, cut), sft_data.cut_prompt(rejected, cut)]
    if not all(trained.any() for _, trained in pieces):
        raise DataError(f"{where} row {number}: no token of a response is left to train on; "
                        "fix or remove the row")
    return pieces, cut > 0


def describe(pairs: PreferencePairs, truncation: str) -> str:
    """One line: where the pairs came from and what was cut."""
    return (f"{pairs.label}, {pairs.pairs:,} pairs, {len(pairs.tokens):,} tokens, "
            f"{int(pairs.trained.sum()):,} trained{sft_data.what_was_cut(pairs, truncation)})")
