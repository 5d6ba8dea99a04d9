"""State a run reads back at its next start, damaged as a kill or a full disk leaves it:
repaired with a one-line warning (the run goes on), or refused in one line."""

import json

import numpy as np
import pytest

from core.errors import UserError
from core.metrics import _drop_records_after, wandb_run_id
from zoo.data import token_cache


def test_a_metrics_line_cut_short_is_dropped_with_a_warning(tmp_path, capsys):
    metrics = tmp_path / "metrics.jsonl"
    records = [{"step": s, "loss": 1.0} for s in (1, 2, 4)]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"step": 5, "lo')
    _drop_records_after(metrics, 2)  # resuming from step 2
    assert [json.loads(line) for line in metrics.read_text().splitlines()] == records[:2]
    assert capsys.readouterr().err.strip().endswith("metrics.jsonl: dropped 1 damaged line")


def test_a_damaged_wandb_id_is_replaced_and_a_good_one_kept(tmp_path, capsys):
    id_file = tmp_path / "wandb-run-id"
    first = wandb_run_id(id_file)
    assert wandb_run_id(id_file) == first and capsys.readouterr().err == ""
    id_file.write_text("{\n")
    replaced = wandb_run_id(id_file)
    assert replaced != first and id_file.read_text().strip() == replaced
    assert "wandb-run-id is damaged ('{'); logging to a new W&B run" in capsys.readouterr().err


def test_a_damaged_token_cache_is_a_miss_and_made_again(tmp_path, capsys):
    tokens = np.arange(5000, dtype=np.int32)
    token_cache.store(tmp_path, "key", tokens, {"documents": 1})
    with open(tmp_path / "key.npy", "r+b") as file:
        file.truncate(1000)
    assert token_cache.load(tmp_path, "key") is None
    assert "is damaged (mmap length is greater than file size); tokenizing again" in (
        capsys.readouterr().err)
    token_cache.store(tmp_path, "key", tokens, {"documents": 1})
    assert (token_cache.load(tmp_path, "key")[0] == tokens).all()


def test_a_token_cache_that_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(UserError, match=r"cannot write the token cache at .*a-file/tokens "
                                        r"\(Not a directory\); set data.cache_dir or \$ZOO_CACHE"):
        token_cache.store(tmp_path / "a-file" / "tokens", "key", np.zeros(3, np.int32), {})
