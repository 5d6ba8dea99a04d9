"""The LM data pipeline: documents -> tokens -> packed fixed-length rows -> host batches.

    batches = TokenBatches(cfg.data, load_tokenizer(cfg.data.tokenizer), seq_len=2048,
                           global_batch_size=256, process_index=i, process_count=n)
    batches.start = step  # resume
    for batch in batches: ...  # {"input_ids", "labels"}: LongTensor[256 // n, 2048]

Every document becomes `BOS? tokens EOS`; documents are concatenated and cut into rows of
exactly `seq_len` tokens (rows cross document boundaries; EOS marks them). The final partial
row is kept, padded with the pad id and its labels masked with -100, so no text is lost and a
tiny corpus still yields a row. Rows are shuffled per epoch (seed `shuffle_seed + epoch`) and
global batch `i` is rows `i*B .. (i+1)*B` of the endless epoch-after-epoch order, so a batch is
a pure function of its index: resuming is setting `start`, and host k of n takes its slice of
the same global batch. The whole corpus is tokenized once, in memory, on every host.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from zoo.core.errors import UserError
from zoo.core.inputs import host_batch_size

BOS, EOS, PAD = "<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"
DEFAULT_TOKENIZER = Path(__file__).resolve().parent / "assets" / "tokenizer"
IGNORE_INDEX = -100  # labels the loss skips (Hugging Face / torch cross_entropy convention)
BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}


class DataError(UserError):
    """A data source, tokenizer or batch shape the pipeline cannot use."""


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


# ---------------------------------------------------------------- tokenizer


def check_vocab(tokenizer, vocab_size: int) -> None:
    """Token ids must fit the model's embedding table."""
    if tokenizer is not None and len(tokenizer) > vocab_size:
        raise DataError(
            f"tokenizer has {len(tokenizer)} tokens but the model's vocab_size is "
            f"{vocab_size}; set model.vocab_size={len(tokenizer)} or another tokenizer"
        )


def load_tokenizer(name: str):
    """Name "default" -> the shipped tokenizer; an existing dir -> local; else a Hub name."""
    from transformers import AutoTokenizer

    local = DEFAULT_TOKENIZER if name == "default" else Path(name).expanduser()
    if local.is_dir():
        try:
            return AutoTokenizer.from_pretrained(str(local))
        except (OSError, ValueError) as error:
            raise DataError(
                f"tokenizer dir {local} does not hold a Hugging Face tokenizer: "
                f"{_first_line(error)}"
            ) from None
    if local.exists() or _looks_like_path(name):
        raise DataError(f"tokenizer dir {name} does not exist (or is not a folder)")
    # Unreachable Hub: only the local HF cache can help, and it answers at once (no retries).
    options = {} if hub_reachable() else {"local_files_only": True}
    try:
        return AutoTokenizer.from_pretrained(name, **options)
    except Exception as error:  # hub failures come in many classes
        if options or _is_connection_error(error):
            raise DataError(
                f"tokenizer '{name}' could not be reached on the Hugging Face Hub (offline?) "
                "and is not in the local cache; use a local tokenizer dir or "
                "data.tokenizer=default"
            ) from None
        raise DataError(f"could not load tokenizer '{name}': {_first_line(error)}") from None


def hub_reachable(timeout: float = 5.0) -> bool:
    """One quick request to the Hub (no retries), so offline runs fail in seconds, not minutes.

    False in offline mode (HF_HUB_OFFLINE=1) too: the libraries then use their caches only.
    """
    try:
        from huggingface_hub import constants
        from huggingface_hub.utils import get_session

        if constants.HF_HUB_OFFLINE:
            return False
        get_session().head(constants.ENDPOINT, timeout=timeout)
        return True
    except Exception:  # any failure means "not reachable"
        return False


def _looks_like_path(name: str) -> bool:
    return name.startswith(("/", ".", "~")) or Path(name).suffix.lower() in BUILDERS


def _is_connection_error(error: BaseException | None) -> bool:
    for _ in range(10):  # the error and its causes
        if error is None:
            return False
        name = type(error).__name__
        text = str(error).lower()
        if (
            isinstance(error, ConnectionError | TimeoutError)
            or name in ("OfflineModeIsEnabled", "LocalEntryNotFoundError", "ConnectError")
            or "connect" in text
            or "offline" in text
        ):
            return True
        error = error.__cause__ or error.__context__
    return False


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


# ---------------------------------------------------------------- documents


def default_documents() -> list[str]:
    """The embedded corpus: one document per Python help topic, in sorted-key order."""
    from pydoc_data.topics import topics

    return [topics[key] for key in sorted(topics)]


def load_documents(config: DataConfig) -> tuple[list[str], str]:
    """(texts, where they came from, e.g. "default corpus (Python 3.11 help topics") for a
    non-synthetic source; describe() completes the parenthesis with the counts."""
    source = config.source
    if source == "default":
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        return default_documents(), f"default corpus (Python {version} help topics"
    files = _local_files(source)
    if files is not None:
        dataset = _local_dataset(files, source, config.split)
        field = "text" if BUILDERS[Path(files[0]).suffix.lower()] == "text" else config.text_field
        return _texts(dataset, field, source), f"{source} ({len(files)} files"
    subset = f"subset {config.subset}, " if config.subset else ""
    dataset = _hub_dataset(source, config.subset, config.split)
    label = f"Hub dataset {source} ({subset}split {config.split}"
    return _texts(dataset, config.text_field, source), label


def load_table(source: str, split: str = "train", subset: str | None = None):
    """Local txt/jsonl/json/parquet files (a file, folder or glob) or a Hub dataset, as a
    `datasets.Dataset`, with one-line errors for everything a user can get wrong."""
    files = _local_files(source)
    if files is not None:
        return _local_dataset(files, source, split)
    return _hub_dataset(source, subset, split)


def _local_files(source: str) -> list[str] | None:
    """The data files `source` names, or None if it is not a local path (a Hub name)."""
    if glob.has_magic(source):
        files = sorted(f for f in glob.glob(os.path.expanduser(source)) if os.path.isfile(f))
        if not files:
            raise DataError(f"data.source glob {source} matches no files")
    elif os.path.isdir(os.path.expanduser(source)):
        root = os.path.expanduser(source)
        files = sorted(
            str(path)
            for path in Path(root).rglob("*")
            if path.suffix.lower() in BUILDERS and path.is_file() and not _hidden(path, root)
        )
        if not files:
            raise DataError(f"data.source folder {source} has no {'/'.join(BUILDERS)} files")
    elif os.path.isfile(os.path.expanduser(source)):
        files = [os.path.expanduser(source)]
    elif _looks_like_path(source):
        raise DataError(f"data.source {source} does not exist")
    else:
        return None
    kinds = sorted({Path(f).suffix.lower() for f in files})
    unknown = [k for k in kinds if k not in BUILDERS]
    if unknown:
        raise DataError(
            f"data.source {source}: cannot read {unknown[0] or 'extension-less'} files; "
            f"use {', '.join(BUILDERS)}"
        )
    if len({BUILDERS[k] for k in kinds}) > 1:
        raise DataError(f"data.source {source} mixes {', '.join(kinds)} files; use one kind")
    return files


def _local_dataset(files: list[str], source: str, split: str):
    import datasets

    builder = BUILDERS[Path(files[0]).suffix.lower()]
    options = {"sample_by": "document"} if builder == "text" else {}  # a .txt file = 1 doc
    try:
        return datasets.load_dataset(builder, data_files={"train": files}, split=split, **options)
    except ValueError as error:  # e.g. an unknown split name
        raise DataError(f"data.source {source}: {_first_line(error)}") from None
    except datasets.exceptions.DatasetGenerationError as error:
        cause = error.__cause__ or error
        raise DataError(f"could not read {source}: {_first_line(cause)}") from None


def _hidden(path: Path, root: str) -> bool:
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def _hub_dataset(source: str, subset: str | None, split: str):
    import datasets
    from huggingface_hub import constants

    unreachable = DataError(
        f"Hub dataset '{source}' could not be reached (offline?); use a local "
        "file/folder, data.source=default, or HF_HUB_OFFLINE=1 to read a cached copy"
    )
    if not constants.HF_HUB_OFFLINE and not hub_reachable():
        raise unreachable  # rather than minutes of retries inside load_dataset
    try:
        return datasets.load_dataset(source, subset, split=split)
    except Exception as error:  # hub failures come in many classes
        if isinstance(error, datasets.exceptions.DatasetNotFoundError):
            raise DataError(
                f"data.source '{source}' is neither a local path nor a Hub dataset "
                "(or it is gated: set HF_TOKEN)"
            ) from None
        if _is_connection_error(error):
            raise unreachable from None
        raise DataError(f"could not load Hub dataset '{source}': {_first_line(error)}") from None


def _texts(dataset, field: str, source: str) -> list[str]:
    if field not in dataset.column_names:
        raise DataError(
            f"data.source {source} has no column '{field}' (data.text_field); "
            f"columns: {', '.join(dataset.column_names)}"
        )
    return [text for text in dataset[field] if isinstance(text, str) and text]


# ---------------------------------------------------------------- tokens


@dataclasses.dataclass(frozen=True)
class Corpus:
    """A source tokenized into one stream: `BOS? doc EOS BOS? doc EOS ...`."""

    tokens: np.ndarray  # int32 [num_tokens]
    num_documents: int
    label: str  # see load_documents


_CORPORA: dict[tuple, Corpus] = {}  # tokenize each (source, tokenizer) once per process


def tokenize_corpus(config: DataConfig, tokenizer) -> Corpus:
    """The tokenized source, cached in memory (up to 4) keyed by source, files and tokenizer."""
    if tokenizer is None:
        raise DataError(f"data.source {config.source} needs a tokenizer (got None)")
    files = _local_files(config.source) if config.source != "default" else None
    key = (
        (config.source, config.text_field, config.split, config.subset),
        tuple((f, os.stat(f).st_mtime_ns, os.stat(f).st_size) for f in files or ()),
        type(tokenizer).__name__,
        getattr(tokenizer, "name_or_path", None),
        len(tokenizer),
    )
    if key not in _CORPORA:
        if len(_CORPORA) >= 4:
            _CORPORA.pop(next(iter(_CORPORA)))
        _CORPORA[key] = _tokenize(config, tokenizer)
    return _CORPORA[key]


def _tokenize(config: DataConfig, tokenizer) -> Corpus:
    eos = tokenizer.eos_token_id
    if eos is None:
        raise DataError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', '')} has no EOS token, which "
            "packing needs to mark document boundaries"
        )
    bos = tokenizer.bos_token_id
    prefix = [bos] if bos is not None and bos != eos else []  # GPT-2 style: EOS alone
    texts, label = load_documents(config)
    if not texts:
        raise DataError(f"data.source {config.source} has no non-empty documents")
    pieces = []
    for start in range(0, len(texts), 1024):
        # split_special_tokens: a literal "<|end_of_text|>" inside a document is just text.
        encoded = tokenizer(
            texts[start : start + 1024],
            add_special_tokens=False,
            split_special_tokens=True,
            verbose=False,
        )["input_ids"]
        pieces += [np.asarray(prefix + ids + [eos], dtype=np.int32) for ids in encoded]
    return Corpus(np.concatenate(pieces), len(texts), label)


# ---------------------------------------------------------------- batches


def host_rows(process_index: int, local_batch_size: int) -> np.ndarray:
    """The rows of every global batch that this host loads: [k*local, (k+1)*local)."""
    first = process_index * local_batch_size
    return np.arange(first, first + local_batch_size)


class EpochOrder:
    """An endless order over `count` items, epoch after epoch, each epoch a permutation
    seeded by `seed + epoch`: position p -> item. Batches built from positions are a pure
    function of their index, which is what makes resuming exact."""

    def __init__(self, count: int, seed: int):
        self.count, self.seed = count, seed
        self._perms: dict[int, np.ndarray] = {}

    def items(self, positions: np.ndarray) -> np.ndarray:
        epochs, within = np.divmod(positions, self.count)
        picked = np.empty_like(within)
        for epoch in np.unique(epochs):
            mask = epochs == epoch
            picked[mask] = self._permutation(int(epoch))[within[mask]]
        return picked

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch not in self._perms:
            if len(self._perms) >= 4:
                self._perms.pop(next(iter(self._perms)))
            self._perms[epoch] = np.random.default_rng(self.seed + epoch).permutation(self.count)
        return self._perms[epoch]



class TokenBatches:
    """Deterministic, resumable stream of fixed-shape host batches.

    `batch(i)` is global batch `i` restricted to this host's rows [k*local, (k+1)*local);
    iterating yields `batch(start), batch(start + 1), ...` forever. Iteration does not move
    `start`: record the step count yourself (a prefetching loader runs ahead of training).
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
        if self.synthetic:
            vocab_size = vocab_size or (len(tokenizer) if tokenizer is not None else None)
            if not vocab_size:
                raise DataError("data.source=synthetic needs a vocab size (or a tokenizer)")
            self.vocab_size = vocab_size
            return
        self.corpus = tokenize_corpus(config, tokenizer)
        tokens = self.corpus.tokens
        if vocab_size is not None and int(tokens.max()) >= vocab_size:
            raise DataError(
                f"tokenizer produces id {int(tokens.max())} but the model's vocab size is "
                f"{vocab_size}; use a tokenizer that fits or a larger vocab"
            )
        self.vocab_size = vocab_size or len(tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id = tokenizer.eos_token_id if pad is None else pad
        self._count = -(-len(tokens) // seq_len)  # rows; row r = tokens[r*seq_len:][:seq_len]
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
        import torch

        if index < 0:
            raise ValueError(f"batch index must be >= 0, got {index}")
        within = host_rows(self.process_index, self.local_batch_size)
        if self.synthetic:
            input_ids = torch.from_numpy(np.stack([self._random_row(index, r) for r in within]))
            return {"input_ids": input_ids, "labels": input_ids.clone()}
        picked = self._order.items(index * self.global_batch_size + within)
        tokens = self.corpus.tokens
        offsets = picked[:, None] * self.seq_len + np.arange(self.seq_len)
        padding = offsets >= len(tokens)  # only in the last row
        ids = np.where(padding, self.pad_id, tokens[np.minimum(offsets, len(tokens) - 1)])
        labels = np.where(padding, IGNORE_INDEX, ids)
        return {
            "input_ids": torch.from_numpy(ids.astype(np.int64)),
            "labels": torch.from_numpy(labels.astype(np.int64)),
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
