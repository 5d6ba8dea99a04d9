"""The run schema's metadata (core/run_config.py) says what the hand lists it replaced said:
the keys a resumed run may change, and the default the slice raises."""

from core.run_config import resumable, schema_keys, slice_defaults
from tests.support.run_schemas import run_schemas
from zoo.app.run import resolve_run

# zoo/app/train.py's RESUMABLE_CHANGES before the schema said it, matched as it matched them
RESUMABLE_CHANGES = ("steps", "log_every", "checkpoint_every", "keep_checkpoints",
                     "consolidate_checkpoints", "checkpoint_dir", "checkpoint_lease_s",
                     "async_checkpoints",
                     "eval_every", "out", "tpu", "mesh.", "wandb.", "data.cache_dir",
                     "profile.")
# keys inside a dict-valued key, which a schema does not list
DICT_KEYS = ("mesh.dcn.data", "mesh.dcn.fsdp")


def test_every_schema_resumes_with_the_same_keys_as_the_hand_list():
    seen = set()
    for (family, task), schema in run_schemas().items():
        keys = [*(key for key, _, _ in schema_keys(schema)), *DICT_KEYS]
        before = {key for key in keys if key.startswith(RESUMABLE_CHANGES)}
        now = {key for key in keys if key.startswith(resumable(schema))}
        assert now == before, (family, task, now ^ before)
        seen |= now
    assert {"data.cache_dir", "eval_every", "mesh.dcn.data", "wandb.project"} <= seen


def test_the_slice_raises_the_batch_alone_and_only_when_it_is_not_given():
    assert {tuple(slice_defaults(schema)) for schema in run_schemas().values()} == {
        ("global_batch_size",)}
    assert resolve_run("llama-tiny", ["tpu=v5p-128"]).config.global_batch_size == 64
    assert resolve_run("vit-tiny", ["tpu=v5p-128"]).config.global_batch_size == 64
    assert resolve_run("llama-tiny", ["tpu=cpu-4"]).config.global_batch_size == 8
    given = resolve_run("llama-tiny", ["tpu=v5p-128", "global_batch_size=8"])
    assert given.config.global_batch_size == 8
