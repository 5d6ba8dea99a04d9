"""What `zoo plan --search` may compile: every remat preset x per-device batch x sharding
preset x mesh split of the slice that the user did not pin, as `zoo train` overrides, each
with its analytic plan and an analytic step-time estimate.

The analytic plan prunes: a candidate whose analytic memory exceeds a chip's HBM cannot fit
(the compiler's totals are higher: the analytic model leaves out what XLA's scheduling adds).
Its step estimate orders the compiles, and once one compiled candidate fits, those estimated
below ESTIMATE_FLOOR of it are not worth a compile (benchmarks/plan/search.py). The compiled
program ranks the winners.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator

from benchmarks.plan.analytic import Plan, make_plan
from benchmarks.plan.tpu_compile import check_compilable
from core.errors import UserError
from core.mesh import AXES
from core.topology import DCN_BYTES_PER_S, ICI_BYTES_PER_S
from zoo.app.run import Run, resolve_run

# candidates estimated below this share of the best-estimated one that fits are not compiled:
# on llama-tiny, v5p-8
# the estimate put tensor and 4-way context parallelism at 0.73-0.74 of pure FSDP and the
# compiled programs at 0.52-0.75 (benchmarks/results/plan-search.md)
ESTIMATE_FLOOR = 0.75
# remat policy of a checkpointed layer -> matmul FLOPs of a step over a step without remat:
# `full` runs every layer's forward again (3 -> 4 forwards); `minimal` recomputes attention
# and elementwise work only, `save_qkv_proj` also the MLP and output projection (estimates)
RECOMPUTE = {"full": 4 / 3, "offload": 4 / 3, "save_qkv_proj": 1.2, "minimal": 1.1}
# tensor and sequence parallelism exchange activations in every layer: beyond 8 devices
# (a v4/v5p host's ICI neighbourhood, MaxText's largest ici_tensor_parallelism) they stall it
MAX_PER_LAYER_SPLIT = {"tensor": 8, "sequence": 8}


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One configuration: the overrides that select it and what the analytic plan says."""

    overrides: tuple[str, ...]  # the searched keys as `zoo train` takes them
    sharding: str
    mesh: tuple[tuple[str, int], ...]  # axis -> size over all slices, as the run resolves
    remat: str
    remat_cost: tuple[float, int, int]  # (recompute factor, scanned, offloaded): lower is faster
    batch_per_device: int
    plan: Plan
    estimate_s: float  # analytic step seconds, compute + communication
    items_per_step: int

    @property
    def group(self) -> tuple:
        """Candidates that differ only in remat and batch."""
        return self.sharding, self.mesh

    @property
    def items_per_second_per_chip(self) -> float:
        return self.items_per_step / self.plan.topology.chips / self.estimate_s

    def dominates(self, other: Candidate) -> bool:
        """Fitting, this one makes `other` pointless: the same layout with no less batch and
        no more recompute (an unrolled stack is never slower than the same stack scanned)."""
        mine = (self.batch_per_device, self.remat_cost)
        return (self.group == other.group and mine != (other.batch_per_device, other.remat_cost)
                and self.batch_per_device >= other.batch_per_device
                and self.remat_cost <= other.remat_cost)

    def refusal_implies(self, other: Candidate) -> bool:
        """Refused by the compiler, this one means `other` is refused too: the same preset
        and remat with no less batch, on the same mesh or one that trades fsdp shards for
        data parallelism (each device then holds more of the weights)."""
        mine, theirs = dict(self.mesh), dict(other.mesh)
        same_rest = all(mine[a] == theirs[a] for a in mine if a not in ("data", "fsdp"))
        return (self.sharding == other.sharding and self.remat == other.remat and same_rest
                and theirs["data"] >= mine["data"]
                and other.batch_per_device >= self.batch_per_device)


@dataclasses.dataclass
class Space:
    """The candidates the analytic plan keeps, in compile order, and what it cut."""

    planner: Planner
    candidates: list[Candidate]
    considered: int
    invalid: list[str]  # why `zoo train`'s own checks refused some (a mesh axis that splits heads)
    unfit: int  # analytic memory above the chip's HBM
    closest_unfit: Plan | None  # the plan that came closest to fitting, for the error


class Planner:
    """The analytic side of one search: the user's run, with its meta model built once."""

    def __init__(self, model: str, tpu: str, overrides: list[str]):
        self.model, self.tpu, self.overrides = model, tpu, overrides
        self.base = resolve_run(model, [f"tpu={tpu}", *overrides])
        # every candidate is compiled for the slice: one it cannot target fails first
        check_compilable(self.base.topology,
                         "--search (it compiles each configuration with the TPU compiler)")
        self.pinned = {override.partition("=")[0] for override in overrides}
        self.meta_model = self.base.meta_model()

    def candidate(self, choice: tuple[str, ...]) -> Candidate:
        """The candidate these searched overrides make (UserError/ValueError: refused)."""
        run = resolve_run(self.model, [f"tpu={self.tpu}", *self.overrides, *choice])
        plan = make_plan(run, 0.5, self.meta_model)
        remat = run.remat
        factor = RECOMPUTE.get(remat.policy, 4 / 3) if remat.checkpoint else 1.0
        return Candidate(
            overrides=choice, sharding=run.config.sharding,
            mesh=tuple(sorted(run.mesh.items())), remat=run.config.remat,
            remat_cost=(factor, int(bool(remat.scan)), int(remat.policy == "offload")),
            batch_per_device=run.config.global_batch_size // run.topology.devices,
            plan=plan, estimate_s=estimate_seconds(run, plan, factor),
            items_per_step=run.task.items_per_step(run.config))

    def with_batch(self, candidate: Candidate, batch_per_device: int) -> Candidate | None:
        """The same candidate at another per-device batch; None where the batch is pinned
        or the analytic plan refuses it."""
        key = "global_batch_size="
        if not any(o.startswith(key) for o in candidate.overrides):
            return None
        choice = tuple(f"{key}{batch_per_device * self.base.topology.devices}"
                       if o.startswith(key) else o for o in candidate.overrides)
        try:
            found = self.candidate(choice)
        except (UserError, ValueError):
            return None
        return found if found.plan.fits else None


def search_space(model: str, tpu: str, overrides: list[str], max_batch: int) -> Space:
    """Every combination of the keys not in `overrides`, pruned by the analytic plan. Keys
    the user gave (remat=, sharding=, global_batch_size=, any mesh.*) are held fixed."""
    planner = Planner(model, tpu, overrides)
    kept, invalid, unfit, considered, closest = [], [], 0, 0, None
    for choice in _choices(planner.base, planner.pinned, max_batch):
        considered += 1
        try:
            candidate = planner.candidate(choice)
        except (UserError, ValueError) as error:
            invalid.append(str(error))
            continue
        if not candidate.plan.fits:
            unfit += 1
            if closest is None or candidate.plan.total < closest.total:
                closest = candidate.plan
            continue
        kept.append(candidate)
    kept.sort(key=compile_order)
    return Space(planner, kept, considered, invalid, unfit, closest)


def compile_order(candidate: Candidate) -> tuple:
    """Best estimate first; estimates within 5% count as equal (the model is rough), and
    among them the largest batch and the least recompute (whose fit rules out the rest of
    its layout), then the least memory (whose refusal rules out meshes with less fsdp)."""
    bucket = math.floor(math.log(candidate.items_per_second_per_chip) / math.log(1.05))
    return -bucket, -candidate.batch_per_device, candidate.remat_cost, candidate.plan.total


def _choices(base: Run, pinned: set[str], max_batch: int) -> Iterator[tuple[str, ...]]:
    family, topo = base.family, base.topology
    shardings = ([base.config.sharding] if "sharding" in pinned
                 else family.preset_names("sharding"))
    remats = [base.config.remat] if "remat" in pinned else family.preset_names("remat")
    batches = ([None] if "global_batch_size" in pinned
               else [2**k for k in range(max_batch.bit_length()) if 2**k <= max_batch])
    mesh_pinned = any(key.startswith("mesh.") for key in pinned)
    for sharding in shardings:
        meshes = [()] if mesh_pinned else _mesh_splits(family, sharding, topo)
        for mesh in meshes:
            for remat in remats:
                for batch in batches:
                    yield (*(() if "sharding" in pinned else (f"sharding={sharding}",)),
                           *(() if "remat" in pinned else (f"remat={remat}",)),
                           *(() if batch is None else
                             (f"global_batch_size={batch * topo.devices}",)),
                           *mesh)


def _mesh_splits(family, sharding: str, topo) -> list[tuple[str, ...]]:
    """Mesh overrides for every way to split the slice over the axes the preset shards
    parameters over, plus data parallelism; an axis the preset adds beyond fsdp is at
    least 2 (at 1 the preset is the plain fsdp one). Across slices, the data-center
    network splits data or fsdp (the axes whose traffic is once a step or per layer)."""
    from core.sharding import ShardingRules  # yaml

    rules = ShardingRules.from_yaml(family.preset("sharding", sharding))
    named = {axis for rule in rules.params for dim in rule.spec if dim
             for axis in ((dim,) if isinstance(dim, str) else dim)}
    axes = [axis for axis in AXES if axis in named | {"data", "fsdp"}]
    extra = [axis for axis in axes if axis not in ("data", "fsdp")]
    per_slice = topo.devices // topo.slices
    splits = []
    for sizes in _factorizations(per_slice, len(axes)):
        ici = dict(zip(axes, sizes, strict=True))
        if any(ici[axis] == 1 or ici[axis] > MAX_PER_LAYER_SPLIT.get(axis, ici[axis])
               for axis in extra):
            continue
        for dcn in _dcn_splits(topo.slices):
            splits.append((*(f"mesh.{axis}={ici.get(axis, 1)}" for axis in AXES
                             if axis in ("data", "fsdp") or ici.get(axis, 1) > 1),
                           *(f"mesh.dcn.{axis}={n}" for axis, n in dcn.items() if n > 1)))
    return splits


def _dcn_splits(slices: int) -> list[dict[str, int]]:
    if slices == 1:
        return [{}]
    return [{"data": data, "fsdp": fsdp} for data, fsdp in _factorizations(slices, 2)]


def _factorizations(n: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Every ordered way to write n as a product of `parts` divisors."""
    if parts == 1:
        yield (n,)
        return
    for first in (d for d in range(1, n + 1) if n % d == 0):
        for rest in _factorizations(n // first, parts - 1):
            yield (first, *rest)


def estimate_seconds(run: Run, plan: Plan, recompute: float) -> float:
    """Analytic step seconds per chip: matmul FLOPs (with recompute) at peak, plus what
    each chip sends over ICI and DCN, not overlapped. FSDP gathers every weight twice and
    reduce-scatters its gradient (3 passes over the weights, compute dtype); data
    parallelism all-reduces the gradient shard; tensor, sequence and expert parallelism
    exchange a layer's activations four times a layer (forward and backward). A rough
    model that only orders the compiles: the compiled program is what ranks."""
    topo, mesh, cfg = run.topology, run.mesh, run.config
    compute = plan.flops_per_step * recompute / topo.chips / topo.peak_bf16_flops_per_chip
    weights = next(v for k, v in plan.terms.items() if k.startswith("parameters"))
    weights *= 0.5 if cfg.runs_in_bf16(topo) else 1.0  # the fp32 master -> compute dtype
    gather_group = math.prod(mesh[a] for a in ("fsdp", "sequence", "expert"))
    sent = 3 * weights * (gather_group - 1) + 2 * weights * (mesh["data"] - 1) / mesh["data"]
    width, depth = _width_and_depth(cfg.model)
    activation = (run.task.items_per_step(cfg) / topo.devices * mesh["tensor"] * width * 2
                  if width else 0.0)  # one layer's hidden states on a chip, bf16
    exchanges = sum((mesh[a] - 1) / mesh[a] for a in ("tensor", "sequence", "expert"))
    sent += 4 * 2 * depth * activation * exchanges
    over_dcn = plan.dcn_bytes + (3 * weights * (cfg.mesh.dcn.get("fsdp", 1) - 1))
    dcn = over_dcn / DCN_BYTES_PER_S[topo.generation] if over_dcn else 0.0
    return compute + sent / ICI_BYTES_PER_S[topo.generation] + dcn


def _width_and_depth(model_config) -> tuple[int, int]:
    """Hidden size and layer count under the names the families use (0 when unknown)."""
    width = next((getattr(model_config, k) for k in ("hidden_size", "d_model")
                  if hasattr(model_config, k)), 0)
    depth = sum(getattr(model_config, k, 0) for k in ("num_hidden_layers", "num_layers",
                                                        "num_decoder_layers"))
    return width, depth
