"""Prompt data for GRPO: rows that ask, and the columns the rewards check the answers with.

    prompts = load_prompts(GRPODataConfig(source="data/problems.jsonl"))
    prompts.prompts[i]       # a string, or a chat (a list of messages) to be answered
    prompts.columns["answer"][i]                # every other column, passed to the rewards
    encode_prompts(prompts, tokenizer)[i]       # the ids the sampler continues

A row is a text `prompt` or a chat `messages` (the columns say which, as in SFT data:
zoo/data/sft_data.py reads the files, the same .jsonl / .json / .parquet / Hub sources). A chat
that ends with an assistant turn is a prompt with its answer: the turn is taken off and its
content fills the answer column (data.answer_field) unless the row has one, so the SFT
instruction set trains GRPO as it is. A chat is encoded by the tokenizer's template with the
assistant's opening, a text prompt as SFT encodes a prompt (`BOS? prompt`) or, for a model
tuned on chats, as one user turn: the model is asked as it was tuned. A .jsonl row passes
all its columns to the rewards; a table (parquet, Hub) the answer column and
data.extra_columns. A source with no prompt column, or a bad row, is refused in one line
naming the file and row.
"""

from __future__ import annotations

import dataclasses

from core.data import DataError
from zoo.data import chat_tokens, sft_data
from zoo.data.source import SourceConfig

DEFAULT_SOURCE = sft_data.DEFAULT_SOURCE  # the shipped instruction set (chat rows, answered)


@dataclasses.dataclass
class GRPODataConfig(SourceConfig):
    """Prompt rows. `source` "default": zoo/assets/instructions/train.jsonl (chat rows whose
    assistant turn is the answer); zoo/assets/word_problems/problems.jsonl holds GSM8K-style
    word problems (text prompts, answers "... #### N")."""

    prompt_field: str = "prompt"  # text prompts
    messages_field: str = "messages"  # present: chat prompts
    answer_field: str = "answer"  # the reference answer the built-in rewards compare with
    # a table's (parquet, Hub) further columns the rewards read (a .jsonl row passes all)
    extra_columns: list[str] = dataclasses.field(default_factory=list)
    # not a setting: how the run's prompts were asked (sft_data.ROW_FORMATS: chat through the
    # chat template, prompt-completion as raw text), recorded when it trains so `zoo
    # generate` asks the run as it trained
    row_format: str | None = None

    def __post_init__(self):
        super().__post_init__()
        sft_data.check_row_format_key(self.row_format)


@dataclasses.dataclass(frozen=True)
class Prompts:
    """Every row's prompt, its other columns, and where it came from (for errors)."""

    prompts: list  # str (text rows) or a list of {role, content} (chat rows)
    columns: dict[str, list]  # every other column, one value per prompt (None where absent)
    where: list[str]  # e.g. "data/problems.jsonl row 12"
    format: str  # "text" or "chat"
    label: str  # e.g. "zoo/assets/word_problems/problems.jsonl (text, 40 rows)"


def load_prompts(config: GRPODataConfig) -> Prompts:
    """The source's rows as prompts and columns; refused in one line when a file has no
    prompt column or a row is not a usable prompt."""
    files = sft_data.local_source(config, DEFAULT_SOURCE, "prompt rows")
    fields = [config.messages_field, config.prompt_field, config.answer_field,
              *config.extra_columns]
    parts, label = sft_data.read_parts(config, files, DEFAULT_SOURCE, fields)
    form = sft_data.one_format(parts, config.source, lambda part: _part_format(part, config))
    read = [_prompt(part.where, number, row, form, config)
            for part in parts for number, row in part.rows]
    if not read:
        raise DataError(f"data.source {config.source} has no rows")
    names = list(dict.fromkeys(name for _, row, _ in read for name in row))
    _check_answers(read, config.answer_field)
    return Prompts([prompt for prompt, _, _ in read],
                   {name: [row.get(name) for _, row, _ in read] for name in names},
                   [where for _, _, where in read], form,
                   f"{label}{form}, {len(read):,} row{'s' * (len(read) != 1)})")


def _part_format(part: sft_data.Part, config: GRPODataConfig) -> str:
    if config.messages_field in part.columns:
        return "chat"
    if config.prompt_field in part.columns:
        return "text"
    raise DataError(f"{part.where} has no prompt column: neither '{config.prompt_field}' "
                    f"(text prompts) nor '{config.messages_field}' (chat prompts); columns: "
                    f"{', '.join(part.columns) or 'none'}; set data.prompt_field=... or "
                    "data.messages_field=...")


def _prompt(where: str, number: int, row: dict, form: str,
            config: GRPODataConfig) -> tuple[object, dict, str]:
    """(the row's prompt, its other columns, where it is)."""
    field = config.messages_field if form == "chat" else config.prompt_field
    sft_data.check_row_format(row, number, where, [field], "chat" if form == "chat" else "text")
    columns = {name: value for name, value in row.items() if name != field}
    if form == "text":
        prompt = sft_data.text(row, number, where, field, empty_ok=True)
        if not prompt.strip():
            raise DataError(f"{where} row {number}: empty prompt ('{field}'), nothing to "
                            "answer; fix or remove the row")
        return prompt, columns, f"{where} row {number}"
    messages = row[field]
    sft_data.check_messages(messages, number, where, field)
    if messages[-1]["role"] == "assistant":
        columns.setdefault(config.answer_field, messages[-1]["content"])
        messages = messages[:-1]
    if not any(message["role"] == "user" for message in messages):
        raise DataError(f"{where} row {number}: '{field}' has no user message to answer; "
                        "fix or remove the row")
    return messages, columns, f"{where} row {number}"


def _check_answers(read: list, field: str) -> None:
    """Where some rows have an answer, every row has one (the built-in rewards read it)."""
    have = [field in columns for _, columns, _ in read]
    if any(have) and not all(have):
        where = read[have.index(False)][2]
        raise DataError(f"{where} has no '{field}' though other rows have one (the "
                        "answer the rewards check); fix or remove the row")


def encode_prompts(prompts: Prompts, tokenizer, chat_tuned: bool = False) -> list[list[int]]:
    """Each prompt's ids as the model was tuned to read it: a chat by the tokenizer's
    template with the assistant's opening; a text prompt as SFT encodes one (`BOS? prompt`,
    its special-token strings kept as text), or for a model tuned on chats (`chat_tuned`)
    as one user turn of that template, as `zoo generate` asks such a model."""
    chats = prompts.format == "chat" or chat_tuned
    sft_data.check_tokenizer(tokenizer, "chat" if chats else "text")
    if chats:
        return [_chat_ids(tokenizer, prompt if prompts.format == "chat" else
                          [{"role": "user", "content": prompt}], where)
                for prompt, where in zip(prompts.prompts, prompts.where)]
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    head = [bos] if bos is not None and bos != eos else []  # as SFT: GPT-2 style, EOS alone
    ids = tokenizer(prompts.prompts, add_special_tokens=False, split_special_tokens=True,
                    verbose=False)["input_ids"]
    return [head + row for row in ids]


def _chat_ids(tokenizer, messages: list[dict], where: str) -> list[int]:
    from jinja2 import TemplateError  # jinja2, with transformers

    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False,
                                             add_generation_prompt=True)
        hidden = chat_tokens.masked(tokenizer, messages)
        if hidden is None:
            return tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
        return chat_tokens.encode_rendered(tokenizer, text, tokenizer.apply_chat_template(
            hidden, tokenize=False, add_generation_prompt=True))[0]
    except (TemplateError, TypeError, ValueError, KeyError) as error:
        raise DataError(f"{where}: the chat template of tokenizer {chat_tokens.name(tokenizer)} "
                        f"refuses it: {chat_tokens.first_line(error)}; fix the row's messages "
                        "or use another tokenizer") from None


def check_lengths(ids: list[list[int]], prompts: Prompts, room: int, why: str) -> None:
    """Refuse the first prompt longer than `room` tokens (`why`: e.g. "seq_len 512 less
    max_new_tokens 64"), naming its row."""
    for row, where in zip(ids, prompts.where):
        if len(row) > room:
            raise DataError(f"{where}: the prompt takes {len(row):,} tokens, more than "
                            f"{room:,} ({why}); shorten it, raise seq_len or lower "
                            "max_new_tokens")

