"""Data sources for every task: local txt/jsonl/json/parquet files or Hub datasets with
one-line errors, the shipped tokenizer (core/assets/tokenizer) and the embedded text corpus
(Python's help topics), and the seeded epoch order that makes a batch a pure function of its
index. What a task builds from them lives in zoo/data/.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import sys
from pathlib import Path
from pydoc_data.topics import topics

import numpy as np

from core.errors import UserError

BOS, EOS, PAD = "<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"
DEFAULT_TOKENIZER = Path(__file__).resolve().parent / "assets" / "tokenizer"
IGNORE_INDEX = -100  # labels the loss skips (Hugging Face / torch cross_entropy convention)
BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}


class DataError(UserError):
    """A data source, tokenizer or batch shape the pipeline cannot use."""


@dataclasses.dataclass
class Tally:
    """The documents a source held: how many were kept and how many skipped, per reason, so
    none vanishes unreported. A file of a type no reader takes (notes.csv in a folder of
    .txt) counts as one file and one document, skipped. A reason is the phrase after its
    count; "{s}" in it is the plural ending ("file{s} of unsupported type .csv")."""

    files: int = 0  # files seen; 0 for a Hub dataset
    kept: int = 0
    reasons: dict[str, int] = dataclasses.field(default_factory=dict)

    def skip(self, reason: str) -> None:
        self.reasons[reason] = self.reasons.get(reason, 0) + 1

    @property
    def skipped(self) -> int:
        return sum(self.reasons.values())

    def why(self) -> str:
        """e.g. "60 without field 'text', 40 whose 'text' is not a string but int"."""
        ranked = sorted(self.reasons.items(), key=lambda item: -item[1])
        return ", ".join(f"{n:,} {reason.replace('{s}', 's' * (n != 1))}" for reason, n in ranked)

    def check(self, source: str, limit: float) -> None:
        """Refuse a source that lost more than `limit` of its documents; otherwise say in
        one line on stderr what was skipped (nothing when nothing was)."""
        if not self.skipped:
            return
        total = self.kept + self.skipped
        if self.skipped > limit * total:
            raise DataError(
                f"data.source {source}: skipped {self.skipped:,} of {total:,} documents "
                f"({self.skipped / total:.0%}), more than data.max_skipped_share={limit}: "
                f"{self.why()}; fix the data (or data.text_field), or raise "
                "data.max_skipped_share"
            )
        files = f" in {self.files:,} file{'s' * (self.files != 1)}" if self.files else ""
        print(f"data: {total:,} documents{files}; skipped {self.skipped:,}: {self.why()}",
              file=sys.stderr)


# ---------------------------------------------------------------- tokenizer


def check_vocab(tokenizer, vocab_size: int, weights_from: str | None = None) -> None:
    """Token ids must fit the model's embedding table; pretrained weights (`weights_from`)
    fix its size, so then only their own tokenizer can."""
    if tokenizer is not None and len(tokenizer) > vocab_size and weights_from:
        raise DataError(
            f"tokenizer has {len(tokenizer)} tokens but the weights of {weights_from} have "
            f"{vocab_size}; train with the tokenizer they were trained with (data.tokenizer)")
    if tokenizer is not None and len(tokenizer) > vocab_size:
        raise DataError(
            f"tokenizer has {len(tokenizer)} tokens but the model's vocab_size is "
            f"{vocab_size}; set model.vocab_size={len(tokenizer)} or another tokenizer"
        )


def load_tokenizer(name: str):
    """Name "default" -> the shipped tokenizer; an existing dir -> local; else a Hub name."""
    from transformers import AutoTokenizer  # transformers

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
        from huggingface_hub import constants  # huggingface_hub
        from huggingface_hub.utils import get_session  # huggingface_hub

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
    return [topics[key] for key in sorted(topics)]


def load_table(source: str, split: str = "train", subset: str | None = None):
    """Local txt/jsonl/json/parquet files (a file, folder or glob) or a Hub dataset, as a
    `datasets.Dataset`, with one-line errors for everything a user can get wrong."""
    files = local_files(source)
    if files is not None:
        return local_dataset(files, source, split)
    return hub_dataset(source, subset, split)


def local_files(source: str, tally: Tally | None = None) -> list[str] | None:
    """The data files `source` names, or None if it is not a local path (a Hub name). A
    folder's files of other types are left out, counted in `tally` when given."""
    if glob.has_magic(source):
        files = sorted(f for f in glob.glob(os.path.expanduser(source)) if os.path.isfile(f))
        if not files:
            raise DataError(f"data.source glob {source} matches no files")
    elif os.path.isdir(os.path.expanduser(source)):
        root = os.path.expanduser(source)
        found = [path for path in Path(root).rglob("*")
                 if path.is_file() and not _hidden(path, root)]
        files = sorted(str(path) for path in found if path.suffix.lower() in BUILDERS)
        if not files:
            raise DataError(f"data.source folder {source} has no {'/'.join(BUILDERS)} files")
        for path in found if tally is not None else ():
            if path.suffix.lower() not in BUILDERS:
                tally.files += 1
                tally.skip(f"file{{s}} of unsupported type {path.suffix or '(no extension)'}")
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
    if tally is not None:
        tally.files += len(files)
    return files


def local_dataset(files: list[str], source: str, split: str, streaming: bool = False):
    import datasets  # datasets

    builder = BUILDERS[Path(files[0]).suffix.lower()]
    options = {"sample_by": "document"} if builder == "text" else {}  # a .txt file = 1 doc
    # Its progress bar shows on big sources only, as the tokenizing bar: on small ones a
    # refusal of the data stays one line.
    small = sum(map(os.path.getsize, files)) < 2**26
    quiet = small and not datasets.are_progress_bars_disabled()
    if quiet:
        datasets.disable_progress_bars()
    try:
        return datasets.load_dataset(builder, data_files={"train": files}, split=split,
                                     streaming=streaming, **options)
    except ValueError as error:  # e.g. an unknown split name
        raise DataError(f"data.source {source}: {_first_line(error)}") from None
    except datasets.exceptions.DatasetGenerationError as error:
        cause = error.__cause__ or error
        raise DataError(f"could not read {source}: {_first_line(cause)}") from None
    finally:
        if quiet:
            datasets.enable_progress_bars()


def _hidden(path: Path, root: str) -> bool:
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def hub_dataset(source: str, subset: str | None, split: str, streaming: bool = False):
    import datasets  # datasets
    from huggingface_hub import constants  # huggingface_hub

    unreachable = DataError(
        f"Hub dataset '{source}' could not be reached (offline?); use a local "
        "file/folder, data.source=default, or HF_HUB_OFFLINE=1 to read a cached copy"
    )
    if not constants.HF_HUB_OFFLINE and not hub_reachable():
        raise unreachable  # rather than minutes of retries inside load_dataset
    try:
        return datasets.load_dataset(source, subset, split=split, streaming=streaming)
    except Exception as error:  # hub failures come in many classes
        if isinstance(error, datasets.exceptions.DatasetNotFoundError):
            raise DataError(
                f"data.source '{source}' is neither a local path nor a Hub dataset "
                "(or it is gated: set HF_TOKEN)"
            ) from None
        if _is_connection_error(error):
            raise unreachable from None
        raise DataError(f"could not load Hub dataset '{source}': {_first_line(error)}") from None


# ---------------------------------------------------------------- batches


def host_rows(process_index: int, local_batch_size: int) -> np.ndarray:
    """The rows of every global batch that this host loads: [k*local, (k+1)*local)."""
    first = process_index * local_batch_size
    return np.arange(first, first + local_batch_size)


def check_seed(seed: int) -> None:
    """For a data config: numpy seeds the shuffle and takes no negative seed."""
    if seed < 0:
        raise ValueError(f"data.shuffle_seed must be >= 0, not {seed}")


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
