"""The device-side half of the conformance suite (tests/multidevice/test_conformance.py),
for the tiny size of each family named on the command line, on however many XLA CPU devices
this process has:

- with --presets, forward + backward of the family's own training loss on its example
  batch under every sharding preset (remat none): loss, gradients and actual shards,
  compared across device counts by the test;
- with more than one device, a 2-step `zoo train` run on synthetic data that saves a
  checkpoint, then a fresh trainer that resumes from it: the restored weights and optimizer
  state must equal the saved ones. The run folder is kept for the HF export test.

Usage (from the repo root):
    python -m tests.support.conformance_worker OUT.pt [--presets] FAMILY [FAMILY ...]
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402

from core import config as config_lib  # noqa: E402
from core.mesh import (
    LOGICAL_AXES,  # noqa: E402
    MeshConfig,  # noqa: E402
)
from core.remat import RematConfig  # noqa: E402
from core.sharding import ShardingRules  # noqa: E402
from tests.support.xla_harness import sharded_loss_and_grads  # noqa: E402
from zoo.app.run import resolve_run  # noqa: E402
from zoo.app.train import build_engine  # noqa: E402
from zoo.registry import family  # noqa: E402


def mesh_for(rules: ShardingRules, devices: int) -> MeshConfig:
    """fsdp over everything, or fsdp x 2 along the other axis (tensor, expert, sequence)
    the preset uses."""
    logical = set(LOGICAL_AXES.values())  # the batch's axes: every preset splits them
    specs = " ".join(str(dim) for rule in (*rules.params, *rules.activations, *rules.gathered)
                     for dim in rule.spec if dim not in logical)
    used = [axis for axis in ("tensor", "expert", "sequence") if axis in specs]
    return MeshConfig(**{used[0]: 2}) if used and devices > 1 else MeshConfig()


def presets_forward_backward(name: str) -> dict:
    fam = family(name)
    run = resolve_run(f"{name}-tiny", []).config
    batch = fam.task.example_batch(run, seed=0)
    devices = xr.global_runtime_device_count()
    results = {}
    for preset in fam.preset_names("sharding"):
        rules = ShardingRules.from_yaml(fam.preset("sharding", preset))
        results[preset] = sharded_loss_and_grads(
            fam.build(run.model, seed=0),
            lambda model, b: fam.task.loss(model, b)[0],
            batch,
            rules,
            RematConfig(),
            mesh_for(rules, devices),
        )
    return results


def state_on_host(trainer) -> dict:
    import torch_xla

    torch_xla.sync()
    model = {k: v.cpu() for k, v in trainer.model.state_dict().items()}
    optimizer = {
        f"{i}.{k}": v.cpu()
        for i, state in enumerate(trainer.optimizer.state.values())
        for k, v in state.items()
        if isinstance(v, torch.Tensor)
    }
    return {"model": model, "optimizer": optimizer, "step": trainer.step}


def checkpoint_round_trip(name: str, run_dir: Path) -> dict:
    devices = xr.global_runtime_device_count()
    overrides = [
        f"tpu=cpu-{devices}",
        f"out={run_dir}",
        "steps=2",
        "checkpoint_every=2",
        "data.source=synthetic",
        "log_every=1",
    ]
    run, trainer = build_engine(resolve_run(f"{name}-tiny", overrides))
    config_lib.write_resolved(run.config, run_dir)
    summary = trainer.fit()
    saved = state_on_host(trainer)
    _, resumed = build_engine(resolve_run(f"{name}-tiny", overrides))
    resumed.step = resumed._resume()
    return {"summary": summary, "saved": saved, "restored": state_on_host(resumed)}


def main(out: str, names: list[str]):
    xr.use_spmd()
    presets = names[0] == "--presets"
    results = {"devices": xr.global_runtime_device_count(), "presets": {}, "checkpoints": {}}
    for name in names[presets:]:
        if presets:
            results["presets"][name] = presets_forward_backward(name)
        if results["devices"] > 1:
            run_dir = Path(out).parent / f"run-{name}"
            results["checkpoints"][name] = checkpoint_round_trip(name, run_dir)
    torch.save(results, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
