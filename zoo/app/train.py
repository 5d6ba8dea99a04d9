"""`zoo train` for a resolved run (zoo/app/run.py): check the runtime is the slice asked
for and the run folder is this run's, then build, shard and train, holding the run folder
and its checkpoint location while it trains."""

from __future__ import annotations

import contextlib
import os

import yaml

from core import backends, runtime, topology
from core import config as config_lib
from core import hosts as hosts_lib
from core.backends.xla.runtime import start
from core.engine import MIN_TIMED_STEPS, WARMUP_STEPS, Engine
from core.errors import UserError
from core.run_config import resumable
from core.store.checkpoint import check_writable
from core.store.checkpoint_reader import complete_steps
from core.store.lease import RunIdentity, check_owner, leased
from core.store.location import Store
from core.store.run_folder import CHECKPOINTS, LOCATION_CONFIG, RUN_CONFIG, RUN_ID, RunFolder
from core.store.run_home import RunHome
from zoo.app.init_from import StartingPoint, resolved_source, starting_point
from zoo.app.run import Run
from zoo.registry import ModelFamily


def select_runtime(topo: topology.Topology) -> topology.Topology:
    """Point PJRT at the requested devices, or fail fast when this machine is not that slice."""
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


def check_resumable(cfg) -> None:
    """A run folder with a checkpoint is resumed only by the run that wrote it: a changed
    architecture, data or optimisation is a different experiment (the keys that may change
    are marked `resumable` in the schema: core/run_config.py), and checkpoints left behind by
    a changed `checkpoint_dir` are never silently restarted from step 1; both are refused in
    one line."""
    home = RunHome(cfg.out)
    saved = home.read(RUN_CONFIG)
    if saved is None:
        return
    saved = config_lib.parse_saved(saved, home.path(RUN_CONFIG))
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
    if saved.get("init_from"):  # stored as typed before it was stored absolute
        saved["init_from"] = resolved_source(saved["init_from"])
    may_change = resumable(type(cfg))
    changed = {key: values for key, values in
               config_lib.changed_keys(saved, yaml.safe_load(config_lib.to_yaml(cfg))).items()
               if not key.startswith(may_change)}
    if changed:
        diff = ", ".join(f"{key}: {old} -> {new}" for key, (old, new) in changed.items())
        raise UserError(f"{cfg.out} holds a run with other settings ({diff}); use a new --out, "
                        "or --force-resume to continue that run with these")


def run_identity(cfg, family: ModelFamily, home, run_id: str | None):
    """Who this run is, as its checkpoint location records its owner."""
    return RunIdentity(run_id=run_id and run_id.strip(), model_name=cfg.model_name,
                       family=family.name,
                       out=home.out if home.remote else os.path.abspath(home.out))


def build_engine(run: Run, build_model=None, force_resume: bool = False,
                 backend: str = "xla", origin: StartingPoint | None = None):
    """(the run as trained, ready engine): runtime selected, model built, sharded and
    remat'ed on `backend` (core/backends); a run folder holding another run's
    checkpoints is refused unless `force_resume`. The run's config gains what training
    reads from files: a Hugging Face architecture (`init_from`), the task's token ids.

    `build_model(config, seed)` replaces the family's model (the bench's HF peer);
    `origin` is the run's --init-from where the caller resolved it already."""
    engine_backend = backends.get(backend)  # first: the dtensor backend's process group
    family, cfg = run.family, run.config
    if backend == "xla":
        select_runtime(run.topology)
    if cfg.init_from and origin is None:
        origin = starting_point(cfg.init_from, run.model_name)
    if origin:  # resolve_run applied it, settling the tokenizer
        cfg = origin.apply(cfg, tokenizer_chosen=True)
    run = run.with_config(run.task.resolve(cfg))
    cfg = run.config
    # First: a bucket out of reach fails in seconds. One probe per machine: processes of
    # one machine share its disk, and one's clean-up would remove another's probe.
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        check_writable(cfg.checkpoint_location)
    if not force_resume:
        check_resumable(cfg)
    if run.task.reference_forwards and not run.adapters and engine_backend.places_one_model:
        raise UserError(f"task={run.task.name} compares with a frozen copy of the starting "
                        f"model, which --backend {backend} cannot place beside it; train LoRA "
                        "adapters (lora.rank=8: the reference is the model with them off) or "
                        "use --backend xla")
    # counted on the meta device: a LoRA run's bad targets are refused before a model is
    # built for real
    train_flops_per_item = run.train_flops_per_item()
    if backend == "xla":
        start()
    model = (build_model or family.build)(run.built_config.model, seed=cfg.seed)
    if origin:
        origin.load(model)
    model = run.transform_model(model, seed=cfg.seed)
    engine = Engine(cfg, model, run.task, run.rules, run.remat, run.topology,
                    train_flops_per_item=train_flops_per_item, backend=engine_backend)
    return run, engine


def train(run: Run, force_resume: bool = False, backend: str = "xla",
          origin: StartingPoint | None = None) -> tuple[Run, dict]:
    """(the run as trained, the training summary)."""
    run, engine = build_engine(run, force_resume=force_resume, backend=backend, origin=origin)
    with contextlib.ExitStack() as held:
        _hold_run(run.config, engine.home, run.family, held)
        return run, engine.fit()


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
            location.write_text(LOCATION_CONFIG, config_lib.saved_text(cfg))


def describe_summary(summary: dict, out: str) -> str:
    """The line a finished `zoo train` prints: steps, loss, speed, compiles, run folder."""
    speed = (f"median step {summary['median_step_time_s']:.3f} s, "
             f"{summary['items_per_s']:,.0f} {summary['unit']}/s, MFU {summary['mfu']:.1%}"
             if summary["mfu"] is not None else
             f"too few steps to time (after {WARMUP_STEPS} warm-up steps, "
             f"{MIN_TIMED_STEPS} are timed)")
    compiles = ", ".join(f"{s:.1f} s" for s in summary["compile_s"]) or "none new"
    return (f"done: steps {summary['first_step']}-{summary['last_step']}, loss "
            f"{summary['first_loss']:.3f} -> {summary['last_loss']:.3f}, {speed}, "
            f"{summary['compiles']} compile{'s' * (summary['compiles'] != 1)} ({compiles}); "
            f"run folder {out}")

