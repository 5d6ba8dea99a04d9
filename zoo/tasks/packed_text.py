"""Packed text for causal LMs: documents -> tokens -> packed fixed-length rows -> host batches.

    batches = TokenBatches(cfg.data, load_tokenizer(cfg.data.tokenizer), seq_len=2048,
                           global_batch_size=256, process_index=i, process_count=n)
    batches.start = step  # resume
    for batch in batches: ...  # {"input_ids", "labels"}: LongTensor[256 // n, 2048]

Every document becomes `BOS? tokens EOS`; documents are concatenated and cut into rows of
exactly `seq_len` tokens (rows cross document boundaries; EOS marks them; with
`data.document_mask` each row also carries segment ids and positions that keep its
documents apart: zoo/tasks/packing.py). The final partial
row is kept, padded with the pad id and its labels masked with -100, so no text is lost and a
tiny corpus still yields a row. Rows are shuffled per epoch (seed `shuffle_seed + epoch`) and
global batch `i` is rows `i*B .. (i+1)*B` of the endless epoch-after-epoch order, so a batch is
a pure function of its index: resuming is setting `start`, and host k of n takes its slice of
the same global batch. A source is tokenized once into a memory-mapped cache
(zoo/tasks/token_cache.py): later starts open it at once and read only their rows' pages.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from core import data
from core.data import (
    BUILDERS,
    IGNORE_INDEX,
    DataError,
    EpochOrder,
    Tally,
    check_seed,
    host_rows,
    load_tokenizer,
)
from core.inputs import host_batch_size
from core.run_config import setting
from zoo.tasks import token_cache
from zoo.tasks.packing import stream_segments


@dataclasses.dataclass
class DataConfig:
    # "default": Python's help topics (embedded, no network); "synthetic": random tokens;
    # a local .txt/.jsonl/.json/.parquet file, folder or glob; otherwise a Hub dataset name.
    source: str = "default"
    text_field: str = "text"  # column holding the text (jsonl/json/parquet/hub)
    split: str = "train"  # local files are the "train" split; slices like train[:90%] work
    subset: str | None = None  # Hub dataset config name
    tokenizer: str = "default"  # "default" = core/assets/tokenizer, a local dir or a Hub name
    shuffle_seed: int = 0
    # tokenized sources; default $ZOO_CACHE or ~/.cache/zoo
    cache_dir: str | None = setting(None, resumable=True)
    # read the source as a stream: documents are tokenized as they arrive and never held all
    # at once (a Hub dataset is not downloaded whole first)
    streaming: bool = False
    max_documents: int | None = None  # stop after this many documents (a stream may not end)
    # refuse a source when more than this share of its documents is skipped (no text field,
    # text that is not a string or is empty, a file of an unsupported type in a folder);
    # below it the skipped counts are reported in one line
    max_skipped_share: float = 0.1
    # keep the documents of a row apart: attention within each document only, positions
    # from 0 in each, and no token learns to predict the next document's first
    document_mask: bool = False

    def __post_init__(self):
        check_seed(self.shuffle_seed)
        if self.max_documents is not None and self.max_documents < 1:
            raise ValueError(f"data.max_documents must be at least 1, got {self.max_documents}")
        if not 0 <= self.max_skipped_share <= 1:  # NaN fails too
            raise ValueError(f"data.max_skipped_share must be in [0, 1], "
                             f"not {self.max_skipped_share}")
        if self.document_mask and self.source == "synthetic":
            raise ValueError("data.document_mask keeps documents apart, and "
                             "data.source=synthetic has none; use a text source")


def load_documents(config: DataConfig, tally: Tally) -> tuple[Iterable[str], str]:
    """(texts, where they came from, e.g. "default corpus (Python 3.11 help topics") for a
    non-synthetic source; describe() completes the parenthesis with the counts. `tally`
    counts the documents kept and skipped as they are read (with `streaming` the texts are
    an iterator that reads as it goes)."""
    source = config.source
    if source == "default":
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        return data.default_documents(), f"default corpus (Python {version} help topics"
    files = data.local_files(source, tally)
    if files is not None:
        dataset = data.local_dataset(files, source, config.split, config.streaming)
        field = "text" if BUILDERS[Path(files[0]).suffix.lower()] == "text" else config.text_field
        return _texts(dataset, field, source, tally), f"{source} ({len(files)} files"
    subset = f"subset {config.subset}, " if config.subset else ""
    dataset = data.hub_dataset(source, config.subset, config.split, config.streaming)
    label = f"Hub dataset {source} ({subset}split {config.split}"
    return _texts(dataset, config.text_field, source, tally), label


def _texts(dataset, field: str, source: str, tally: Tally) -> Iterable[str]:
    columns = dataset.column_names  # None for a stream that does not declare its features
    if columns is not None and field not in columns:
        raise DataError(
            f"data.source {source} has no column '{field}' (data.text_field); "
            f"columns: {', '.join(columns)}"
        )
    if not hasattr(dataset, "__len__"):  # streaming: one example at a time
        return (text for example in dataset if _kept(text := example.get(field), field, tally))
    return [text for text in dataset[field] if _kept(text, field, tally)]


def _kept(text, field: str, tally: Tally) -> bool:
    """Whether `text` is a document to train on, counted as kept or skipped and why."""
    if isinstance(text, str) and text:
        tally.kept += 1
        return True
    if text is None:
        tally.skip(f"without field '{field}'")
    elif isinstance(text, str):
        tally.skip(f"whose '{field}' is empty")
    else:
        tally.skip(f"whose '{field}' is not a string but {type(text).__name__}")
    return False


# ---------------------------------------------------------------- tokens


@dataclasses.dataclass(frozen=True)
class Corpus:
    """A source tokenized into one stream: `BOS? doc EOS BOS? doc EOS ...`."""

    tokens: np.ndarray  # int32 [num_tokens], memory-mapped from the token cache
    num_documents: int
    label: str  # see load_documents
    max_token: int
    tally: Tally  # the source's documents kept and skipped, and why


_CORPORA: dict[str, Corpus] = {}  # open each cached source once per process


def tokenize_corpus(config: DataConfig, tokenizer) -> Corpus:
    """The tokenized source: from the disk cache when it holds the same source files and
    tokenizer, else tokenized now and cached. A Hub source is keyed by name, subset and split.
    Its skipped documents are checked against data.max_skipped_share (and reported) when it
    is first opened in this process."""
    if tokenizer is None:
        raise DataError(f"data.source {config.source} needs a tokenizer (got None)")
    files = data.local_files(config.source) if config.source != "default" else None
    key = token_cache.cache_key({
        "source": [config.source, config.text_field, config.split, config.subset,
                   config.max_documents],
        "files": [(f, os.stat(f).st_mtime_ns, os.stat(f).st_size) for f in files or ()],
        "python": sys.version_info[:2] if config.source == "default" else None,
        "tokenizer": tokenizer_fingerprint(tokenizer),
    })
    if key not in _CORPORA:
        corpus = _cached_corpus(config, tokenizer, key)
        corpus.tally.check(config.source, config.max_skipped_share)
        if len(_CORPORA) >= 4:
            _CORPORA.pop(next(iter(_CORPORA)))
        _CORPORA[key] = corpus
    return _CORPORA[key]


def tokenizer_fingerprint(tokenizer) -> list:
    """What token ids depend on: the whole vocabulary and merges, and the special tokens."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    vocab = backend.to_str() if backend is not None else repr(sorted(tokenizer.get_vocab().items()))
    return [type(tokenizer).__name__, hashlib.sha256(vocab.encode()).hexdigest(),
            tokenizer.bos_token_id, tokenizer.eos_token_id]


def _cached_corpus(config: DataConfig, tokenizer, key: str) -> Corpus:
    root = token_cache.cache_root(config.cache_dir)
    cached = token_cache.load(root, key)
    if cached is None or "tally" not in cached[1]:  # an entry from before tallies were kept
        corpus = _tokenize(config, tokenizer)
        meta = {"num_documents": corpus.num_documents, "label": corpus.label,
                "max_token": corpus.max_token, "tally": dataclasses.asdict(corpus.tally)}
        token_cache.store(root, key, corpus.tokens, meta)
        cached = token_cache.load(root, key)
    tokens, meta = cached
    return Corpus(tokens, meta["num_documents"], meta["label"], meta["max_token"],
                  Tally(**meta["tally"]))


def _tokenize(config: DataConfig, tokenizer) -> Corpus:
    eos = tokenizer.eos_token_id
    if eos is None:
        raise DataError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', '')} has no EOS token, which "
            "packing needs to mark document boundaries"
        )
    bos = tokenizer.bos_token_id
    prefix = [bos] if bos is not None and bos != eos else []  # GPT-2 style: EOS alone
    tally = Tally()
    texts, label = load_documents(config, tally)
    total = len(texts) if hasattr(texts, "__len__") else None
    if total is not None and config.max_documents is not None:
        total = min(total, config.max_documents)
    texts = itertools.islice(texts, config.max_documents)
    pieces, count = [], 0
    # A fast tokenizer encodes each chunk on all cores (Rust threads); the bar shows on big
    # or streamed sources only, so the quick start stays one line.
    with tqdm(total=total, desc="tokenizing", unit="doc", leave=False,
              disable=total is not None and total < 20_000) as bar:
        while chunk := list(itertools.islice(texts, 1024)):
            # split_special_tokens: a literal "<|end_of_text|>" inside a document is just text.
            encoded = tokenizer(
                chunk, add_special_tokens=False, split_special_tokens=True, verbose=False,
            )["input_ids"]
            pieces += [np.asarray(prefix + ids + [eos], dtype=np.int32) for ids in encoded]
            count += len(chunk)
            bar.update(len(chunk))
    if not count:
        skipped = f": skipped {tally.why()}" if tally.skipped else ""
        raise DataError(f"data.source {config.source} has no non-empty documents{skipped}")
    tokens = np.concatenate(pieces)
    return Corpus(tokens, count, label, int(tokens.max()), tally)


class TokenBatches:
    """Deterministic, resumable stream of fixed-shape host batches.

    `batch(i)` is global batch `i` restricted to this host's rows [k*local, (k+1)*local);
    iterating yields `batch(start), batch(start + 1), ...` forever. Iteration does not move
    `start`: record the step count yourself (a prefetching loader runs ahead of training).

    `held_out` rows at the end of the stream are never trained on: `validation_batches()`
    gives them, in the same fixed shape, the rows past the end masked out of the loss.
    """

    def __init__(
        self,
        config: DataConfig,
        tokenizer,
        seq_len: int,
        global_batch_size: int,
        process_index: int = 0,
        process_count: int = 1,
        vocab_size: int | None = None,
        held_out: int = 0,
    ):
        """`vocab_size` is the model's: synthetic ids are drawn below it, real ids must fit."""
        if seq_len < 1 or global_batch_size < 1:
            raise DataError(
                f"seq_len ({seq_len}) and global batch size ({global_batch_size}) must be >= 1"
            )
        self.local_batch_size = host_batch_size(global_batch_size, process_count)
        if not 0 <= process_index < process_count:
            raise DataError(f"process index {process_index} is not in [0, {process_count})")
        self.config = config
        self.seq_len = seq_len
        self.global_batch_size = global_batch_size
        self.process_index = process_index
        self.process_count = process_count
        self.start = 0
        self.synthetic = config.source == "synthetic"
        self.held_out = held_out
        if self.synthetic:
            vocab_size = vocab_size or (len(tokenizer) if tokenizer is not None else None)
            if not vocab_size:
                raise DataError("data.source=synthetic needs a vocab size (or a tokenizer)")
            self.vocab_size = vocab_size
            return
        self.corpus = tokenize_corpus(config, tokenizer)
        tokens = self.corpus.tokens
        if vocab_size is not None and self.corpus.max_token >= vocab_size:
            raise DataError(
                f"tokenizer produces id {self.corpus.max_token} but the model's vocab size is "
                f"{vocab_size}; use a tokenizer that fits or a larger vocab"
            )
        self.vocab_size = vocab_size or len(tokenizer)
        pad = tokenizer.pad_token_id
        self.eos_id = tokenizer.eos_token_id
        self.pad_id = self.eos_id if pad is None else pad
        rows = -(-len(tokens) // seq_len)  # row r = tokens[r*seq_len:][:seq_len]
        if held_out and held_out >= rows:
            raise DataError(f"the corpus has {rows} rows of {seq_len} tokens, too few to hold "
                            f"out {held_out} for validation; lower eval_rows")
        self._count = rows - held_out  # the training rows
        self._order = EpochOrder(self._count, config.shuffle_seed)

    # ---- sizes
    @property
    def num_documents(self) -> int | None:
        return None if self.synthetic else self.corpus.num_documents

    @property
    def num_sequences(self) -> int | None:
        """Rows in one epoch (the last one may be partly padding); None if synthetic."""
        return None if self.synthetic else self._count

    @property
    def tokens_per_epoch(self) -> int | None:
        """Real (non-pad) tokens in one epoch, BOS/EOS included; None if synthetic."""
        return None if self.synthetic else len(self.corpus.tokens)

    @property
    def batches_per_epoch(self) -> float | None:
        return None if self.synthetic else self.num_sequences / self.global_batch_size

    # ---- batches
    def batch(self, index: int) -> dict:
        """Global batch number `index` -> this host's rows, as LongTensors [local, seq_len]."""
        if index < 0:
            raise ValueError(f"batch index must be >= 0, got {index}")
        within = host_rows(self.process_index, self.local_batch_size)
        if self.synthetic:
            input_ids = torch.from_numpy(np.stack([self._random_row(index, r) for r in within]))
            return {"input_ids": input_ids, "labels": input_ids.clone()}
        return self._rows(self._order.items(index * self.global_batch_size + within))

    def validation_batches(self) -> Iterator[dict]:
        """This host's share of the held-out rows, a global batch at a time."""
        within = host_rows(self.process_index, self.local_batch_size)
        for first in range(0, self.held_out, self.global_batch_size):
            position = first + within
            if self.synthetic:  # seeded apart from every training batch
                ids = np.stack([self._random_row(2**40 + p, 0) for p in position])
                labels = np.where(position[:, None] < self.held_out, ids, IGNORE_INDEX)
                yield {"input_ids": torch.from_numpy(ids),
                       "labels": torch.from_numpy(labels)}
                continue
            rows = np.where(position < self.held_out, self._count + position, -1)
            yield self._rows(rows)

    def _rows(self, picked: np.ndarray) -> dict:
        """Rows `picked` of the stream (-1: a row of padding) as input ids and labels."""
        tokens = self.corpus.tokens
        offsets = picked[:, None] * self.seq_len + np.arange(self.seq_len)
        padding = (offsets >= len(tokens)) | (picked[:, None] < 0)  # the stream's end
        ids = np.where(padding, self.pad_id, tokens[np.minimum(offsets, len(tokens) - 1)])
        labels = np.where(padding, IGNORE_INDEX, ids)
        batch = {}
        if self.config.document_mask:  # a document starts after each EOS of the stream
            after_eos = tokens[np.clip(offsets - 1, 0, len(tokens) - 1)] == self.eos_id
            starts = after_eos & (offsets > 0) & ~padding
            labels = np.where(starts, IGNORE_INDEX, labels)
            batch = stream_segments(ids, starts, padding)
        return {
            "input_ids": torch.from_numpy(ids.astype(np.int64)),
            "labels": torch.from_numpy(labels.astype(np.int64)),
            **batch,
        }

    def _random_row(self, index: int, row: int) -> np.ndarray:
        # Seeded per (seed, batch, row) so a row is the same whatever the host count.
        rng = np.random.default_rng([self.config.shuffle_seed, index, int(row)])
        return rng.integers(0, self.vocab_size, self.seq_len, dtype=np.int64)

    def __iter__(self) -> Iterator[dict]:
        index = self.start
        while True:
            yield self.batch(index)
            index += 1


def describe(config: DataConfig, batches: TokenBatches | None = None) -> str:
    """One line for logs, e.g. "default corpus (Python 3.11 help topics, 79 docs, 112k tokens)".

    Without `batches` it tokenizes with `config.tokenizer` (cached, so a later TokenBatches
    over the same source and tokenizer does not tokenize again).
    """
    if config.source == "synthetic":
        vocab = f"vocab {batches.vocab_size}, " if batches is not None else ""
        return f"synthetic random tokens ({vocab}seed {config.shuffle_seed})"
    if batches is not None:
        corpus = batches.corpus
    else:
        corpus = tokenize_corpus(config, load_tokenizer(config.tokenizer))
    return f"{corpus.label}, {corpus.num_documents:,} docs, {_count(len(corpus.tokens))} tokens)"


def _count(n: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(n)
