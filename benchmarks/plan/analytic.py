"""`zoo plan`: will MODEL fit on a slice under a sharding and remat preset, and how long
should a step take? Computed from the config and the exact sharding plan on the meta
device; nothing is allocated."""

from __future__ import annotations

import dataclasses
import math
import re

from core import runtime, topology
from core.errors import UserError
from core.inputs import batch_devices, host_batch_size
from core.out_of_memory import FIT_ADVICE
from core.sharding import plan_params
from core.table import format_bytes, format_table
from zoo.app.run import Run

OPTIMIZER_STATES = {"adamw": 2, "sgd": 1}  # fp32 tensors per parameter


@dataclasses.dataclass
class Plan:
    model: str
    topology: topology.Topology
    mesh: dict
    terms: dict  # name -> bytes per device
    hbm_bytes: int | None
    flops_per_step: float
    step_time_at_target_s: float | None
    target_mfu: float
    # bytes each chip sends over the data-center network per step (multi-slice): the
    # gradient reduction across slices, a ring all-reduce of its gradient shard
    dcn_bytes: float = 0.0
    flops_basis: str = "3 x forward, causal"  # what model FLOPs count
    # what the task places beside the model (core.task.Placed), each also one of `terms`
    placed: tuple = ()

    @property
    def total(self) -> float:
        return sum(self.terms.values())

    @property
    def fits(self) -> bool | None:
        return None if self.hbm_bytes is None else self.total <= self.hbm_bytes

    @property
    def largest(self) -> str:
        return max(self.terms, key=self.terms.get)

    def record(self) -> dict:
        """The `--json` record of the analytic plan."""
        return {
            "model": self.model,
            "slice": self.topology.name,
            "chips": self.topology.chips,
            "mesh": self.mesh,
            "hbm_per_chip": {"chip": self.hbm_bytes, "analytic": {**self.terms,
                                                                  "total": self.total}},
            "fits_analytic": self.fits,
            # what the task holds beside the model, each also one of the terms above
            "beside_model": [dataclasses.asdict(entry) for entry in self.placed],
            "model_flops_per_step": self.flops_per_step,
            "step_seconds_at_target_mfu": self.step_time_at_target_s,
            "target_mfu": self.target_mfu,
            **({"dcn_bytes_per_chip": self.dcn_bytes} if self.topology.slices > 1 else {}),
        }


def make_plan(run: Run, target_mfu: float, model=None) -> Plan:
    """The run's per-device memory and step time at `target_mfu` on its topology; `model`:
    the run's meta model when the caller has it (a search plans one model many ways)."""
    family, cfg, topo, mesh, remat = run.family, run.config, run.topology, run.mesh, run.remat
    host_batch_size(cfg.global_batch_size, topo.hosts)  # what `zoo train` requires too
    model = model or run.meta_model()
    params = plan_params(model, run.rules, mesh)
    param_bytes = sum(p.shard_bytes for p in params)
    # a LoRA run's frozen base has no gradients and no optimizer state
    trained = {name for name, param in model.named_parameters() if param.requires_grad}
    trained_bytes = sum(p.shard_bytes for p in params if p.name in trained)
    states = OPTIMIZER_STATES.get(cfg.optim.name, 2)
    micro_batch = cfg.global_batch_size // cfg.grad_accum
    per_device = -(-micro_batch // batch_devices(mesh))  # XLA pads a batch smaller than the mesh
    bf16 = cfg.runs_in_bf16(topo)
    activations = family.activation_bytes(
        cfg,
        per_device,
        mesh["tensor"],
        remat.policy if remat.checkpoint else None,
        2 if bf16 else 4,
        topo.is_tpu,
    )
    placed = tuple(run.task.placed(cfg, params))  # a DPO reference copy, a sampler's cache
    terms = {
        "parameters (fp32)": param_bytes,
        "gradients (fp32)": trained_bytes,
        f"optimizer state ({cfg.optim.name})": states * trained_bytes,
        **{entry.name: entry.bytes for entry in placed},
        **activations,
        "gathered weights": gathered_weight_bytes(params, 2 if bf16 else 4),
    }
    items = run.task.items_per_step(cfg)
    flops = run.train_flops_per_item() * items
    peak = topo.peak_bf16_flops or 0
    slices = cfg.mesh.dcn.get("data", 1)  # FSDP across slices adds per-layer gathers (warned)
    gradient_shard = trained_bytes / 4 * (2 if bf16 else 4)  # reduced in the compute dtype
    return Plan(
        run.model_name,
        topo,
        mesh,
        terms,
        topo.hbm_bytes_per_chip,
        flops,
        flops / (target_mfu * peak) if peak else None,
        target_mfu,
        dcn_bytes=2 * (slices - 1) / slices * gradient_shard,
        placed=placed,
        flops_basis=("forward and backward, causal, without the frozen base's weight "
                     "gradients (LoRA)" if run.adapters else Plan.flops_basis)
        + (f", plus {run.task.reference_forwards} reference forward(s)"
           if run.task.reference_forwards else ""),
    )


def gathered_weight_bytes(params, bytes_per_value: int) -> float:
    """Sharded weights are gathered whole, in the compute dtype, before use: the compiled
    step holds about two layers' (the one computing and the next arriving) and the largest
    weight outside the layers (an LM head or embedding table)."""
    def full(entry):
        return math.prod(entry.shape) * bytes_per_value if entry.shard_shape != entry.shape else 0

    layer = sum(full(p) for p in params if _LAYER_ZERO.search(p.name))
    outside = max((full(p) for p in params if not _ANY_LAYER.search(p.name)), default=0)
    return 2 * layer + outside


_LAYER_ZERO = re.compile(r"\.0\.")  # a parameter of the first layer of a stack
_ANY_LAYER = re.compile(r"\.\d+\.")


def check_fits(run: Run) -> None:
    """Before a run builds anything: refuse one whose plan does not fit, with the numbers.
    TPU: the plan per chip against HBM. CPU: every virtual device's share against the host
    memory available now (the devices share it)."""
    plan, model_name = make_plan(run, 0.5), run.model_name
    gib = 2**30
    placed = "".join(f", {entry.name} {format_bytes(entry.bytes)}" for entry in plan.placed)
    if plan.topology.is_tpu:
        if not plan.fits:
            raise UserError(
                f"{model_name} needs {plan.total / gib:,.1f} GiB per chip by `zoo plan`"
                f"{' (' + placed[2:] + ')' if placed else ''} but a {plan.topology.name} chip "
                f"has {plan.hbm_bytes / gib:g} GiB; {fit_advice(plan)}")
        return
    need, have = plan.total * plan.topology.devices, runtime.host_memory_available()
    if have is not None and need > have:
        raise UserError(
            f"{model_name} needs about {need / gib:,.1f} GiB of host memory by `zoo plan` "
            f"(largest: {plan.largest}{placed}) but {have / gib:,.1f} GiB is available; "
            + "; ".join([*_placed_advice(plan), "use a smaller model, global_batch_size or "
                         "seq_len, or remat=checkpoint"]))


def fit_advice(plan: Plan) -> str:
    """What to change when `plan` does not fit a chip: what shrinks each thing the task
    holds beside the model (a sampler's KV cache), then the model's own settings."""
    return "; ".join([*_placed_advice(plan), FIT_ADVICE])


def _placed_advice(plan: Plan) -> list[str]:
    """The advice of what the task holds beside the model that is a tenth of the total or
    more, largest first (shrinking a small one would not make the plan fit)."""
    return [entry.advice for entry in sorted(plan.placed, key=lambda e: -e.bytes)
            if entry.advice and entry.bytes >= plan.total / 10]


def describe(plan: Plan) -> str:
    gib = 2**30
    rows = [(name, f"{value / gib:,.2f} GiB") for name, value in plan.terms.items()]
    rows.append(("total", f"{plan.total / gib:,.2f} GiB"))
    mesh = " ".join(f"{a}={s}" for a, s in plan.mesh.items() if s > 1) or "1 device"
    lines = [
        f"{plan.model} on {plan.topology.name} ({plan.topology.chips} chips, mesh {mesh}); "
        "per-device memory:",
        format_table(("term", "per device"), rows),
    ]
    if plan.fits is None:
        lines.append("fits: unknown (no HBM figure for CPU devices)")
    else:
        hbm = plan.hbm_bytes / gib
        verdict = "fits" if plan.fits else "does NOT fit"
        lines.append(
            f"{verdict}: {plan.total / gib:,.1f} GiB of {hbm:g} GiB HBM per chip; "
            f"largest term: {plan.largest} ({plan.terms[plan.largest] / gib:,.1f} GiB)"
        )
        if not plan.fits:
            lines.append(fit_advice(plan))
    lines.append(f"model FLOPs per step: {plan.flops_per_step:.3e} ({plan.flops_basis})")
    if plan.step_time_at_target_s:
        lines.append(
            f"at {plan.target_mfu:.0%} MFU a step takes {plan.step_time_at_target_s:.3f} s"
        )
    if plan.topology.slices > 1:
        bandwidth = topology.DCN_BYTES_PER_S.get(plan.topology.generation)
        lines.append(
            f"across {plan.topology.slices} slices each chip sends {plan.dcn_bytes / gib:,.2f} "
            "GiB a step over the data-center network (the gradient reduction)"
            + (f", {plan.dcn_bytes / bandwidth:.3f} s at {bandwidth / 1e9:g} GB/s per chip"
               if bandwidth else ""))
    return "\n".join(lines)
