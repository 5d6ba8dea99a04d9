"""Where `zoo train` runs: as N torch.distributed processes on this machine (dtensor), on
every worker of a TPU VM from a workstation (--on), or here in this process; and what it
prints when a run here ends."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable

from core import topology
from core.errors import UserError
from core.hosts import current as current_hosts
from tools import slices
from tools import tpu as one_slice
from tools.gcloud import Gcloud, Node


@dataclasses.dataclass(frozen=True)
class TrainRequest:
    """`zoo train`'s options as given, checked against each other once."""

    model: str | None  # None: the --init-from's own
    overrides: tuple[str, ...]
    tpu: str | None
    steps: int | None
    out: str | None
    init_from: str | None
    config_files: tuple[str, ...]
    force_resume: bool
    prompt: str | None
    backend: str
    nproc: int | None
    node: str | None
    zone: str | None
    project: str | None
    dry_run: bool

    def __post_init__(self):
        if self.nproc and self.backend != "dtensor":
            raise UserError("--nproc starts processes for --backend dtensor; the xla backend "
                            "uses --tpu cpu-N for N devices in one process")
        if self.backend == "dtensor" and (self.node or self.tpu):
            raise UserError("--backend dtensor runs here, one process per device (--nproc N); "
                            "--tpu and --on are the xla backend's")
        if self.node and not self.tpu:
            raise UserError("--on needs --tpu TYPE: the slice type NAME must be")
        if not self.model and not self.init_from and not self.out:
            raise UserError("name a model (see `zoo models`), start from one with "
                            "--init-from RUN_OR_HF_FOLDER, or rerun a run with --out RUN")
        if not self.model and self.node:
            raise UserError("with --on, name the model too: the starting point (--init-from) "
                            "is read on the TPU VM, not here")


def launch(request: TrainRequest, echo: Callable[[str], object]) -> None:
    """Run the request where it asks to run."""
    if request.nproc and "LOCAL_RANK" not in os.environ:  # not yet one of torchrun's processes
        from tools.torchrun import launch as launch_processes  # torch.distributed: start-up

        launch_processes(request.nproc, sys.argv[1:])
    elif request.node:
        _launch_on_tpu_vm(request, echo)
    else:
        _train_here(request, echo)


def _launch_on_tpu_vm(request: TrainRequest, echo: Callable[[str], object]) -> None:
    multi_slice = topology.parse(request.tpu).slices > 1  # nodes NAME-0, NAME-1, ...
    launch_training = (slices if multi_slice else one_slice).launch_training
    flags = [f"--{k}={v}" for k, v in (("steps", request.steps), ("out", request.out),
                                        ("init-from", request.init_from)) if v is not None]
    flags += ["--force-resume"] if request.force_resume else []
    gcloud = Gcloud(dry_run=request.dry_run, echo=echo)
    launch_training(gcloud, Node.resolve(request.node, request.zone, request.project),
                    request.model, request.tpu,
                    [*flags, *(f"--config={f}" for f in request.config_files),
                     *request.overrides])


def _train_here(request: TrainRequest, echo: Callable[[str], object]) -> None:
    # torch and the families: start-up, paid only by a run that trains here
    from benchmarks.plan.analytic import check_fits
    from core import goodput
    from core.config import given_value
    from zoo.app.generate import sample_after_training
    from zoo.app.init_from import default_out, given_starting_point, kept_config, kept_setting
    from zoo.app.run import resolve_run
    from zoo.app.train import describe_summary, train

    task = given_value("task", request.config_files, request.overrides)
    out = request.out or (f"runs/{request.model}" if request.model else
                          default_out(request.init_from, task))
    flags = {"tpu": request.tpu, "steps": request.steps, "out": out,
             "init_from": request.init_from}
    overrides = [f"{k}={v}" for k, v in flags.items() if v is not None] + list(request.overrides)
    # no model named: the starting point's, or the one of the run being rerun in `out`
    kept = {} if request.init_from else kept_config(
        given_value("out", request.config_files, overrides))
    model = request.model or kept_setting(kept, "model_name")
    start = given_starting_point(model, request.config_files, overrides, kept)
    model = model or (start.model_name if start else None)
    if model is None:
        raise UserError(f"--out {out} holds no run to rerun (no config.yaml naming its "
                        "model); name a model (see `zoo models`) or --init-from")
    run = resolve_run(model, overrides, request.config_files, start=start)
    if request.backend == "xla":
        check_fits(run)
    run, summary = train(run, request.force_resume, request.backend, start)
    cfg = run.config
    if request.backend == "dtensor" and not current_hosts().main:
        return  # one report for the run, from its first process
    if not summary:
        echo(f"nothing to do: {cfg.out} already trained {cfg.steps} steps")
        return
    echo(describe_summary(summary, cfg.out))
    if "goodput" in summary:
        echo(goodput.describe(summary["goodput"]))
    if summary["last_step"] < cfg.steps:  # SIGTERM: saved, and the VM is going away
        return
    text = run.task.generates_text and cfg.data.source != "synthetic"
    if text and current_hosts().main:  # the others' run folders hold no config
        with goodput.spent_on("evaluation"):
            echo(sample_after_training(cfg.out, request.prompt or run.task.sample_prompt))
