"""What every text data config shares (`data.*` of pretraining, SFT and DPO): where the rows
come from, the tokenizer, the shuffle, the token cache, and how much of a source may be
skipped. Each kind's config adds its own fields and says what its `default` source is."""

from __future__ import annotations

import dataclasses

from core.data import check_seed
from core.run_config import setting


@dataclasses.dataclass
class SourceConfig:
    # "default": the kind's own shipped data; a local .jsonl/.json/.parquet file, folder or
    # glob (pretraining reads .txt too); otherwise a Hub dataset name
    source: str = "default"
    split: str = "train"  # local files are the "train" split; slices like train[:90%] work
    subset: str | None = None  # Hub dataset config name
    tokenizer: str = "default"  # "default" = core/assets/tokenizer, a local dir or a Hub name
    shuffle_seed: int = 0
    # tokenized sources; default $ZOO_CACHE or ~/.cache/zoo
    cache_dir: str | None = setting(None, resumable=True)
    # refuse a source when more than this share of its rows is skipped (pretraining: a
    # document with no usable text; SFT and DPO: a row too long for seq_len); below it the
    # skipped counts are reported in one line
    max_skipped_share: float = 0.1

    def __post_init__(self):
        check_seed(self.shuffle_seed)
        if not 0 <= self.max_skipped_share <= 1:  # NaN fails too
            raise ValueError(f"data.max_skipped_share must be in [0, 1], "
                             f"not {self.max_skipped_share}")
