"""`zoo plan --compile --compare maxtext` for supervised fine-tuning: an sft run is MaxText's
SFT on packed rows (its `packing`, `use_sft` and completion-only loss), pretraining keeps
MaxText's defaults, and the batch zoo traces for an sft run carries the segment ids and
positions of packed rows (the compile itself: docs/results/plan-compare-maxtext.md)."""

import types

import pytest

from benchmarks.maxtext_keys import maxtext_keys, task_keys
from core.errors import UserError
from zoo.app.run import resolve_run

SFT_KEYS = ("packing", "use_sft", "sft_train_on_completion_only")


def run_keys(*overrides: str) -> dict[str, str]:
    run = resolve_run("llama-8b", ["tpu=v5p-128", "seq_len=8192", *overrides])
    return dict(key.split("=", 1) for key in maxtext_keys(run.family.name, run.config,
                                                          run.topology))


def test_sft_run_is_maxtexts_packed_sft_on_the_completion_only():
    found = run_keys("task=sft")
    assert {key: found[key] for key in SFT_KEYS} == {
        "packing": "true", "use_sft": "true", "sft_train_on_completion_only": "true"}
    # the rest of the program is the pretraining run's: same shapes, batch, mesh, remat
    plain = run_keys()
    assert {k: v for k, v in found.items() if k not in SFT_KEYS} == plain


@pytest.mark.parametrize("overrides,expected", [
    (["data.train_on=all"], {"packing": "true", "sft_train_on_completion_only": "false"}),
    (["data.train_on=assistant"], {"packing": "true", "sft_train_on_completion_only": "true"}),
    (["data.packing=false"], {"packing": "false", "sft_train_on_completion_only": "true"}),
])
def test_sft_rows_and_loss_mask_follow_the_zoo_run(overrides, expected):
    found = run_keys("task=sft", *overrides)
    assert found["use_sft"] == "true"
    assert {key: found[key] for key in expected} == expected


def test_pretraining_keeps_maxtexts_defaults_and_document_masks_pack():
    assert not set(SFT_KEYS) & run_keys().keys()
    masked = run_keys("data.document_mask=true")
    assert masked["packing"] == "true" and "use_sft" not in masked


def test_a_task_maxtext_has_no_counterpart_of_is_refused_by_name():
    with pytest.raises(UserError, match="task=dpo has no MaxText counterpart"):
        task_keys(types.SimpleNamespace(task="dpo"))


def test_the_traced_sft_batch_holds_packed_rows():
    run = resolve_run("llama-tiny", ["tpu=v5p-8", "task=sft", "seq_len=1024",
                                     "global_batch_size=4"])
    batch = run.task.example_batch(run.built_config)
    assert set(batch) == {"input_ids", "labels", "segment_ids", "positions"}
    assert batch["segment_ids"].shape == batch["positions"].shape == (4, 1024)
    row, positions = batch["segment_ids"][0], batch["positions"][0]
    assert row.unique().tolist() == [1, 2, 3]  # three documents a row
    starts = (positions == 0).nonzero().flatten().tolist()
    assert starts == [0, *((row[1:] != row[:-1]).nonzero().flatten() + 1).tolist()]
