"""Compose a training run from a model name and overrides: resolve the config (the task's
schema plus the family's architecture), check the runtime is the slice asked for, then
build, shard and train. Everything that can be wrong with the input fails before any model
or data is loaded."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os

from zoo.core import config as config_lib
from zoo.core import runtime, topology
from zoo.core.errors import UserError
from zoo.core.run_folder import RUN_ID, RunFolder
from zoo.models.registry import ModelFamily, resolve


def run_schema(family: ModelFamily, size: str):
    """The run's config schema: the family's task config plus its architecture."""
    default = family.sizes[size]
    return dataclasses.make_dataclass(
        f"{family.name.title()}RunConfig",
        [
            (
                "model",
                family.config_cls,
                dataclasses.field(default_factory=lambda: copy.deepcopy(default)),
            )
        ],
        bases=(family.task.config_cls,),
    )


def load_run_config(model_name: str, overrides: list[str], config_files=()):
    family, size = resolve(model_name)
    cfg = config_lib.load(
        run_schema(family, size),
        files=config_files,
        overrides=[f"model_name={model_name}", *overrides],
    )
    from zoo.core.mesh import for_slices

    cfg.mesh = for_slices(cfg.mesh, topology.parse(cfg.tpu))
    if not config_lib.sets_key("global_batch_size", config_files, overrides):
        cfg.global_batch_size = default_global_batch(cfg)
    return family, cfg


def default_global_batch(cfg) -> int:
    """The config's default batch (a CPU-sized 8 or 32), raised to one example per
    data-parallel device on a slice with more: a smaller batch leaves XLA padding every
    device's share, compute spent on nothing (and a slow, odd SPMD program)."""
    from zoo.core.inputs import batch_devices
    from zoo.core.mesh import resolve_axis_sizes

    sizes = resolve_axis_sizes(cfg.mesh, topology.parse(cfg.tpu).devices)
    return max(cfg.global_batch_size, batch_devices(sizes))


def select_runtime(slice_type: str) -> topology.Topology:
    """Point PJRT at the requested devices, or fail fast when this machine is not that slice."""
    topo = topology.parse(slice_type)
    if not topo.is_tpu:
        os.environ["PJRT_DEVICE"] = "CPU"
        os.environ["CPU_NUM_DEVICES"] = str(topo.devices)
        return topo
    if not runtime.on_tpu_vm():
        raise UserError(
            f"--tpu {topo.name} needs that TPU slice, but this machine has no TPU "
            "(XLA runs on the CPU here); run with --tpu cpu-N here, or launch on "
            "the slice"
        )
    found = runtime.tpu_type()  # this VM's own slice: each slice of a multi-slice job
    if found and found != topo.slice_name:
        raise UserError(
            f"--tpu {topo.name} does not match this TPU VM, which is a {found}; use --tpu {found}"
        )
    return topo


# Keys a resumed run may change: how long and how often, where it runs and logs.
RESUMABLE_CHANGES = ("steps", "log_every", "checkpoint_every", "keep_checkpoints",
                     "consolidate_checkpoints", "checkpoint_dir", "checkpoint_lease_s",
                     "async_checkpoints",
                     "eval_every", "out", "tpu", "mesh.", "wandb.", "data.cache_dir",
                     "profile.")


def check_resumable(cfg) -> None:
    """A run folder with a checkpoint is resumed only by the run that wrote it: a changed
    architecture, data or optimisation is a different experiment, and checkpoints left
    behind by a changed `checkpoint_dir` are never silently restarted from step 1; both are
    refused in one line."""
    import yaml

    from zoo.core.checkpoint import complete_steps
    from zoo.core.run_folder import CHECKPOINTS, RUN_CONFIG
    from zoo.core.run_home import RunHome

    home = RunHome(cfg.out)
    saved = home.read(RUN_CONFIG)
    if saved is None:
        return
    saved = config_lib.parse_yaml(saved, home.path(RUN_CONFIG))
    # the folder given, not the `out` saved in it: a copied or moved run reads its own files
    saved_location = saved.get("checkpoint_dir") or home.path(CHECKPOINTS)
    saved_steps = complete_steps(saved_location)
    if not complete_steps(cfg.checkpoint_location):
        if saved_location != cfg.checkpoint_location and saved_steps:
            raise UserError(
                f"{cfg.out} has checkpoints up to step {saved_steps[-1]} in {saved_location}, "
                f"none in {cfg.checkpoint_location}; resume with "
                f"checkpoint_dir={saved.get('checkpoint_dir') or '(unset)'}, copy them to the "
                "new location first, or use a new --out")
        if not saved_steps:
            return
    changed = {key: values for key, values in
               config_lib.changed_keys(saved, yaml.safe_load(config_lib.to_yaml(cfg))).items()
               if not key.startswith(RESUMABLE_CHANGES)}
    if changed:
        diff = ", ".join(f"{key}: {old} -> {new}" for key, (old, new) in changed.items())
        raise UserError(f"{cfg.out} holds a run with other settings ({diff}); use a new --out, "
                        "or --force-resume to continue that run with these")


def run_identity(cfg, family: ModelFamily, home, run_id: str | None):
    """Who this run is, as its checkpoint location records its owner."""
    from zoo.core.location_lease import RunIdentity

    return RunIdentity(run_id=run_id and run_id.strip(), model_name=cfg.model_name,
                       family=family.name,
                       out=home.out if home.remote else os.path.abspath(home.out))


def build_engine(model_name: str, overrides: list[str], config_files=(), build_model=None,
                 force_resume: bool = False, backend: str = "xla"):
    """(resolved config, ready engine): runtime selected, model built, sharded and remat'ed
    on `backend` (zoo/core/backends); a run folder holding another run's checkpoints is
    refused unless `force_resume`.

    `build_model(config, seed)` replaces the family's model (the bench's HF peer)."""
    from zoo.core import backends

    engine_backend = backends.get(backend)  # first: the dtensor backend's process group
    family, cfg = load_run_config(model_name, overrides, config_files)
    topo = select_runtime(cfg.tpu) if backend == "xla" else topology.parse(cfg.tpu)
    rules_path = family.preset("sharding", cfg.sharding)
    remat_path = family.preset("remat", cfg.remat)
    from zoo.core.remat import RematConfig

    remat = config_lib.load(RematConfig, files=[remat_path])
    remat.check_device(topo.is_tpu)
    if cfg.init_from:
        if family.load_hf is None:
            raise UserError(f"{family.name} cannot load Hugging Face checkpoints (--init-from)")
        from zoo.core.hf import check_architecture

        check_architecture(cfg.init_from, family.hf_class)
        cfg = dataclasses.replace(cfg, model=family.config_from_hf(cfg.init_from))
    cfg = family.task.resolve(cfg)
    from zoo.core.checkpoint import check_writable

    # First: a bucket out of reach fails in seconds. One probe per machine: processes of
    # one machine share its disk, and one's clean-up would remove another's probe.
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        check_writable(cfg.checkpoint_location)
    if not force_resume:
        check_resumable(cfg)
    from zoo.core.sharding import ShardingRules

    rules = ShardingRules.from_yaml(rules_path)
    if backend == "xla":
        from zoo.core.backends.xla.runtime import start

        start()
    from zoo.core.engine import Engine

    model_config = family.model_for(cfg.model, topo, cfg.mesh)
    model = (build_model or family.build)(model_config, seed=cfg.seed)
    if cfg.init_from:
        family.load_hf(model, cfg.init_from)
    engine = Engine(cfg, model, family.task, rules, remat,
                    forward_flops_per_item=family.forward_flops(cfg), backend=engine_backend)
    return cfg, engine


def train(model_name: str, overrides: list[str], config_files=(),
          force_resume: bool = False, backend: str = "xla") -> tuple[object, dict]:
    family, _ = resolve(model_name)
    cfg, engine = build_engine(model_name, overrides, config_files, force_resume=force_resume,
                               backend=backend)
    with contextlib.ExitStack() as held:
        _hold_run(cfg, engine.home, family, held)
        return cfg, engine.fit()


@contextlib.contextmanager
def _undone_if_start_fails(home):
    """A run folder this start made is removed again when the run fails before logging a
    step: the local folder (or copy) at once, the bucket's folder only once the run holds
    its checkpoint location, so a start refused there never removes another run's files."""
    reach = {"remote": False}
    try:
        yield reach
    except BaseException:
        metrics = RunFolder(home.local).metrics
        if not (metrics.exists() and metrics.stat().st_size > 0):
            home.forget(remote=reach["remote"])
        raise


def _hold_run(cfg, home, family: ModelFamily, held: contextlib.ExitStack) -> None:
    """The main host takes the run folder and the checkpoint location (refused in one line
    while another run holds them), brings a run in a bucket into its local copy and writes
    the run's config; every host learns whether it did, so a refusal on the main host ends
    the others too instead of leaving them waiting for it."""
    from zoo.core import hosts as hosts_lib
    from zoo.core.location_lease import check_owner, leased
    from zoo.core.run_folder import LOCATION_CONFIG
    from zoo.core.store import Store

    hosts = hosts_lib.current()
    refusal = None
    if hosts.main:  # the others only write their checkpoint shards
        location = Store(cfg.checkpoint_location)
        run = RunFolder(home.local)
        fresh = not home.exists()
        try:
            # before anything is made, as the run is where it lives
            check_owner(location, run_identity(cfg, family, home, home.read(RUN_ID)))
            held.enter_context(run.locked())
            undo = held.enter_context(_undone_if_start_fails(home)) if fresh else {}
            home.pull()
            held.enter_context(leased(location,
                                      run_identity(cfg, family, home, run.ensure_run_id()),
                                      cfg.checkpoint_lease_s))
            undo["remote"] = True
            home.push()  # the run's identity is in the bucket before its first checkpoint
        except UserError as error:
            refusal = error
    if hosts.any(refusal is not None):
        raise refusal or UserError("the main host refused to start this run; its output "
                                   "says why")
    if hosts.main:
        config_lib.write_resolved(cfg, run.path)
        home.push()
        if cfg.checkpoint_dir:  # checkpoints elsewhere say which run they belong to
            location.write_text(LOCATION_CONFIG, config_lib.to_yaml(cfg))
