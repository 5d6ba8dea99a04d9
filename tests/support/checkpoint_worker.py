"""Trains the toy model (fsdp preset) with AdamW + LambdaLR on however many XLA CPU devices
this process has, saving checkpoints, then restores into freshly built objects and continues.

Phase 1 (own checkpoints): an uninterrupted run of STEPS steps saving every 2 steps, a save
that crashes midway, a restore of step RESTORE_STEP that continues to STEPS, and bad
restores. It then prints "ready" and reads one line from stdin: another worker's checkpoint
directory (saved on a different device count) to restore and continue from (phase 2), or
"-" to skip. Results go to OUT/phase1-N.pt and OUT/phase2-N.pt; logs go to stderr.

Usage (from the repo root): python -m tests.support.checkpoint_worker OUT
"""

import errno
import os
import sys
from pathlib import Path

os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402
import torch_xla  # noqa: E402
import torch_xla.core.xla_model as xm  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402

from core.backends.xla.spmd import build_mesh, shard_batch, shard_model  # noqa: E402
from core.errors import UserError  # noqa: E402
from core.mesh import MeshConfig  # noqa: E402
from core.sharding import ShardingRules  # noqa: E402
from core.store import checkpoint as checkpoint_module  # noqa: E402
from core.store.checkpoint import Checkpointer  # noqa: E402
from tests.support.paths import DATA  # noqa: E402
from tests.support.toy_model import DIM, SEQ, VOCAB, ToyModel  # noqa: E402

RULES = DATA / "toy_fsdp.yaml"
torch_bytes = checkpoint_module._torch_bytes
write_manifest = checkpoint_module.write_manifest
STEPS, RESTORE_STEP, BATCH = 6, 4, 8


def build(seed: int):
    mesh = build_mesh(MeshConfig())
    torch.manual_seed(seed)
    model = ToyModel().to(torch_xla.device())
    shard_model(model, ShardingRules.from_yaml(RULES), mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 3))
    return model, optimizer, scheduler, mesh


def train_step(model, optimizer, scheduler, mesh) -> torch.Tensor:
    # Batches come from the CPU RNG and the loss has an XLA-RNG term, so a resumed run only
    # matches if both RNG states were restored.
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    batch = shard_batch({"ids": ids, "labels": torch.roll(ids, -1, dims=1)}, mesh)
    loss = model(batch["ids"], batch["labels"])
    loss = loss + 1e-3 * torch.rand((), device=torch_xla.device())
    loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    torch_xla.sync()
    return loss.detach().cpu()


def snapshot(model, optimizer, scheduler) -> dict:
    names = {id(p): n for n, p in model.named_parameters()}
    spec = torch_xla._XLAC._get_xla_sharding_spec
    return {
        "params": {n: p.detach().cpu() for n, p in model.named_parameters()},
        "param_specs": {n: spec(p) for n, p in model.named_parameters()},
        "optim": {  # cloned: .cpu() of a CPU tensor (AdamW's step) is the live tensor
            names[id(p)]: {k: v.cpu().clone() if torch.is_tensor(v) else v for k, v in s.items()}
            for p, s in optimizer.state.items()
        },
        "optim_specs": {names[id(p)]: spec(s["exp_avg"]) for p, s in optimizer.state.items() if s},
        "lrs": [g["lr"] for g in optimizer.param_groups],
        "scheduler": {k: v for k, v in scheduler.state_dict().items() if k != "lr_lambdas"},
        "torch_rng": torch.get_rng_state(),
        "xla_rng": xm.get_rng_state(),
    }


def error_of(fn) -> str:
    try:
        fn()
    except UserError as err:
        return str(err)
    return "no error"


def phase1(out: Path, devices: int) -> dict:
    run = out / f"run-{devices}"
    checkpointer = Checkpointer(run, keep=2)
    model, optimizer, scheduler, mesh = build(seed=0)
    fresh_specs = {
        n: torch_xla._XLAC._get_xla_sharding_spec(p) for n, p in model.named_parameters()
    }
    losses, saved = [], {}
    for step in range(1, STEPS + 1):
        losses.append(train_step(model, optimizer, scheduler, mesh))
        if step == STEPS:
            (run / "step-99999999").mkdir()  # a crashed save: no manifest
            (run / "step-99999999" / "junk").write_text("a crashed save")
        if step % 2 == 0:
            checkpointer.save(step, model, optimizer, scheduler, step * BATCH, {"note": step})
            saved[step] = snapshot(model, optimizer, scheduler)
    folders = sorted(p.name for p in run.iterdir())
    # The same state with the consolidated weights file too; in memory (an fsspec store that
    # is not a local disk); and in background, while the next step changes every tensor.
    Checkpointer(out / f"consolidated-{devices}", consolidate=True).save(
        STEPS, model, optimizer, scheduler)
    in_memory = Checkpointer(f"memory://zoo-test/run-{devices}")
    in_memory.save(STEPS, model, optimizer, scheduler)
    saved_elsewhere = {"memory": snapshot(model, optimizer, scheduler)}
    in_background = Checkpointer(out / f"async-{devices}", async_save=True)
    in_background.save(STEPS, model, optimizer, scheduler)
    saved_elsewhere["async"] = snapshot(model, optimizer, scheduler)
    train_step(model, optimizer, scheduler, mesh)
    in_background.wait()

    # A save that dies after the shards are written but before the commit.
    def crash(*args, **kwargs):
        raise KeyboardInterrupt("killed mid-save")

    checkpoint_module.write_manifest = crash
    try:
        checkpointer.save(STEPS + 2, model, optimizer, scheduler)
    except KeyboardInterrupt:
        pass
    checkpoint_module.write_manifest = write_manifest
    after_crash = {"latest": checkpointer.latest_step(), "folders": sorted(os.listdir(run))}

    # A disk that fills up midway (ENOSPC after the shards are written).
    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    checkpoint_module._torch_bytes = disk_full
    no_space = error_of(lambda: checkpointer.save(STEPS + 4, model, optimizer, scheduler))
    checkpoint_module._torch_bytes = torch_bytes
    after_no_space = {"latest": checkpointer.latest_step(), "folders": sorted(os.listdir(run)),
                      "error": no_space}
    elsewhere = {"saved": saved_elsewhere}
    for name, other in (("memory", in_memory), ("async", in_background)):
        model, optimizer, scheduler, mesh = build(seed=3)
        other.restore(model, optimizer, scheduler)
        elsewhere[name] = snapshot(model, optimizer, scheduler)

    model, optimizer, scheduler, mesh = build(seed=1)
    info = checkpointer.restore(model, optimizer, scheduler, step=RESTORE_STEP)
    restored = snapshot(model, optimizer, scheduler)
    resumed = [train_step(model, optimizer, scheduler, mesh) for _ in range(RESTORE_STEP, STEPS)]

    wrong = ToyModel()
    wrong.head = torch.nn.Linear(DIM, VOCAB + 1, bias=False)
    extra = ToyModel()
    extra.scale = torch.nn.Parameter(torch.ones(1))
    errors = {
        "empty": error_of(lambda: Checkpointer(out / "empty").restore(model, optimizer)),
        "shape": error_of(lambda: checkpointer.restore(wrong, optimizer)),
        "missing": error_of(lambda: checkpointer.restore(extra, optimizer)),
        "extra": error_of(lambda: checkpointer.save(9, model, optimizer, extra={"x": object()})),
    }
    return {
        "devices": xr.global_runtime_device_count(),
        "losses": losses,
        "saved": saved,
        "fresh_specs": fresh_specs,
        "folders": folders,
        "after_crash": after_crash,
        "after_no_space": after_no_space,
        "elsewhere": elsewhere,
        "info": info,
        "restored": restored,
        "resumed": resumed,
        "errors": errors,
    }


def phase2(other_run: Path) -> dict:
    model, optimizer, scheduler, mesh = build(seed=2)
    info = Checkpointer(other_run).restore(model, optimizer, scheduler, step=RESTORE_STEP)
    restored = snapshot(model, optimizer, scheduler)
    resumed = [train_step(model, optimizer, scheduler, mesh) for _ in range(RESTORE_STEP, STEPS)]
    return {"info": info, "restored": restored, "resumed": resumed}


def main(out: str):
    out = Path(out)
    xr.use_spmd()
    devices = xr.global_runtime_device_count()
    torch.save(phase1(out, devices), out / f"phase1-{devices}.pt")
    print("ready", flush=True)
    other = sys.stdin.readline().strip()
    if other and other != "-":
        torch.save(phase2(Path(other)), out / f"phase2-{devices}.pt")


if __name__ == "__main__":
    main(sys.argv[1])
