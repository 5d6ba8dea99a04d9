"""Supervised fine-tuning data: instruction rows -> token ids and a per-token "trained" mask.

    examples = load_examples(SFTDataConfig(source="data/chat.jsonl"), tokenizer, seq_len=2048)
    examples.tokens[examples.starts[e]:examples.starts[e + 1]]  # example e's ids
    examples.trained[...]                                       # which of them the loss sees

A row is either a prompt and a completion (columns `prompt`, `completion`) or a chat
(`messages`: a list of {role, content}); the columns say which. A prompt/completion row is
`BOS? prompt completion EOS`, the loss on the completion and EOS. A chat is rendered with the
tokenizer's own chat template, so the ids are exactly `tokenizer.apply_chat_template(messages)`
and a model trained here is prompted the way it was trained; the loss is on the assistant
turns, each with the end marker the template closes it with, so the model learns to stop.
An example longer than `seq_len` is dropped, or its prompt's head is cut; the packer
(zoo/data/packing.py) then lays the examples into rows. A bad row is refused in one line
naming its file and row. A source is tokenized once into the token cache
(zoo/data/token_cache.py), keyed by its files, the tokenizer, its template and the options.
The preference pairs of zoo/data/dpo_data.py are read, rendered, fitted and cached by the
same public steps (read_parts, encode_*, fit_rows, load_cached).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np

from core import data
from core.data import BUILDERS, DataError, load_tokenizer
from zoo.data import chat_tokens, token_cache
from zoo.data.chat_tokens import first_line as _first_line
from zoo.data.chat_tokens import name as _name
from zoo.data.packed_text import tokenizer_fingerprint
from zoo.data.source import SourceConfig

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SOURCE = Path(__file__).resolve().parents[1] / "assets" / "instructions" / "train.jsonl"
TRAIN_ON = ("auto", "completion", "assistant", "all")
TRUNCATION = ("drop", "cut_prompt")
ROW_FORMATS = ("chat", "prompt-completion")
CHUNK = 1024  # rows tokenized per call (a fast tokenizer spreads a call over all cores)
Examples = TypeVar("Examples")  # SFTExamples, or another loader's (tokens, trained, starts, ...)


@dataclasses.dataclass
class SFTDataConfig(SourceConfig):
    """Instruction rows. `source` "default": zoo/assets/instructions/train.jsonl (chat
    rows)."""

    prompt_field: str = "prompt"
    completion_field: str = "completion"
    messages_field: str = "messages"  # present: chat rows; absent: prompt/completion rows
    # the tokens the loss sees: auto = completion for prompt/completion rows, assistant for
    # chat rows; all = every token
    train_on: str = "auto"
    # an example longer than seq_len: drop it (counted), or cut_prompt: cut its prompt's head
    # (after BOS) so the completion, or a chat's last assistant turn, stays whole
    truncation: str = "drop"
    packing: bool = True  # several examples per row (segment ids keep them apart)
    # not a setting: what the rows held when the run trained on them (ROW_FORMATS), recorded
    # then (`recorded`) so `zoo generate` prompts the run as it trained, data gone or not
    row_format: str | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.train_on not in TRAIN_ON:
            raise ValueError(f"data.train_on must be one of {', '.join(TRAIN_ON)}, "
                             f"not {self.train_on!r}")
        check_truncation(self.truncation)
        check_row_format_key(self.row_format)


def check_row_format_key(row_format: str | None) -> None:
    """data.row_format, which SFT and DPO data record, refused in one line if unknown."""
    if row_format not in (None, *ROW_FORMATS):
        raise ValueError(f"data.row_format must be one of {', '.join(ROW_FORMATS)} (zoo "
                         f"records it when it trains), not {row_format!r}")


def recorded(config, row_format: str):
    """`config` (SFT or DPO data) recording `row_format`, what its rows held as the trainer
    read them; one line when the config said otherwise (a saved run's config given again
    for other data)."""
    if config.row_format not in (None, row_format):
        raise DataError(f"data.row_format={config.row_format}, but data.source "
                        f"{config.source} holds {row_format} rows; drop data.row_format "
                        "(zoo records what the rows hold)")
    return dataclasses.replace(config, row_format=row_format)


def check_truncation(truncation: str) -> None:
    """data.truncation, which every example loader takes, refused in one line if unknown."""
    if truncation not in TRUNCATION:
        raise ValueError(f"data.truncation must be one of {', '.join(TRUNCATION)}, "
                         f"not {truncation!r}")


@dataclasses.dataclass(frozen=True)
class SFTExamples:
    """Every kept example's ids, concatenated, and which of them are targets of the loss."""

    tokens: np.ndarray  # int32 [N]: every kept example's ids, concatenated
    trained: np.ndarray  # bool [N]: True where that token is a target of the loss
    starts: np.ndarray  # int64 [E + 1]: example e is tokens[starts[e]:starts[e+1]]
    label: str  # e.g. "zoo/assets/instructions/train.jsonl (chat, 1,200 rows"
    format: str  # "prompt-completion" or "chat"
    train_on: str  # resolved: "completion", "assistant" or "all"
    rows: int  # rows read
    truncated: int  # rows whose prompt head was cut (cut_prompt)
    dropped: int  # rows dropped as too long (drop)


@dataclasses.dataclass
class Part:
    """One file (or a Hub split) and its rows: errors name `where` and the row's number."""

    where: str  # a file's path, or "Hub dataset NAME (split S)"
    columns: list[str]
    rows: list[tuple[int, dict]]  # (1-based row number within `where`, the row)


@dataclasses.dataclass
class Encoded:
    """One row's ids before fitting: `head` leading tokens (BOS) survive a cut, and the
    completion (a chat's last assistant turn on) starts at `keep_from`."""

    ids: list[int]
    trained: np.ndarray
    head: int
    keep_from: int


Piece = tuple[np.ndarray, np.ndarray]  # one example's ids (int32) and trained mask (bool)


def load_examples(config: SFTDataConfig, tokenizer, seq_len: int) -> SFTExamples:
    """The source's rows as examples of at most `seq_len` tokens: from the token cache when
    it holds the same files, tokenizer, template and options, else encoded now and cached.
    Dropped rows are checked against data.max_skipped_share on every load."""
    files = source_files(config, tokenizer, seq_len, DEFAULT_SOURCE, "instruction rows")
    options = {"sft": [config.source, config.split, config.subset, config.prompt_field,
                       config.completion_field, config.messages_field, config.train_on,
                       config.truncation, seq_len]}
    return load_cached(SFTExamples, options, config, tokenizer, seq_len, files,
                       lambda: _encode_source(config, tokenizer, seq_len, files))


def source_files(config, tokenizer, seq_len: int, default: Path,
                 rows: str) -> list[str] | None:
    """The local files data.source names (None: a Hub dataset), once the tokenizer and
    seq_len are known to be usable, so a loader fails before reading anything."""
    if tokenizer is None:
        raise DataError(f"data.source {config.source} needs a tokenizer (got None)")
    if seq_len < 1:
        raise DataError(f"seq_len must be >= 1, not {seq_len}")
    return local_source(config, default, rows)


def local_source(config, default: Path, rows: str) -> list[str] | None:
    """The local files data.source names (its `default`: the shipped `rows`), or None for
    a Hub dataset."""
    if config.source == "default" and not default.is_file():
        raise DataError(f"data.source=default reads {_display(default)}, which is "
                        f"missing; set data.source to your {rows}")
    return data.local_files(str(default) if config.source == "default" else config.source)


# ---------------------------------------------------------------- cache


def load_cached(kind: type[Examples], options: dict, config, tokenizer, seq_len: int,
                files: list[str] | None, encode: Callable[[], Examples]) -> Examples:
    """`kind` (a dataclass of tokens, trained, starts and counts) from the token cache when
    it holds the same files, tokenizer, template and `options`, else `encode()`d and cached;
    its dropped rows are checked against data.max_skipped_share on every load."""
    key = token_cache.cache_key({
        **options,
        "files": [(f, os.stat(f).st_mtime_ns, os.stat(f).st_size) for f in files or ()],
        "tokenizer": [*tokenizer_fingerprint(tokenizer), tokenizer.chat_template],
    })
    root = token_cache.cache_root(config.cache_dir)
    examples = _cached(root, key, kind)
    if examples is None:
        _store(root, key, encode())
        examples = _cached(root, key, kind)
    _check_dropped(examples, config, seq_len)
    return examples


def _cached(root: Path, key: str, kind: type[Examples]) -> Examples | None:
    """The cached examples, memory-mapped; the tokens are written last, so with them the
    mask and starts are there too."""
    entries = [token_cache.load(root, name) for name in (key, f"{key}-trained", f"{key}-starts")]
    if any(entry is None for entry in entries):
        return None
    (tokens, meta), (trained, _), (starts, _) = entries
    return kind(tokens, trained, starts, **meta)


def _store(root: Path, key: str, examples) -> None:
    token_cache.store(root, f"{key}-trained", examples.trained, {})
    token_cache.store(root, f"{key}-starts", examples.starts, {})
    meta = {field.name: getattr(examples, field.name) for field in dataclasses.fields(examples)
            if field.name not in ("tokens", "trained", "starts")}
    token_cache.store(root, key, examples.tokens, meta)


def _check_dropped(examples, config, seq_len: int) -> None:
    """Refuse a source that lost more than data.max_skipped_share of its rows to seq_len;
    otherwise say in one line on stderr what was dropped or cut (nothing when nothing was)."""
    rows, dropped, cut = examples.rows, examples.dropped, examples.truncated
    if dropped == rows:
        raise DataError(f"data.source {config.source}: no row fits seq_len {seq_len} "
                        f"({rows:,} read); raise seq_len or use data.truncation=cut_prompt")
    if dropped > config.max_skipped_share * rows:
        raise DataError(
            f"data.source {config.source}: dropped {dropped:,} of {rows:,} rows "
            f"({dropped / rows:.0%}) longer than seq_len {seq_len}, more than "
            f"data.max_skipped_share={config.max_skipped_share}; raise seq_len, use "
            "data.truncation=cut_prompt, or raise data.max_skipped_share"
        )
    done = [f"dropped {dropped:,} longer than seq_len {seq_len}"] * bool(dropped)
    done += [f"cut the prompt's head of {cut:,} to fit seq_len {seq_len}"] * bool(cut)
    if done:
        print(f"data: {rows:,} rows; {'; '.join(done)}", file=sys.stderr)


def read_once(load):
    """`load(data, tokenizer, seq_len)` as `read(data, seq_len)`: a source read once per
    process (resolve checks it, data packs it), the last four kept."""
    memo: dict[str, object] = {}

    def read(data, seq_len: int):
        # the rows' format, once recorded, is no other source
        key = repr((dataclasses.replace(data, row_format=None), seq_len))
        if key not in memo:
            if len(memo) >= 4:
                memo.pop(next(iter(memo)))
            memo[key] = load(data, load_tokenizer(data.tokenizer), seq_len)
        return memo[key]

    return read


def describe(examples: SFTExamples, truncation: str) -> str:
    """One line: where the examples came from, what the loss trains, what was cut."""
    trained = int(examples.trained.sum())
    return (f"{examples.label}, {len(examples.starts) - 1:,} examples, "
            f"{len(examples.tokens):,} tokens, {trained:,} trained "
            f"({examples.train_on}){what_was_cut(examples, truncation)})")


def what_was_cut(found, truncation: str) -> str:
    """"; N longer than seq_len dropped, ... (data.truncation=...)", or "" when nothing
    was: `found` counts them (`dropped`, `truncated`)."""
    cut = []
    if found.dropped:
        cut.append(f"{found.dropped:,} longer than seq_len dropped")
    if found.truncated:
        cut.append(f"{found.truncated:,} with the prompt's head cut")
    return f"; {', '.join(cut)} (data.truncation={truncation})" if cut else ""


# ---------------------------------------------------------------- rows


def _encode_source(config: SFTDataConfig, tokenizer, seq_len: int,
                   files: list[str] | None) -> SFTExamples:
    fields = [config.messages_field, config.prompt_field, config.completion_field]
    parts, label = read_parts(config, files, DEFAULT_SOURCE, fields)
    form = one_format(parts, config.source, lambda part: _part_format(part, config))
    train_on = _train_on(config, form)
    check_tokenizer(tokenizer, form)
    encode = encode_chat if form == "chat" else encode_prompt_completion
    fitted = fit_rows(
        parts, lambda part, chunk: encode(chunk, part.where, tokenizer, config, train_on),
        lambda encoded, where, number: _fit(encoded, seq_len, config.truncation, where, number))
    return SFTExamples(**laid_out(fitted, config.source, label, form), train_on=train_on)


@dataclasses.dataclass
class Fitted:
    """What fitting a source's rows to seq_len kept, and the counts its examples report."""

    pieces: list[Piece] = dataclasses.field(default_factory=list)
    rows: int = 0
    truncated: int = 0
    dropped: int = 0


def fit_rows(parts: list[Part], encode: Callable[[Part, list], list],
             fit: Callable[..., tuple[list[Piece], bool] | None]) -> Fitted:
    """Each part's rows encoded CHUNK at a time (`encode(part, rows)`: one item a row), and
    each item fitted (`fit(item, where, number)`: its pieces and whether its prompt was cut,
    or None when dropped)."""
    fitted = Fitted()
    for part in parts:
        for first in range(0, len(part.rows), CHUNK):
            chunk = part.rows[first:first + CHUNK]
            for (number, _), encoded in zip(chunk, encode(part, chunk)):
                kept = fit(encoded, part.where, number)
                fitted.rows += 1
                fitted.dropped += kept is None
                if kept is not None:
                    fitted.pieces += kept[0]
                    fitted.truncated += kept[1]
    return fitted


def laid_out(fitted: Fitted, source: str, label: str, form: str) -> dict:
    """The fields every loader's examples share: the kept pieces laid end to end as tokens,
    trained and starts, the label, format and counts; a source without rows is refused."""
    if not fitted.rows:
        raise DataError(f"data.source {source} has no rows")
    pieces, rows = fitted.pieces, fitted.rows
    lengths = [len(ids) for ids, _ in pieces]
    return {
        "tokens": np.concatenate([ids for ids, _ in pieces] or [np.zeros(0, np.int32)]),
        "trained": np.concatenate([mask for _, mask in pieces] or [np.zeros(0, bool)]),
        "starts": np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64),
        "label": f"{label}{form}, {rows:,} row{'s' * (rows != 1)}", "format": form,
        "rows": rows, "truncated": fitted.truncated, "dropped": fitted.dropped,
    }


def read_parts(config, files: list[str] | None, default: Path,
               fields: list[str]) -> tuple[list[Part], str]:
    """The source's parts (each local file, or the Hub split) with the rows `config.split`
    selects, and the start of its label, e.g. "data/ (3 files, "; a Hub or parquet table
    keeps only the `fields` a row can use."""
    if files is None:
        subset = f"subset {config.subset}, " if config.subset else ""
        dataset = data.hub_dataset(config.source, config.subset, config.split)
        where = f"Hub dataset {config.source} ({subset}split {config.split}"
        return [_dataset_part(dataset, f"{where})", fields)], f"{where}, "
    display = _display(default) if config.source == "default" else config.source
    parts = [_read_file(path, display, default, fields) for path in files]
    if config.split != "train":
        parts = _select(parts, config.split, display)
    many = f"{len(files):,} files, " if len(files) > 1 else ""
    return parts, f"{display} ({many}"


def _display(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _read_file(path: str, source: str, default: Path, fields: list[str]) -> Part:
    """A .jsonl file line by line (a row's number is its line), else through `datasets`."""
    where = _display(Path(path)) if Path(path) == default else path
    builder = BUILDERS[Path(path).suffix.lower()]
    if builder == "text":
        raise DataError(f"data.source {source}: {where} is a text file, which holds none "
                        f"of the columns {', '.join(fields)}; use .jsonl, .json or .parquet")
    if Path(path).suffix.lower() != ".jsonl":
        return _dataset_part(data.local_dataset([path], source, "train"), where, fields)
    rows, offset = [], 0
    with open(path, "rb") as lines:
        for number, raw in enumerate(lines, 1):
            line = _utf8(raw, where, number, offset)
            offset += len(raw)
            if line.strip():
                rows.append((number, _json_row(line, where, number)))
    if not rows:
        raise DataError(f"{where} has no rows; fill or remove it")
    columns = list(dict.fromkeys(itertools.chain.from_iterable(row for _, row in rows)))
    return Part(where, columns, rows)


def _dataset_part(dataset, where: str, fields: list[str]) -> Part:
    """A `datasets` table's rows, with only the columns a row can use (a wide one stays small)."""
    columns = list(dataset.column_names)
    table = dataset.select_columns([c for c in fields if c in columns])
    try:
        return Part(where, columns, list(enumerate(table.to_list(), 1)))
    except UnicodeDecodeError as error:  # a table reader keeps a file's bytes unchecked
        number = next(n for n in range(1, len(table) + 1) if not _decodes(table, n - 1))
        raise DataError(f"{where} row {number}: byte 0x{error.object[error.start]:02x} in a "
                        "string is not UTF-8; save the file as UTF-8 or fix the row") from None


def _decodes(table, index: int) -> bool:
    try:
        table[index]
    except UnicodeDecodeError:
        return False
    return True


def _utf8(line: bytes, where: str, number: int, offset: int) -> str:
    """A line's text; a byte that is not UTF-8 is the row's one line, with its file offset."""
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(f"{where} row {number}: byte {offset + error.start:,} "
                        f"(0x{line[error.start]:02x}) is not UTF-8; save the file as UTF-8 "
                        "or fix the row") from None


def _json_row(line: str, where: str, number: int) -> dict:
    try:
        row = json.loads(line)
    except ValueError as error:
        raise DataError(f"{where} row {number} is not valid JSON ({error}); fix or remove "
                        "the line") from None
    if not isinstance(row, dict):
        raise DataError(f"{where} row {number} is a JSON {type(row).__name__}, not an object "
                        "of columns; give every line an object like {\"prompt\": ...}")
    return row


def _select(parts: list[Part], split: str, source: str) -> list[Part]:
    """The rows a split slice such as train[:90%] picks from the files one after another."""
    import datasets  # datasets

    total = sum(len(part.rows) for part in parts)
    try:
        ranges = datasets.ReadInstruction.from_spec(split).to_absolute({"train": total})
    except (ValueError, AssertionError) as error:
        raise DataError(f"data.source {source}: {_first_line(error)}") from None
    picked = set(itertools.chain.from_iterable(range(r.from_, r.to) for r in ranges))
    offsets = np.cumsum([0] + [len(part.rows) for part in parts])
    return [dataclasses.replace(part, rows=[row for i, row in enumerate(part.rows)
                                            if offset + i in picked])
            for part, offset in zip(parts, offsets)]


def one_format(parts: list[Part], source: str, part_format: Callable[[Part], str]) -> str:
    """"chat" or "prompt-completion", each part's by `part_format`; every part must agree."""
    first, form = parts[0].where, part_format(parts[0])
    for part in parts[1:]:
        if (other := part_format(part)) != form:
            raise DataError(f"data.source {source} mixes {form} rows ({first}) and "
                            f"{other} rows ({part.where}); use one format")
    return form


def _part_format(part: Part, config: SFTDataConfig) -> str:
    columns = part.columns
    if config.messages_field in columns:
        return "chat"
    if config.prompt_field in columns and config.completion_field in columns:
        return "prompt-completion"
    listed = ", ".join(columns) or "none"
    if config.prompt_field in columns or config.completion_field in columns:
        field, key = ((config.completion_field, "completion_field")
                      if config.prompt_field in columns else (config.prompt_field, "prompt_field"))
        raise DataError(f"{part.where} has no column '{field}'; columns: {listed}; set "
                        f"data.{key}=... to the column that holds it")
    raise DataError(
        f"{part.where} has neither a '{config.messages_field}' column (chat rows) nor "
        f"'{config.prompt_field}' and '{config.completion_field}'; columns: {listed}; set "
        "data.messages_field=..., or data.prompt_field=... and data.completion_field=..."
    )


def _train_on(config: SFTDataConfig, form: str) -> str:
    where = f"data.source {config.source}"
    if config.train_on == "auto":
        return "assistant" if form == "chat" else "completion"
    if config.train_on == "completion" and form == "chat":
        raise DataError(f"data.train_on=completion needs prompt/completion rows, but {where} "
                        f"has chat rows ('{config.messages_field}'); use data.train_on="
                        "assistant (or all)")
    if config.train_on == "assistant" and form == "prompt-completion":
        raise DataError(f"data.train_on=assistant needs chat rows, but {where} has "
                        f"prompt/completion rows; use data.train_on=completion (or all)")
    return config.train_on


def check_tokenizer(tokenizer, form: str) -> None:
    """A chat needs the tokenizer's template; a prompt/completion row its EOS."""
    if form == "chat":
        _check_chat_tokenizer(tokenizer)
    elif tokenizer.eos_token_id is None:
        raise DataError(f"tokenizer {_name(tokenizer)} has no EOS token, which ends every "
                        "completion; use another tokenizer")


# ---------------------------------------------------------------- prompt/completion


def encode_prompt_completion(chunk, where: str, tokenizer, config: SFTDataConfig,
                             train_on: str) -> list[Encoded]:
    """`BOS? prompt completion EOS`, each part tokenized alone (text, never special tokens),
    the loss on the completion and EOS (or on everything)."""
    for number, row in chunk:
        check_row_format(row, number, where, [config.prompt_field, config.completion_field],
                         "prompt/completion")
    prompts = [text(row, number, where, config.prompt_field, empty_ok=True)
               for number, row in chunk]
    completions = [text(row, number, where, config.completion_field, empty_ok=False)
                   for number, row in chunk]
    prompt_ids, completion_ids = (
        tokenizer(texts, add_special_tokens=False, split_special_tokens=True,
                  verbose=False)["input_ids"] if texts else []
        for texts in (prompts, completions))
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    head = [bos] if bos is not None and bos != eos else []  # GPT-2 style: EOS alone
    encoded = []
    for prompt, completion in zip(prompt_ids, completion_ids):
        ids = head + prompt + completion + [eos]
        keep_from = len(head) + len(prompt)
        trained = np.arange(len(ids)) >= (0 if train_on == "all" else keep_from)
        encoded.append(Encoded(ids, trained, len(head), keep_from))
    return encoded


def check_row_format(row: dict, number: int, where: str, expected: list[str],
                     form: str) -> None:
    """A row without the columns of its file's format (a prompt/completion row in a chat
    file, or the reverse) is that row's one line, naming the keys found and expected."""
    if all(field not in row for field in expected):
        found = ", ".join(f"'{key}'" for key in row) or "none"
        raise DataError(f"{where} row {number} has keys {found}, not "
                        f"{' and '.join(repr(f) for f in expected)} like the file's {form} "
                        "rows: its format differs from the file's; give every row of a "
                        "file one format")


def text(row: dict, number: int, where: str, field: str, empty_ok: bool) -> str:
    """The row's string in `field`; anything else is its one line."""
    value = row.get(field)
    if not isinstance(value, str):
        what = "missing" if value is None else f"not a string but {type(value).__name__}"
        raise DataError(f"{where} row {number}: '{field}' is {what}; fix or remove the row")
    if not empty_ok and not value.strip():
        raise DataError(f"{where} row {number}: empty completion ('{field}'), nothing to "
                        "train on; fix or remove the row")
    return value


# ---------------------------------------------------------------- chat


def _check_chat_tokenizer(tokenizer) -> None:
    if not tokenizer.chat_template:
        raise DataError(f"tokenizer {_name(tokenizer)} has no chat template; use a tokenizer "
                        "with one, set data.tokenizer=..., or give prompt/completion columns")
    if not getattr(tokenizer, "is_fast", False):
        raise DataError(f"tokenizer {_name(tokenizer)} is not a fast tokenizer, which chat rows "
                        "need (token offsets map the assistant turns); use one with a "
                        "tokenizer.json")
    chat_tokens.check_template(tokenizer, "data.tokenizer")


def encode_chat(chunk, where: str, tokenizer, config: SFTDataConfig,
                train_on: str) -> list[Encoded]:
    """Each conversation rendered by the tokenizer's template and tokenized once, as
    apply_chat_template does; a token is trained when its characters overlap an assistant
    turn (train_on=assistant) or always (all)."""
    for number, row in chunk:
        check_row_format(row, number, where, [config.messages_field], "chat")
    rendered = [_render(row[config.messages_field], number, where, tokenizer, config)
                for number, row in chunk]
    texts = [text for text, _ in rendered]
    batch = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True,
                      verbose=False) if texts else {"input_ids": [], "offset_mapping": []}
    bos = tokenizer.bos_token_id
    encoded = []
    for ids, offsets, (text, spans), (number, row) in zip(
            batch["input_ids"], batch["offset_mapping"], rendered, chunk):
        hidden = chat_tokens.masked(tokenizer, row[config.messages_field])
        if hidden is not None:  # a special-token string in a message: kept as text
            try:
                ids, offsets = chat_tokens.encode_rendered(
                    tokenizer, text, _template(tokenizer, hidden, False, where, number))
            except DataError as error:
                raise DataError(f"{where} row {number}: {error}") from None
        offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
        in_span = [(offsets[:, 0] < end) & (offsets[:, 1] > start) for start, end in spans]
        if train_on == "assistant" and not any(mask.any() for mask in in_span):
            raise DataError(f"{where} row {number} has no assistant message, so nothing to "
                            "train on; fix or remove the row (or set data.train_on=all)")
        trained = np.logical_or.reduce(in_span) if in_span else np.zeros(len(ids), bool)
        if train_on == "all":
            trained = np.ones(len(ids), bool)
        last = np.flatnonzero(in_span[-1]) if in_span else []
        head = int(bool(ids) and ids[0] == bos)
        encoded.append(Encoded(ids, trained, head, int(last[0]) if len(last) else len(ids)))
    return encoded


def _render(messages, number: int, where: str, tokenizer,
            config: SFTDataConfig) -> tuple[str, list[tuple[int, int]]]:
    """The conversation's text and each assistant turn's characters: from the end of the
    conversation before it with the generation prompt to the end of the conversation
    through it. That needs a template that renders a conversation's start as it renders
    the whole."""
    check_messages(messages, number, where, config.messages_field)
    full = _template(tokenizer, messages, False, where, number)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        if i == 0:
            raise DataError(f"{where} row {number} opens with an assistant message, which "
                            "nothing prompts; start it with a system or user message")
        prompt = _template(tokenizer, messages[:i], True, where, number)
        through = _template(tokenizer, messages[:i + 1], False, where, number)
        if not (through.startswith(prompt) and full.startswith(through)):
            raise DataError(
                f"{where} row {number}: the chat template of tokenizer {_name(tokenizer)} does "
                f"not render the conversation through message {i + 1} as the start of the "
                "whole, so its assistant turns cannot be located; use a tokenizer whose "
                "template does, or prompt/completion columns"
            )
        spans.append((len(prompt), len(through)))
    return full, spans


def check_messages(messages, number: int, where: str, field: str) -> None:
    shape = ("; give each row a list of messages like "
             '[{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}]')
    if not isinstance(messages, list) or not messages:
        what = "an empty list" if messages == [] else f"a {type(messages).__name__}"
        raise DataError(f"{where} row {number}: '{field}' is {what}{shape}")
    for k, message in enumerate(messages, 1):
        if not isinstance(message, dict):
            raise DataError(f"{where} row {number}: message {k} is a "
                            f"{type(message).__name__}, not a {{role, content}} dict{shape}")
        for key in ("role", "content"):
            value = message.get(key)
            if not isinstance(value, str):
                what = "missing" if value is None else f"not a string but {type(value).__name__}"
                raise DataError(f"{where} row {number}: message {k}'s {key} is {what}{shape}")
        if message["role"] == "assistant" and not message["content"].strip():
            raise DataError(f"{where} row {number}: message {k} (assistant) has empty "
                            "content, nothing to train on; fix or remove the row")


def _template(tokenizer, messages: list[dict], prompt: bool, where: str, number: int) -> str:
    """The rendered text; a template's refusal (an unknown role) is the row's one line."""
    from jinja2 import TemplateError  # jinja2, with transformers

    try:
        return tokenizer.apply_chat_template(messages, tokenize=False,
                                             add_generation_prompt=prompt)
    except (TemplateError, TypeError, ValueError, KeyError) as error:
        raise DataError(f"{where} row {number}: the chat template of tokenizer "
                        f"{_name(tokenizer)} refuses it: {_first_line(error)}; fix the "
                        "row's messages or use another tokenizer") from None


# ---------------------------------------------------------------- seq_len


def _fit(encoded: Encoded, seq_len: int, truncation: str, where: str,
         number: int) -> tuple[list[Piece], bool] | None:
    """The example within seq_len and whether it was cut: as it is, None (dropped), or with
    its prompt's head cut after the BOS, which keeps the completion whole."""
    ids = encoded.ids
    if len(ids) <= seq_len:
        return [cut_prompt(encoded, 0)], False
    if truncation == "drop":
        return None
    needed = encoded.head + len(ids) - encoded.keep_from
    if needed > seq_len:
        raise DataError(f"{where} row {number}: its completion takes {needed:,} tokens (with "
                        f"BOS/EOS), more than seq_len {seq_len}; raise seq_len or use "
                        "data.truncation=drop")
    return [cut_prompt(encoded, len(ids) - seq_len)], True


def cut_prompt(encoded: Encoded, count: int) -> Piece:
    """The example's ids and mask without `count` tokens of its prompt's head, taken after
    the BOS so the example still opens as the model saw every other one open."""
    ids = np.asarray(encoded.ids, dtype=np.int32)
    kept = np.r_[0:encoded.head, encoded.head + count:len(ids)]
    return ids[kept], encoded.trained[kept]
