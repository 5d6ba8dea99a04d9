"""`zoo plan --compile`: the exact train step `zoo train` would run on a slice (model,
loss, backward, clipping, optimizer, schedule, grad accumulation; the same sharding and
remat presets and precision), traced on as many virtual devices as the slice has with
placeholders instead of tensors, then compiled by libtpu for the slice's topology; for a
task that samples between steps (GRPO's rollouts), its sampler's decode step too
(benchmarks/plan/decode_step.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import time
from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.plan.analytic import Plan, describe, fit_advice, make_plan
from benchmarks.plan.decode_step import CompiledDecode, compile_decode
from benchmarks.plan.step_model import StepModel, project
from benchmarks.plan.tpu_compile import CompiledStep, compile_hlo, compile_target, tpu_devices
from core import backends, runtime, topology
from core.backends.xla.pallas_tpu import pallas_lowering_for_tpu
from core.backends.xla.runtime import detect, start, started
from core.backends.xla.spmd import build_mesh, shard_activations
from core.backends.xla.trace import (
    Placeholders,
    follow_hoisted_placeholders,
    hlo_sharding_text,
    placeholder_batch,
    placeholder_model,
    placeholder_optimizer_state,
    sharded_hlo_text,
    state_tensors,
    tensor_ids,
)
from core.errors import UserError
from core.inputs import batch_spec
from core.mesh import axis_sizes
from core.out_of_memory import OutOfMemory
from core.remat import SCAN_POLICIES, LayerStack, apply_remat
from core.sharding import plan_params
from core.step import TrainStep
from core.table import format_bytes, format_table
from zoo.app.run import Run


def use_virtual_devices(topo: topology.Topology) -> None:
    """XLA:CPU with one virtual device per device of the slice; must precede the XLA
    runtime's start."""
    wanted = str(topo.devices)
    if started():
        info = detect()
        if info.pjrt_device != "CPU" or info.device_count != topo.devices:
            raise UserError(f"this process already runs XLA on other devices; plan "
                            f"{topo.name} in a fresh process")
        return
    os.environ["PJRT_DEVICE"] = "CPU"
    os.environ["CPU_NUM_DEVICES"] = wanted
    runtime.configure()


def trace_step_hlo(run: Run) -> tuple[str, str, int]:
    """(HLO text of the run's sharded train step, attention it computes, bytes of its
    inputs that are not planned placeholders), traced for the run's topology."""
    use_virtual_devices(run.topology)
    with pallas_lowering_for_tpu(tpu_devices(run.topology)[0].client.platform_version):
        return _trace(run)


def _trace(run: Run) -> tuple[str, str, int]:
    rules, topo = run.rules, run.topology
    cfg = run.built_config
    start()
    mesh = build_mesh(cfg.mesh)
    holders = Placeholders()

    def place(module):
        """`module` as the engine places it (remat, planned sharding), as placeholders."""
        apply_remat(module, run.remat)
        plan = plan_params(module, rules, axis_sizes(mesh))
        placeholder_model(module, {p.name: p.spec for p in plan}, holders)
        shard_activations(module, rules, mesh)
        return module

    model = run.meta_model(cfg.model)
    # what the task places beside the model (DPO's reference copy) is traced as `zoo train`
    # binds it, so the compiled step holds it as it will (core/engine.py)
    task = run.task.bind(model, cfg, place)
    model = place(model)
    # compile-only devices cannot run gradient_accumulation's input syncs: unrolled here
    step = TrainStep.around(model, cfg, task, backends.get("xla"), cfg.runs_in_bf16(topo),
                            fill_state=lambda optimizer: placeholder_optimizer_state(optimizer,
                                                                                     holders),
                            accumulate_in_loop=False)
    batch = placeholder_batch(task.example_batch(cfg),
                              functools.partial(batch_spec, mesh_axes=axis_sizes(mesh)), holders)
    updated = state_tensors(model, step.optimizer)
    sources = tensor_ids(updated)
    # the backward runs on the calling thread: torch's autograd engine keeps one queue per
    # device, counted in 8 bits, and fails (INTERNAL ASSERT) past 127 virtual devices
    with follow_hoisted_placeholders(holders), torch.autograd.set_multithreading_enabled(False):
        metrics = step(batch)
    outputs = [v for v in metrics.values() if isinstance(v, torch.Tensor)]
    cache: dict = {}

    def sharding(spec):
        if spec not in cache:
            cache[spec] = hlo_sharding_text(mesh, spec)
        return cache[spec]

    text, unplanned = sharded_hlo_text(outputs, updated, sources, holders, sharding)
    return text, attention_kind(model), unplanned


def attention_kind(model) -> str:
    """'flash' when the model's attention layers run the Pallas kernel, else 'eager'."""
    return "flash" if any(getattr(m, "use_flash", False) for m in model.modules()) else "eager"


def executed_flops_per_step(run, cfg, flash: bool) -> float:
    """Matmul FLOPs of the whole step as it executes: forward and backward counted by
    FlopCounterMode on the meta device with the run's remat preset applied, so every
    checkpointed call runs its forward again in backward; scanned stacks run as their Python
    loop, recomputing what their remat policy does not keep. Attention counts dense, as
    eager attention computes it and as the flash kernels declare their cost; flash's
    backward also recomputes the scores: 7 attention matmuls where eager's backward has 4."""
    family = run.family
    if not flash:
        return _meta_train_step_flops(run, cfg)
    forward = family.forward_flops(cfg, causal=False)
    attention = 2 * (forward - family.forward_flops(cfg, causal=True))  # dense, per item
    items = run.task.items_per_step(cfg)
    return _meta_train_step_flops(run, cfg) + 1.5 * attention * items


def _meta_train_step_flops(run, cfg) -> float:
    """FLOPs of the loss's forward and backward on a meta-device model (nothing allocated),
    attention as plain matmuls (FlopCounterMode cannot see inside a flash kernel). The
    step runs twice and the second run is counted: the first traces the scanned layers."""
    def forward(self, hidden, *extras):  # the scan path off XLA too
        return self._scan(hidden, extras) if self.scan else original_forward(self, hidden, *extras)

    plain = {"attention": "plain"} if hasattr(cfg.model, "attention") else {}
    model = run.meta_model(dataclasses.replace(cfg.model, **plain))
    apply_remat(model, run.remat)
    batch = {k: v.to("meta") for k, v in run.task.example_batch(cfg).items()}
    counter = FlopCounterMode(display=False)
    original_loop, original_forward = LayerStack._scan_tail, LayerStack.forward
    LayerStack._scan_tail, LayerStack.forward = _partitioned_layers, forward
    try:
        for context in (contextlib.nullcontext(), counter):
            with context:
                loss, _ = run.task.loss(model, batch)
                loss.backward()
    finally:
        LayerStack._scan_tail, LayerStack.forward = original_loop, original_forward
    return counter.get_total_flops()


def _partitioned_layers(stack, hidden, extras):
    """A scanned stack's loop run eagerly, layer by layer, through the same AOTAutograd
    partition torch_xla's scan compiles (its remat policy's, or keep-everything): backward
    recomputes what the scan's backward recomputes, and nothing it leaves out."""
    from functorch.compile import aot_function, default_partition, make_boxed_func  # start-up

    step = stack.__dict__.get("_counted_step")
    if step is None:
        def keep(graph, _inputs):  # the graph's code, not the module: FlopCounterMode hooks
            return make_boxed_func(graph.forward)  # module calls, which fail inside autograd

        partition = SCAN_POLICIES[stack.scan_policy] if stack.scan_policy else default_partition
        step = aot_function(functools.partial(LayerStack._layer_step, stack), fw_compiler=keep,
                            bw_compiler=keep, partition_fn=partition)
        stack.__dict__["_counted_step"] = step
    weights = stack._stacked()
    carry, per_layer = (hidden, *stack.carried_extras(extras)), []
    for i in range(len(next(iter(weights.values())))):
        carry, outputs = step(carry, {name: w[i] for name, w in weights.items()})
        per_layer.append(outputs)
    if per_layer[0] is None:
        return carry[0]
    return (carry[0], *(torch.stack(values) for values in zip(*per_layer, strict=True)))


@dataclasses.dataclass
class CompiledPlan:
    """The analytic plan side by side with what libtpu compiled for the slice."""

    analytic: Plan
    compiled: CompiledStep | OutOfMemory
    attention: str  # what the compiled program computes attention with
    executed_flops_per_chip: float  # analytic, with recompute and attention as executed
    trace_seconds: float
    target: dict  # the compiler's topology arguments
    unplanned_input_bytes: int = 0  # step inputs that are not placeholders (unsharded)
    # the task's sampler's decode step (Task.sampling), compiled for the same slice
    decode: CompiledDecode | None = None

    @property
    def hbm_bytes(self) -> int:
        return self.analytic.hbm_bytes

    @property
    def rollout_compiled(self) -> bool:
        """The task's rollout programs (decode step, longest prefill) all compiled."""
        return self.decode is not None and self.decode.all_compiled

    @property
    def beside_step_bytes(self) -> float:
        """What the task holds on a chip between programs (a sampler's KV cache): the
        compiled step never sees it, so its total is short of it (analytic, per chip)."""
        return sum(entry.bytes for entry in self.analytic.placed if not entry.in_step)

    @property
    def rollout_bytes(self) -> float:
        """Per chip while the task samples: the persistent state (the update step's
        arguments: parameters, optimizer state, what the task places for the step) and the
        larger of the rollout's programs, each whole (the weights as the sampler reads them,
        the KV cache, its state and temporaries: the decode step's, or its longest
        prefill's). Call only when all compiled."""
        return self.compiled.argument_bytes + self.decode.rollout_program_bytes

    @property
    def total_bytes(self) -> float:
        """The peak per chip. With the decode step compiled: the larger of the update
        step's total and the rollout's (`rollout_bytes`), the two programs never running
        at once; else the compiled step's total and, on top, what the task holds beside it
        (analytic)."""
        if self.rollout_compiled:
            return max(self.compiled.total_bytes, self.rollout_bytes)
        return self.compiled.total_bytes + self.beside_step_bytes

    @property
    def fits(self) -> bool:
        """The compiler decides: it refused a program (the step, or the task's decode
        step), or the per-chip peak (arguments included, which its own check leaves out)
        exceeds the chip's HBM."""
        refused = self.decode is not None and not self.rollout_compiled
        return (isinstance(self.compiled, CompiledStep) and not refused
                and self.total_bytes <= self.hbm_bytes)

    def step_model(self) -> StepModel:
        """The projected step of the compiled program (call only when it compiled)."""
        step = self.compiled
        return project(step.matmul_flops, step.bytes_accessed, step.collectives,
                       self.analytic.topology, step.dcn_collectives)

    def record(self) -> dict:
        """The `--json` record: every number the console shows."""
        plan, step, topo = self.analytic, self.compiled, self.analytic.topology
        record = {
            "model": plan.model,
            "slice": topo.name,
            "chips": topo.chips,
            "hosts": topo.hosts,
            "compile_target": {**self.target, "wrap": list(self.target["wrap"]),
                               "chips_per_host_bounds": list(self.target["chips_per_host_bounds"])},
            "mesh": plan.mesh,
            "attention": self.attention,
            "fits": self.fits,
            "fits_analytic": plan.fits,
            "compile_seconds": step.compile_seconds,
            "trace_seconds": self.trace_seconds,
            "unplanned_input_bytes": self.unplanned_input_bytes,
            "beside_model": [dataclasses.asdict(entry) for entry in plan.placed],
        }
        if self.decode is not None:
            cache = next((e.bytes for e in plan.placed if e.in_decode == "cache"), 0.0)
            record["decode_step"] = self.decode.record(topo, cache)
        analytic_hbm = {**plan.terms, "total": plan.total}
        model_flops = plan.flops_per_step / topo.chips
        flops = {"analytic_executed": self.executed_flops_per_chip,
                 "analytic_model": model_flops}
        if isinstance(step, OutOfMemory):
            return {**record,
                    "hbm_per_chip": {"chip": self.hbm_bytes, "analytic": analytic_hbm,
                                     "compiled": {"refused": True,
                                                  "program_at_least": step.program_bytes,
                                                  "usable": step.usable_bytes,
                                                  "largest_allocations": step.largest}},
                    "flops_per_chip": flops, "collectives": None, "compiler_estimate": None}
        roofline, source = step.roofline_seconds(topo)
        return {
            **record,
            "hbm_per_chip": {
                "chip": self.hbm_bytes,
                "compiled": {"arguments": step.argument_bytes, "outputs": step.output_bytes,
                             "aliased": step.alias_bytes, "temporaries": step.temp_bytes,
                             "generated_code": step.code_bytes,
                             "beside_step": self.beside_step_bytes,
                             **({"rollout": self.rollout_bytes} if self.rollout_compiled
                                else {}),
                             "total": self.total_bytes,
                             "total_is": ("peak: persistent state + the larger of the update's "
                                          "transients and the decode step"
                                          if self.rollout_compiled else
                                          "the step's total + what the task holds beside "
                                          "it (analytic)")},
                "analytic": analytic_hbm,
                "compiled_over_analytic": self.total_bytes / plan.total,
            },
            "flops_per_chip": {**flops, "compiled_matmul": step.matmul_flops,
                               "compiled_matmul_loop_bodies_once": step.matmul_flops_once,
                               "compiled_over_executed":
                                   step.matmul_flops / self.executed_flops_per_chip,
                               "cost_analysis": step.flops,
                               "cost_analysis_vector_share": step.vector_flops_share,
                               "loop_trips": step.loop_trips},
            "collectives": step.collectives,
            **({"dcn_collectives": step.dcn_collectives} if topo.slices > 1 else {}),
            "projected_step": self.step_model().record(),
            "projected_mfu": self.step_model().mfu(model_flops, topo.peak_bf16_flops_per_chip),
            "compiler_estimate": {
                "step_seconds": roofline,
                "source": source,
                "mfu_ceiling": model_flops / (roofline * topo.peak_bf16_flops_per_chip),
            },
        }


def compile_plan(run: Run, target_mfu: float = 0.5,
                 progress: Callable[[Plan], object] | None = None) -> CompiledPlan:
    """Trace `zoo train`'s step for the run's slice and compile it with libtpu; `progress`
    is handed the analytic plan before the minutes of tracing and compiling start."""
    analytic = make_plan(run, target_mfu)
    topo = run.topology
    compile_target(topo)  # a slice the compiler cannot target fails first
    if progress:
        progress(analytic)
    start = time.perf_counter()
    text, attention, unplanned = trace_step_hlo(run)
    traced = time.perf_counter() - start
    cfg = run.built_config
    executed = executed_flops_per_step(run, cfg, attention == "flash")
    sampling = run.task.sampling(cfg, run.mesh)
    return CompiledPlan(analytic, compile_hlo(text, topo), attention, executed / topo.chips,
                        traced, compile_target(topo), unplanned,
                        compile_decode(run, sampling) if sampling else None)


def persistent_bytes(plan: Plan) -> float:
    """Analytic bytes per chip the step reads and keeps across steps, the compiled
    program's arguments: parameters, optimizer state and what the task places for the step
    (DPO's reference copy)."""
    placed = sum(entry.bytes for entry in plan.placed if entry.in_step)
    return placed + sum(v for k, v in plan.terms.items()
                        if k.startswith(("parameters", "optimizer")))


def _persistent_label(plan: Plan) -> str:
    return " + ".join(["parameters", "optimizer state",
                       *(entry.name for entry in plan.placed if entry.in_step)]) + " (+ batch)"


def describe_compiled(plan: CompiledPlan, analytic: bool = True) -> str:
    """The compiled plan, after the analytic one unless that was printed already."""
    record, topo = plan.record(), plan.analytic.topology
    hbm, flops, step = record["hbm_per_chip"], record["flops_per_chip"], plan.compiled
    first = [describe(plan.analytic), ""] if analytic else []
    heading = (f"compiled by libtpu for {record['compile_target']['topology_name']} "
               f"({topo.chips} chips, {topo.hosts} host(s)) in {step.compile_seconds:.1f} s "
               f"(traced in {plan.trace_seconds:.1f} s); attention: {plan.attention}")
    if isinstance(step, OutOfMemory):
        return "\n".join([
            *first, heading,
            f"does NOT fit, by the compiler's numbers: the program alone needs at least "
            f"{format_bytes(step.program_bytes)} of the {format_bytes(step.usable_bytes)} HBM "
            f"the compiler may use per chip; its check leaves out the arguments, "
            f"{format_bytes(persistent_bytes(plan.analytic))} of "
            f"{_persistent_label(plan.analytic).removesuffix(' (+ batch)')} per chip "
            "(analytic)",
            "  largest allocations: " + "; ".join(step.largest),
            *([fit_advice(plan.analytic)] if plan.analytic.fits else []),
            *_rollout_lines(plan),
        ])
    persistent, beside = persistent_bytes(plan.analytic), plan.beside_step_bytes
    rows = [
        (_persistent_label(plan.analytic), format_bytes(persistent),
         format_bytes(step.argument_bytes)),
        ("gradients, activations, gathered weights",
         format_bytes(plan.analytic.total - persistent - beside),
         format_bytes(step.temp_bytes + step.output_bytes - step.alias_bytes)),
        ("generated code", "-", format_bytes(step.code_bytes)),
        *((entry.name + (" (the decode step's)" if plan.rollout_compiled
                         else " (beside the step: analytic)"), format_bytes(entry.bytes),
           format_bytes(_compiled_beside(plan, entry)))
          for entry in plan.analytic.placed if not entry.in_step),
        ("total HBM" + (" (compiled: the peak, update or rollout)" if plan.rollout_compiled
                        else ""),
         format_bytes(plan.analytic.total), format_bytes(plan.total_bytes)),
        ("matmul FLOPs per step (as executed)", f"{flops['analytic_executed']:.3e}",
         f"{flops['compiled_matmul']:.3e}"),
    ]
    verdict = "fits" if plan.fits else "does NOT fit"
    decode_refused = plan.decode is not None and not plan.rollout_compiled
    lines = [
        *first,
        heading,
        format_table(("per chip", "analytic", "compiled"), rows),
        "does NOT fit by the compiler's numbers: the compiler refused a program of the "
        "rollout (below)" if decode_refused else
        f"{verdict} by the compiler's numbers: {format_bytes(plan.total_bytes)} of "
        f"{format_bytes(plan.hbm_bytes)} HBM per chip "
        f"(compiled / analytic = {hbm['compiled_over_analytic']:.2f})",
    ]
    if abs(hbm["compiled_over_analytic"] - 1) > 0.15:
        lines.append("  why they differ: " + hbm_difference_note(plan))
    lines += _rollout_lines(plan)
    trips = "/".join(map(str, sorted(set(step.loop_trips) - {1})))
    lines += [
        f"matmul FLOPs per chip: compiled / analytic as executed = "
        f"{flops['compiled_over_executed']:.3f} (compiled: the program's dots, convolutions "
        f"and Pallas kernels{', every trip of its ' + trips + '-trip loops' if trips else ''}; "
        "as executed: attention as computed, plus remat recompute; model FLOPs for MFU: "
        f"{flops['analytic_model']:.3e})",
        f"  the compiler's cost analysis counts {flops['cost_analysis']:.3e}"
        f"{', each loop body once' if trips else ''}; "
        f"{flops['cost_analysis_vector_share']:.1%} of it is vector work (elementwise ops, "
        "reductions, the fp32 loss over the vocabulary), which model FLOPs leave out",
    ]
    if plan.unplanned_input_bytes > 2**20:
        lines.append(
            f"  {format_bytes(plan.unplanned_input_bytes)} of the step's inputs are device "
            "data it made itself, not planned placeholders, and are compiled unsharded: "
            "arguments may be overstated by up to that much")
    lines.append("collectives per chip per step: " + _collectives_text(record["collectives"]))
    if topo.slices > 1:
        lines.append(f"  across the {topo.slices} slices (data-center network): "
                     + _collectives_text(record["dcn_collectives"]))
    model, mfu = record["projected_step"], record["projected_mfu"]
    lines.append(
        f"projected step ({model['label']}): {_seconds(model['overlapped_s'])} with "
        f"communication overlapped, {_seconds(model['exposed_s'])} exposed (compute "
        f"{_seconds(model['compute_s'])}, HBM {_seconds(model['memory_s'])}, ICI "
        f"{_seconds(model['communication_s'])}"
        + (f", DCN {_seconds(model['dcn_s'])}" if topo.slices > 1 else "")
        + f"); projected MFU {mfu['overlapped']:.1%} overlapped, {mfu['exposed']:.1%} exposed")
    estimate = record["compiler_estimate"]
    lines.append(
        f"compiler's estimate, not a measurement: {estimate['step_seconds'] * 1e3:,.1f} ms/step "
        f"({estimate['source']}), an MFU ceiling of {estimate['mfu_ceiling']:.0%}"
    )
    if not plan.fits and plan.analytic.fits:
        lines.append(fit_advice(plan.analytic))
    return "\n".join(lines)


def _rollout_lines(plan: CompiledPlan) -> list[str]:
    """The task's decode step as compiled (none when the task does not sample): its HBM
    split into what a rollout holds, the peak it makes with the persistent state, and its
    FLOPs and the compiler's time per token."""
    decode = plan.decode
    if decode is None:
        return []
    step, topo = decode.compiled, plan.analytic.topology
    heading = (f"rollout: the task's sampler's decode step ({decode.rows} rows x "
               f"{decode.slots} cache slots, {decode.new_tokens} new tokens), compiled in "
               f"{step.compile_seconds:.1f} s (traced in {decode.trace_seconds:.1f} s)")
    advice = [entry.advice for entry in plan.analytic.placed if entry.advice
              and not entry.in_step]
    if isinstance(step, OutOfMemory):
        return [heading,
                f"the decode step does NOT fit, by the compiler's numbers: it needs at least "
                f"{format_bytes(step.program_bytes)} of the {format_bytes(step.usable_bytes)} "
                "HBM the compiler may use per chip",
                "  largest allocations: " + "; ".join(step.largest), *advice]
    analytic = {entry.in_decode: entry for entry in plan.analytic.placed if entry.in_decode}

    def named(kind: str, default: str) -> str:
        entry = analytic.get(kind)
        return (entry.name + f" (analytic {format_bytes(entry.bytes)})") if entry else default

    rows = [
        (named("weights", "weights as the sampler reads them"),
         format_bytes(decode.weight_bytes)),
        (named("cache", "KV cache"), format_bytes(decode.cache_bytes)),
        ("decode state, sampling inputs",
         format_bytes(step.argument_bytes - decode.weight_bytes - decode.cache_bytes)),
        ("temporaries, outputs, generated code",
         format_bytes(step.total_bytes - step.argument_bytes)),
        ("decode step total", format_bytes(step.total_bytes)),
    ]
    seconds, source = decode.step_seconds(topo)
    lines = [heading, format_table(("per chip", "compiled"), rows), *_prefill_lines(decode)]
    if isinstance(plan.compiled, CompiledStep) and plan.rollout_compiled:
        update = plan.compiled
        prefill = (f", the longest prefill {format_bytes(decode.prefill.total_bytes)}"
                   if decode.prefill is not None else "")
        lines.append(
            f"peak HBM per chip: persistent state (the update step's arguments, "
            f"{format_bytes(update.argument_bytes)}) + the largest of the update's transients "
            f"({format_bytes(update.total_bytes - update.argument_bytes)}) and the rollout's "
            f"programs (the decode step {format_bytes(step.total_bytes)}{prefill}) = "
            f"{format_bytes(plan.total_bytes)}: no two of them run at once (the analytic "
            "plan sums them all: a bound)")
    lines += [
        f"decode step FLOPs per chip: analytic {decode.analytic_flops:.3e} (one token's "
        f"forward for every row over all {decode.slots} slots), compiled matmuls "
        f"{step.matmul_flops:.3e}, the compiler's cost analysis {step.flops:.3e}"
        + ("; with so few rows a chip libtpu computes the weights' matrix-vector products "
           "as multiplies and reduces, which only the cost analysis counts"
           if decode.matmuls_uncounted else ""),
        "  collectives per chip per step: " + _collectives_text(step.collectives),
        f"  compiler's estimate, not a measurement: {_seconds(seconds)} a step ({source}), "
        f"{decode.rows / seconds:,.0f} tokens/s on the slice, "
        f"{_seconds(seconds * decode.new_tokens)} for a rollout's {decode.new_tokens} steps "
        "(its prefills apart)"]
    if not plan.fits and (not plan.rollout_compiled or plan.total_bytes == plan.rollout_bytes):
        lines += advice  # the rollout is what does not fit
    return lines


def _prefill_lines(decode: CompiledDecode) -> list[str]:
    """The longest prefill as compiled: its total, or the compiler's refusal."""
    prefill = decode.prefill
    if prefill is None:
        return []
    what = f"the longest prefill ({decode.rows} rows x {decode.prompt_bucket} prompt tokens)"
    if isinstance(prefill, OutOfMemory):
        return [f"{what} does NOT fit, by the compiler's numbers: it needs at least "
                f"{format_bytes(prefill.program_bytes)} of the "
                f"{format_bytes(prefill.usable_bytes)} HBM the compiler may use per chip",
                "  largest allocations: " + "; ".join(prefill.largest)]
    return [f"{what}, compiled in {prefill.compile_seconds:.1f} s: "
            f"{format_bytes(prefill.total_bytes)} per chip, "
            f"{format_bytes(prefill.total_bytes - prefill.argument_bytes)} of it temporaries, "
            "outputs and code"]


def _seconds(value: float) -> str:
    return f"{value:.3f} s" if value >= 1 else f"{value * 1e3:.3g} ms"


def _collectives_text(collectives: dict) -> str:
    return ", ".join(f"{kind} x{v['count']} ({format_bytes(v['bytes'])})"
                     for kind, v in collectives.items()) or "none"


def hbm_difference_note(plan: CompiledPlan) -> str:
    """Where compiled and analytic HBM part: the persistent state (parameters and optimizer
    state, the program's arguments) or the step's transients (gradients, activations,
    gathered weights: its temporaries)."""
    step, persistent = plan.compiled, persistent_bytes(plan.analytic)
    transient = plan.analytic.total - persistent - plan.beside_step_bytes
    note = (
        f"persistent state compiled {format_bytes(step.argument_bytes)} vs analytic "
        f"{format_bytes(persistent)}; transients (gradients, activations, gathered "
        f"weights, code) compiled {format_bytes(step.total_bytes - step.argument_bytes)} vs "
        f"analytic {format_bytes(transient)} -- the analytic activation model (Korthikanti et al.) "
        "does not see XLA's fusion, buffer reuse and scheduling, nor the weights FSDP "
        "gathers ahead of use; the compiler's numbers decide fit"
    )
    reduced = full_gradient_all_reduce_bytes(plan)
    if reduced:
        note += (
            f"; and libtpu all-reduces the gradients in full ({format_bytes(reduced)} per "
            "step, where the analytic model has each chip reduce only its gradient shard) "
            "and slices them after, as it does on 3-D slices for JAX's FSDP too"
        )
    return note


def full_gradient_all_reduce_bytes(plan: CompiledPlan) -> float:
    """All-reduce bytes when the compiler sums FSDP gradients with whole-gradient
    all-reduces (no reduce-scatter; at least half a bf16 gradient of the fsdp group's
    parameters), else 0."""
    collectives = plan.compiled.collectives
    fsdp = plan.analytic.mesh.get("fsdp", 1)
    if fsdp == 1 or "reduce-scatter" in collectives:
        return 0.0
    params = next(v for k, v in plan.analytic.terms.items() if k.startswith("parameters"))
    reduced = collectives.get("all-reduce", {"bytes": 0})["bytes"]
    return reduced if reduced >= params * fsdp / 4 else 0.0


def _compiled_beside(plan, entry) -> float:
    """What the compiled plan shows for a share the task holds beside the step: the compiled
    decode step's own figure where it reads it, else the analytic count."""
    if plan.rollout_compiled and entry.in_decode:
        decode = plan.decode
        return {"cache": decode.cache_bytes, "weights": decode.weight_bytes}[entry.in_decode]
    return entry.bytes
