"""`zoo plan --compile` for a task that samples on the run's devices between its steps
(GRPO's rollouts; core.task.Task.sampling says with what): the sampler's decode step, the one
graph a rollout runs for every new token, built as `generate` builds it
(core/sampler `Sampler.trace_decode`) on the slice's virtual devices with placeholders,
then compiled by libtpu for the slice beside the train step.

What the step reads is what a rollout holds: the weights in the compute dtype, gathered over
FSDP's axes (the copies the sampler makes once a call: core/backends/xla/sampler_weights.py),
the KV cache and the decode state, split as the xla backend places them."""

from __future__ import annotations

import dataclasses
import time

import torch

from benchmarks.plan.libtpu_compile import compile_text
from benchmarks.plan.tpu_compile import (
    CompiledStep,
    compiled_step,
    entry_parameter_bytes,
    tpu_devices,
)
from core import backends
from core.backends.xla.pallas_tpu import pallas_lowering_for_tpu
from core.backends.xla.runtime import start
from core.backends.xla.spmd import build_mesh, divisible_spec, shard_activations
from core.backends.xla.trace import (
    Placeholders,
    entry_parameter_numbers,
    hlo_sharding_text,
    placeholder_model,
    sharded_hlo_text,
    tensor_ids,
)
from core.inputs import batch_spec
from core.mesh import axis_sizes
from core.out_of_memory import OutOfMemory
from core.remat import apply_remat
from core.sampler import Sampler
from core.sampler.placement import Traced
from core.sharding import gathered_spec, plan_params
from core.task import Sampling
from core.topology import Topology
from zoo.app.run import Run


@dataclasses.dataclass
class CompiledDecode:
    """What libtpu says of one decode step on the slice (per chip), and the rollout it
    serves: `rows` completions of `slots` cache columns, `new_tokens` steps."""

    compiled: CompiledStep | OutOfMemory
    rows: int
    slots: int
    new_tokens: int
    # per chip, summed over the compiled program's entry parameters (their shard shapes)
    weight_bytes: int
    cache_bytes: int
    trace_seconds: float
    # one token's forward for every row, attending over all `slots` (the static cache)
    analytic_flops: float = 0.0
    # the prefill of the rollout's longest prompts (`prompt_bucket` tokens a row), compiled
    # beside the step: the other program a rollout runs with the cache and weights resident
    prefill: CompiledStep | OutOfMemory | None = None
    prompt_bucket: int = 0

    @property
    def programs(self) -> list[CompiledStep | OutOfMemory]:
        return [self.compiled] + ([self.prefill] if self.prefill is not None else [])

    @property
    def all_compiled(self) -> bool:
        return all(isinstance(program, CompiledStep) for program in self.programs)

    @property
    def rollout_program_bytes(self) -> float:
        """The larger of the rollout's programs (call only when all compiled)."""
        return max(program.total_bytes for program in self.programs)

    @property
    def matmuls_uncounted(self) -> bool:
        """libtpu turns a matrix-vector product (one row a chip) into a multiply and a
        reduce, which the compiled matmul count does not see: then it falls well short of
        the analytic count (its cost analysis, as vector work, still has them)."""
        return self.compiled.matmul_flops < 0.5 * self.analytic_flops

    def step_seconds(self, topo: Topology) -> tuple[float, str]:
        """The compiler's estimate of one step (an estimate, a floor), and its source."""
        return self.compiled.roofline_seconds(topo)

    def record(self, topo: Topology, analytic_cache_bytes: float) -> dict:
        step = self.compiled
        shape = {"rows": self.rows, "slots": self.slots, "new_tokens": self.new_tokens,
                 "trace_seconds": self.trace_seconds, "compile_seconds": step.compile_seconds}
        if self.prefill is not None:
            shape["prefill"] = {"prompt_bucket": self.prompt_bucket,
                                "compile_seconds": self.prefill.compile_seconds,
                                "hbm_per_chip": _program_bytes(self.prefill)}
        if isinstance(step, OutOfMemory):
            return {**shape, "hbm_per_chip": _program_bytes(step)}
        seconds, source = self.step_seconds(topo)
        return {
            **shape,
            "hbm_per_chip": {
                "weights": self.weight_bytes, "kv_cache": self.cache_bytes,
                "kv_cache_analytic": analytic_cache_bytes,
                "other_arguments": step.argument_bytes - self.weight_bytes - self.cache_bytes,
                "arguments": step.argument_bytes, "outputs": step.output_bytes,
                "aliased": step.alias_bytes, "temporaries": step.temp_bytes,
                "generated_code": step.code_bytes, "total": step.total_bytes},
            "flops_per_chip": {"analytic": self.analytic_flops,
                               "compiled_matmul": step.matmul_flops,
                               "cost_analysis": step.flops},
            "collectives": step.collectives,
            "compiler_estimate": {"step_seconds": seconds, "source": source,
                                  "rollout_decode_seconds": seconds * self.new_tokens,
                                  "tokens_per_second": self.rows / seconds},
        }


def _program_bytes(program: CompiledStep | OutOfMemory) -> dict:
    """A program's memory per chip as compiled, or what the compiler said when it refused."""
    if isinstance(program, OutOfMemory):
        return {"refused": True, "program_at_least": program.program_bytes,
                "usable": program.usable_bytes, "largest_allocations": program.largest}
    return {"arguments": program.argument_bytes, "outputs": program.output_bytes,
            "aliased": program.alias_bytes, "temporaries": program.temp_bytes,
            "generated_code": program.code_bytes, "total": program.total_bytes}


def compile_decode(run: Run, sampling: Sampling) -> CompiledDecode:
    """Trace the run's decode step and its longest prefill for its slice (on the virtual
    devices the train step's trace started) and compile both with libtpu."""
    topo = run.topology
    devices = tpu_devices(topo)
    began = time.perf_counter()
    prompt_bucket = sampling.shape.slots - sampling.params.max_new_tokens
    with pallas_lowering_for_tpu(devices[0].client.platform_version):
        tracing = RolloutTracing(run, sampling)
        text, weights, cache = tracing.decode_hlo()
        prefill_text, _, _ = tracing.prefill_hlo(prompt_bucket)
    traced = time.perf_counter() - began
    stats, compiled_text = compile_text(text, devices)
    step = compiled_step(stats, compiled_text)
    prefill = compiled_step(*compile_text(prefill_text, devices))
    sizes = entry_parameter_bytes(compiled_text) if compiled_text else {}
    shape = sampling.shape
    per_token = run.family.forward_flops(dataclasses.replace(run.built_config,
                                                             seq_len=shape.slots),
                                         causal=False)
    return CompiledDecode(step, shape.rows, shape.slots, sampling.params.max_new_tokens,
                          sum(sizes.get(i, 0) for i in weights),
                          sum(sizes.get(i, 0) for i in cache), traced,
                          shape.rows * per_token / topo.chips, prefill, prompt_bucket)


class RolloutTracing:
    """The run's model placed as the engine places it (remat, planned sharding, activation
    rules) as placeholders in the compute dtype on the slice's virtual devices, and a
    sampler on it whose cache and state are placeholders too (its `Traced` placement); the
    rollout's programs traced from it as HLO text. Nothing is allocated."""

    def __init__(self, run: Run, sampling: Sampling):
        self.params = sampling.params
        cfg = run.built_config
        start()
        self.mesh = build_mesh(cfg.mesh)
        sizes = axis_sizes(self.mesh)
        self.holders = Placeholders()
        # a tensor object -> its torch_xla id when made (in-place updates give it a new one)
        self.made: dict[int, int] = {}

        def make(shape, dtype, spec):
            tensor = self.holders.make(shape, dtype, divisible_spec(spec, shape, sizes))
            self.made[id(tensor)] = tensor_ids([tensor])[0]
            return tensor

        bf16 = cfg.runs_in_bf16(run.topology)
        self.model = run.meta_model(cfg.model)
        apply_remat(self.model, run.remat)
        # the weights as the xla backend's sampler reads them: gathered over FSDP's axes
        specs = {p.name: gathered_spec(p.spec)
                 for p in plan_params(self.model, run.rules, sizes)}
        cast_parameters(self.model, torch.bfloat16 if bf16 else torch.float32)
        placeholder_model(self.model, specs, self.holders)
        shard_activations(self.model, run.rules, self.mesh)
        placement = Traced(backends.get("xla"), self.mesh, make,
                           lambda shape: batch_spec(shape, sizes))
        self.sampler = Sampler(self.model, sampling.layout, shape=sampling.shape, bf16=bf16,
                               placement=placement)

    def decode_hlo(self) -> tuple[str, list[int], list[int]]:
        """(HLO text of the sharded decode step, the entry parameter numbers of its weights,
        those of its KV cache). The cache and the state's columns are updated in place, so
        their outputs alias their inputs (torch_xla donates them)."""
        traced = self.sampler.trace_decode(self.params)
        after = traced.after
        return self._hlo(traced.cache, [after.cur, after.last, after.done],
                         [traced.before.tokens, traced.before.logprobs])

    def prefill_hlo(self, prompt_tokens: int) -> tuple[str, list[int], list[int]]:
        """As `decode_hlo`, for the prefill of rows of `prompt_tokens` tokens, which writes
        the cache and the state's first columns in place."""
        traced = self.sampler.trace_prefill(self.params, prompt_tokens)
        state = traced.state
        return self._hlo(traced.cache, [state.last, state.done], [state.tokens, state.logprobs])

    def _hlo(self, cache, outputs, state_columns) -> tuple[str, list[int], list[int]]:
        """(the HLO text of the graph computing `outputs` and updating the cache and
        `state_columns` in place, the entry parameter numbers of the weights, those of the
        cache's streams)."""
        streams = [s for layer in cache.layers for s in layer.streams.values()]
        positions = [*cache.ring_positions.values(),
                     *([] if cache.source_positions is None else [cache.source_positions])]
        updated = [*streams, *state_columns, *positions]
        shardings: dict = {}

        def sharding(spec):
            if spec not in shardings:
                shardings[spec] = hlo_sharding_text(self.mesh, spec)
            return shardings[spec]

        number = entry_parameter_numbers([*outputs, *updated])  # as sharded_hlo_text's
        text, _ = sharded_hlo_text(outputs, updated, [self.made[id(t)] for t in updated],
                                   self.holders, sharding)
        weights = [number[i] for i in tensor_ids(list(self.model.parameters())) if i in number]
        cache_ids = [self.made[id(stream)] for stream in streams]
        return text, weights, [number[i] for i in cache_ids if i in number]


def cast_parameters(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Every floating-point parameter of a meta-device model as `dtype`, in place (tied ones
    stay tied): the copies the sampler's autocast makes, which its decode step reads."""
    cast: dict[int, torch.nn.Parameter] = {}
    for module in model.modules():
        for name, param in module._parameters.items():
            if param is not None and param.is_floating_point() and param.dtype != dtype:
                if id(param) not in cast:
                    cast[id(param)] = torch.nn.Parameter(param.detach().to(dtype),
                                                         requires_grad=False)
                module._parameters[name] = cast[id(param)]
