"""The real TPU compiler without a TPU: libtpu in compile-only mode (through JAX's
compile-only client) compiles an SPMD HLO program for a slice's topology and reports what
the slice would see: per-chip memory, FLOPs, the compiler's roofline time and the
collectives it inserted. Nothing runs; the numbers are the compiler's, not a measurement.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import re

from benchmarks.plan.libtpu_compile import STAT_FIELDS, compile_text, topology_devices
from core.errors import UserError
from core.out_of_memory import OutOfMemory, parse_out_of_memory
from core.topology import HBM_BYTES_PER_S, Topology

ELEMENT_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "bf16": 2, "f16": 2,
                 "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "f8e4m3fn": 1,
                 "f8e5m2": 1}
COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")


@dataclasses.dataclass
class CompiledStep:
    """What the TPU compiler says of one program on one slice (per chip)."""

    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int
    code_bytes: int
    flops: float  # per chip per step, the compiler's cost analysis: all work, loop bodies once
    # matmul FLOPs per chip per step counted in the compiled program, every loop trip
    matmul_flops: float
    bytes_accessed: float  # HBM traffic per chip per step, from the same analysis
    optimal_seconds: float | None  # the compiler's own step-time estimate (if it gives one)
    collectives: dict  # kind -> {"count": n, "bytes": b}, loop bodies times their trip count
    compile_seconds: float
    # trip counts of the program's loops (scan); the cost analysis counts each body once
    loop_trips: list[int] = dataclasses.field(default_factory=list)
    matmul_flops_once: float = 0.0  # the same matmuls with each loop body counted once
    # collectives as above that cross slices over the data-center network (multi-slice)
    dcn_collectives: dict = dataclasses.field(default_factory=dict)

    def roofline_seconds(self, topo: Topology) -> tuple[float, str]:
        """The compiler's step-time estimate and where it comes from: its own
        `optimal_seconds` when it gives one, else the roofline of its FLOPs and HBM bytes
        against the chip's peaks (communication not counted). Its cost analysis counts each
        loop body once: the matmuls of the other trips are added back; its HBM bytes cannot
        be, so under loops that term is a lower bound (the optimizer's traffic, outside the
        loops, often dominates it). An estimate, never a measurement: a floor on step time."""
        uncounted = self.matmul_flops - self.matmul_flops_once
        if self.optimal_seconds:
            scale = (self.flops + uncounted) / self.flops if self.flops else 1.0
            return self.optimal_seconds * scale, "the compiler's optimal_seconds"
        compute = (self.flops + uncounted) / topo.peak_bf16_flops_per_chip
        memory = self.bytes_accessed / HBM_BYTES_PER_S[topo.generation]
        source = "roofline of the compiler's FLOPs and HBM bytes"
        if uncounted > 0:
            source += (", with every loop trip's matmuls; HBM bytes with loop bodies once "
                       "(a lower bound)")
        return max(compute, memory), source

    @property
    def vector_flops_share(self) -> float:
        """Share of the compiler's FLOP count that is not matmul work (elementwise ops,
        reductions, the fp32 loss over the vocabulary), as its cost analysis counts it."""
        return max(0.0, 1 - self.matmul_flops_once / self.flops) if self.flops else 0.0

    @property
    def total_bytes(self) -> int:
        """Peak HBM per chip: inputs, outputs not aliased to inputs, scratch and code."""
        return (self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes
                + self.code_bytes)


def compile_target(topo: Topology) -> dict:
    """`get_topology_desc` arguments for a job: chip kind, each slice's 3-D (v4/v5p) or 2-D
    chip grid, megacore for chips whose two TensorCores act as one device, chips per host,
    wrap, and how many slices (their devices come slice by slice)."""
    check_compilable(topo, "--compile")
    one = topo.one_slice()
    chips = one.chips
    if topo.generation in ("v4", "v5p"):
        dims = _cube_order(chips)
        bounds = (2, 2, 1) if chips >= 4 else tuple(dims)
        wrap = tuple(d >= 4 and chips >= 64 for d in dims)  # full 4x4x4 cubes are tori
        shape, config = "x".join(map(str, dims)), "megacore"
    else:
        x = 1 << ((chips.bit_length() - 1) // 2)
        dims = (x, chips // x)
        bounds = (2, 2, 1) if one.hosts > 1 else (dims[0], dims[1], 1)
        wrap = (False, False, False)
        shape, config = "x".join(map(str, dims)), "default"
    return {"topology_name": f"{topo.generation}:{shape}", "chip_config_name": config,
            "chips_per_host_bounds": bounds, "num_slices": topo.slices, "wrap": wrap}


def check_compilable(topo: Topology, what: str) -> None:
    """Refuse, in one line naming `what` asked for it, a slice the TPU compiler cannot
    target: CPU devices (no compiler to ask; the analytic plan is all there is) and v2/v3."""
    if not topo.is_tpu or topo.generation in ("v2", "v3"):
        raise UserError(f"{what} needs a v4, v5p, v5e or v6e slice, not {topo.name}")


def _cube_order(chips: int) -> tuple[int, int, int]:
    """v4/v5p chip grids as Google lays them out: 2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4, 4x4x8..."""
    if chips < 4:
        return (chips, 1, 1)
    dims = [2, 2, 1]
    order = [2, 2, 1, 0]  # z doubles first to 4, then y, then x; afterwards z, y, x in turn
    step = 0
    while dims[0] * dims[1] * dims[2] < chips:
        axis = order[step] if step < len(order) else (2, 1, 0)[(step - len(order)) % 3]
        dims[axis] *= 2
        step += 1
    return tuple(dims)


def tpu_devices(topo: Topology):
    """The slice's devices as compile-only JAX devices (no TPU needed)."""
    if importlib.util.find_spec("libtpu") is None and not os.environ.get("TPU_LIBRARY_PATH"):
        raise UserError("the TPU compiler (libtpu) is not installed: run ./setup_vm.sh, or "
                        "pip install -e '.[tpu-compile]'")
    devices = topology_devices(compile_target(topo))
    if len(devices) != topo.devices:
        raise UserError(f"the TPU compiler laid out {len(devices)} devices for {topo.name}, "
                        f"expected {topo.devices}")
    return devices


def compile_hlo(hlo_text: str, topo: Topology) -> CompiledStep | OutOfMemory:
    """Compile an SPMD HLO module (text, shardings written in) for every device of `topo`;
    OutOfMemory when the compiler finds its program cannot fit a chip."""
    return compiled_step(*compile_text(hlo_text, tpu_devices(topo)))


def compiled_step(stats: dict, compiled_text: str) -> CompiledStep | OutOfMemory:
    """A compiled program's figures (benchmarks/plan/libtpu_compile.py's, from any libtpu) with its
    collectives and matmul FLOPs counted in its optimized HLO text; OutOfMemory when the
    compiler refused it for want of HBM (any other refusal is raised)."""
    if "error" in stats:
        refusal = parse_out_of_memory(stats["error"], stats["compile_seconds"])
        if refusal is None:
            raise RuntimeError(f"libtpu could not compile the step: {stats['error']}")
        return refusal
    matmul_flops, matmul_flops_once = count_matmul_flops(compiled_text)
    return CompiledStep(
        **{field: stats[field] for field in STAT_FIELDS},
        matmul_flops=matmul_flops,
        collectives=count_collectives(compiled_text),
        dcn_collectives=count_dcn_collectives(compiled_text),
        loop_trips=loop_trips(compiled_text),
        matmul_flops_once=matmul_flops_once,
    )


_ENTRY = re.compile(r"^ENTRY %?([\w.\-]+) ", re.M)
_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) ")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?[\w.\-]+ = (.+?) ([\w\-]+)\(")
_SHAPE = re.compile(r"\b(" + "|".join(ELEMENT_BYTES) + r")\[([\d,]*)\]")
_CALLS = re.compile(r"(?:calls|body|to_apply|branch_computations)=\{?%?([\w.\-, %]+)\}?")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"')
_CONDITION = re.compile(r"condition=%?([\w.\-]+)")
_CONSTANT = re.compile(r"%([\w.\-]+) = [us]\d+\[\]\S* constant\((\d+)\)")
_DEFINITION = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = (\S+)", re.M)
_OPERAND = re.compile(r"%([\w.\-]+)")
_CONTRACTING = re.compile(r"lhs_contracting_dims=\{([\d,]*)\}")
_DIM_LABELS = re.compile(r"dim_labels=(\w+)_(\w+)->(\w+)")
_WINDOW = re.compile(r"window=\{([^}]*)\}")
_KERNEL_COST = re.compile(r'"cost_estimate":\{"flops":"(\d+)"')
# matmuls per score element of MaxText's splash attention kernels (by instruction name):
# forward QK^T and PV; dq recomputes QK^T and dO V^T and forms dS K; dkv recomputes both and
# forms P^T dO and dS^T Q (as core/backends/xla/pallas_tpu.py counts zoo's flash backward)
SPLASH_MATMULS = {"splash_mha_fwd": 2, "splash_mha_dq": 3, "splash_mha_dkv": 4}
_NAME = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = ")
_LAYOUTS = re.compile(r"operand_layout_constraints=\{(.*?)\}, [a-z_]+=")
_SHAPE_TEXT = re.compile(r"\b(?:" + "|".join(ELEMENT_BYTES) + r")\[[\d,]*\]")
FLOAT_TYPES = ("bf16", "f16", "f32", "f64", "f8")
_LESS_THAN = re.compile(r"compare\(%([\w.\-]+), %([\w.\-]+)\), direction=LT")
_BODY = re.compile(r"body=%?([\w.\-]+)")
_CHANNEL = re.compile(r"channel_id=(\d+)")


def count_collectives(hlo_text: str) -> dict:
    """Collectives by kind in compiled HLO: count and result bytes (per chip, per step).
    Bytes are those of the full buffers (all-gather output, reduce-scatter input), summed
    over the tuple of a combined collective. Async pairs count once (at their `-done`);
    the TPU compiler's `all-reduce-scatter` fusions are reduce-scatters; an op inside a
    loop body counts once per trip, so a scanned and an unrolled stack compare.
    One collective is counted once however many computations hold a copy of it: libtpu's
    async collective fusions repeat it in their start, update and done fusions under one
    channel id (counting each copy tripled the all-gather bytes of an FSDP step). Copies run
    as often as each other; a channel id found again at another multiplicity is another
    collective (libtpu reuses the id when it sinks a loop's collective into a copy outside
    the loop: counting only the first copy, once, hid 95% of MaxText's gradient all-reduces
    on two slices; a peeled trip counted beside the loop's known trip count may add one
    layer's worth, ~1%)."""
    totals = {kind: {"count": 0, "bytes": 0} for kind in COLLECTIVES}
    channels = set()
    for computation, line, times in _walk(hlo_text):
        match = _INSTRUCTION.match(line)
        if match:
            shape, op = match.groups()
            kind = op.removesuffix("-done")
            if kind == "all-reduce" and computation.startswith("all-reduce-scatter"):
                kind = "reduce-scatter"  # TPU fuses all-reduce + slice into one
            if kind not in COLLECTIVES or op.endswith("-start"):
                continue
            channel = _CHANNEL.search(line)
            if channel:
                if (channel.group(1), times) in channels:
                    continue
                channels.add((channel.group(1), times))
            totals[kind]["count"] += times
            totals[kind]["bytes"] += times * _array_bytes(shape)
    return {kind: value for kind, value in totals.items() if value["count"]}


_MEGASCALE_TYPE = re.compile(r'_xla_megascale_transfer_type="(\w+)"')
_RENDEZVOUS = re.compile(r'_xla_host_transfer_rendezvous="([^"]+)"')
_SEND_BUFFER = re.compile(r"= \((\w+\[[\d,]*\])")  # a send's result: (buffer, u32[], token[])


def count_dcn_collectives(hlo_text: str) -> dict:
    """Collectives that cross slices, by kind: count and bytes each chip sends (per step).
    In a multi-slice program libtpu keeps each slice's collectives as ICI collectives over
    slice-local groups and hands what crosses slices to the megascale runtime as host
    transfers (`send`/`recv` pairs with `_xla_megascale_transfer_type`, e.g. ALL_REDUCE):
    those sends are the data-center network's traffic. Loop bodies count once per trip."""
    totals: dict[str, dict] = {}
    seen = set()
    for _, line, times in _walk(hlo_text):
        kind = _MEGASCALE_TYPE.search(line)
        if not kind or " send(" not in line:
            continue
        rendezvous = _RENDEZVOUS.search(line)
        if rendezvous and rendezvous.group(1) in seen:
            continue
        seen.update(rendezvous.groups() if rendezvous else ())
        shape = _SEND_BUFFER.search(line)
        entry = totals.setdefault(kind.group(1).lower().replace("_", "-"),
                                  {"count": 0, "bytes": 0})
        entry["count"] += times
        entry["bytes"] += times * (_array_bytes(shape.group(1)) if shape else 0)
    return totals


def count_matmul_flops(hlo_text: str) -> tuple[float, float]:
    """Matmul FLOPs per chip in compiled HLO: (every loop trip, each loop body once).
    Dots, convolutions (the TPU compiler rewrites most dots into them; windows counted at
    their valid positions only, as XLA's cost analysis counts them) and Pallas kernels (their
    declared cost estimate; MaxText's splash attention kernels declare none, so theirs is
    the dense attention their q and k shapes imply, the convention zoo's flash kernels
    declare). Integer convolutions (the compiler's gather lowering) are not model work.
    This is the compiled counterpart of the analytic model FLOPs, which the cost analysis's
    total is not: that adds elementwise work and counts loop bodies once."""
    shapes = dict(_DEFINITION.findall(hlo_text))
    every = once = 0.0
    for _, line, times in _walk(hlo_text):
        flops = _matmul_flops(line, shapes)
        every, once = every + times * flops, once + flops
    return every, once


def _walk(hlo_text: str):
    """(computation, instruction line, times it runs per step) for every instruction
    reachable from the entry: called computations inherit their caller's count, a while
    body's is multiplied by its trip count."""
    bodies = _computations(hlo_text)

    def visit(name: str, times: int, depth: int = 0):
        if depth > 50 or name not in bodies:
            return
        for line in bodies[name]:
            yield name, line, times
            trips = _while_trips(line, bodies) if " while(" in line else 1
            for called in _CALLS.findall(line):
                for callee in re.split(r"[, %]+", called):
                    if callee:
                        yield from visit(callee, times * trips, depth + 1)

    for entry in _ENTRY.findall(hlo_text):
        yield from visit(entry, 1)


def _matmul_flops(line: str, shapes: dict[str, str]) -> float:
    match = _INSTRUCTION.match(line)
    if not match:
        return 0.0
    shape, op = match.groups()
    if op == "custom-call":
        if "tpu_custom_call" not in line:
            return 0.0
        kernel = _KERNEL_COST.search(line)
        return float(kernel.group(1)) if kernel else _undeclared_attention_flops(line)
    if op not in ("dot", "convolution") or not shape.startswith(FLOAT_TYPES):
        return 0.0
    lhs_name, rhs_name = _OPERAND.findall(line[match.end():])[:2]
    out, lhs, rhs = _dims(shape), _dims(shapes[lhs_name]), _dims(shapes[rhs_name])
    if op == "dot":
        contracting = _CONTRACTING.search(line).group(1)
        return 2.0 * math.prod(out) * math.prod(lhs[int(i)] for i in contracting.split(",") if i)
    return _convolution_flops(line, out, lhs, rhs)


def _undeclared_attention_flops(line: str) -> float:
    """Dense attention FLOPs of a splash attention kernel (no cost estimate of its own):
    2 x the kernel's matmuls per score x q's elements x the key length, from its operand
    layouts (q first, k second among its float operands; q may lead with a batch dim)."""
    name = _NAME.match(line).group(1)
    matmuls = next((n for prefix, n in SPLASH_MATMULS.items() if name.startswith(prefix)), 0)
    operands = _LAYOUTS.search(line)
    floats = [_dims(shape) for shape in _SHAPE_TEXT.findall(operands.group(1))
              if shape.startswith(FLOAT_TYPES)] if operands else []
    if not matmuls or len(floats) < 2:
        return 0.0
    q, k = floats[:2]
    return 2.0 * matmuls * math.prod(q) * k[-2]


def _convolution_flops(line: str, out: list[int], lhs: list[int], rhs: list[int]) -> float:
    """2 x batch x output features x input features per group x the valid (output,
    kernel) position pairs of each spatial dimension (padding and dilation holes skipped)."""
    lhs_labels, rhs_labels, out_labels = _DIM_LABELS.search(line).groups()
    spatial = sum(label.isdigit() for label in rhs_labels)
    window = _window(line, spatial)
    valid = 1
    for dim in range(spatial):
        key = str(dim)
        size, stride, (low, _), base, dilation = (window[name][dim] for name in (
            "size", "stride", "pad", "lhs_dilate", "rhs_dilate"))
        inputs = lhs[lhs_labels.index(key)]
        valid *= sum(1 for o in range(out[out_labels.index(key)]) for k in range(size)
                     if (u := o * stride - low + k * dilation) % base == 0
                     and 0 <= u // base < inputs)
    feature_groups = _attribute(line, "feature_group_count", 1)
    batch_groups = _attribute(line, "batch_group_count", 1)
    return (2.0 * (lhs[lhs_labels.index("f")] // feature_groups) * rhs[rhs_labels.index("o")]
            * (lhs[lhs_labels.index("b")] // batch_groups) * valid)


def _window(line: str, spatial: int) -> dict:
    """A convolution's `window={size=1x4 pad=0_0x3_3 ...}`, one entry per spatial dim."""
    window = {"size": [1] * spatial, "stride": [1] * spatial, "pad": [(0, 0)] * spatial,
              "lhs_dilate": [1] * spatial, "rhs_dilate": [1] * spatial}
    text = _WINDOW.search(line)
    for item in text.group(1).split() if text else []:
        name, value = item.split("=")
        if name == "pad":
            window[name] = [tuple(map(int, p.split("_"))) for p in value.split("x")]
        elif name in window:
            window[name] = [int(v) for v in value.split("x")]
    return window


def _attribute(line: str, name: str, default: int) -> int:
    found = re.search(rf"{name}=(\d+)", line)
    return int(found.group(1)) if found else default


def _dims(shape_text: str) -> list[int]:
    found = _SHAPE.search(shape_text)
    return [int(d) for d in found.group(2).split(",") if d] if found else []


def loop_trips(hlo_text: str) -> list[int]:
    """Trip counts of the program's while loops."""
    bodies = _computations(hlo_text)
    return [_while_trips(line, bodies) for lines in bodies.values() for line in lines
            if " while(" in line]


def _computations(hlo_text: str) -> dict[str, list[str]]:
    """Computation name -> its instruction lines."""
    bodies: dict[str, list[str]] = {}
    current = None
    for line in hlo_text.split("\n"):
        if line.startswith(" "):
            if current is not None:
                bodies[current].append(line)
        elif line.rstrip().endswith("{") and (match := _COMPUTATION.match(line)):
            current = match.group(1)
            bodies.setdefault(current, [])
        elif line.strip() == "}":
            current = None
        elif current is not None and bodies[current] and line:
            # an instruction printed over several lines (a newline inside an attribute:
            # libtpu 0.0.52's kernel_metadata): the rest belongs to it
            bodies[current][-1] += line
    return bodies


def _while_trips(line: str, bodies: dict[str, list[str]]) -> int:
    """A while loop's trip count: its `known_trip_count`, else (libtpu rewrites scan loops
    and builds loops of its own without one) the bound its condition compares the counter
    against, `i < N`, over the step the body adds to that counter (windowed einsums step
    by 2)."""
    known = _TRIP.search(line)
    if known:
        return int(known.group(1))
    condition, body = _CONDITION.search(line), _BODY.search(line)
    test = "\n".join(bodies.get(condition.group(1), [])) if condition else ""
    constants = dict(_CONSTANT.findall(test))
    # the largest bound: a 64-bit counter is tested as hi < 0 || (hi == 0 && lo < N)
    bounds = [(int(constants[bound]), counter) for counter, bound in _LESS_THAN.findall(test)
              if bound in constants]
    if not bounds:
        return 1
    bound, counter = max(bounds)
    index = re.search(rf"%{re.escape(counter)} = .*index=(\d+)", test)
    step = _counter_step(bodies.get(body.group(1), []) if body else [],
                         int(index.group(1)) if index else -1)
    return -(-bound // step)


def _counter_step(body: list[str], index: int) -> int:
    """What a loop body adds to tuple element `index` (its counter) each trip; 1 if unclear."""
    text = "\n".join(body)
    root = re.search(r"ROOT %[\w.\-]+ = .*? tuple\(([^)]*)\)", text)
    operands = _OPERAND.findall(root.group(1)) if root else []
    if not 0 <= index < len(operands):
        return 1
    added = re.search(rf"%{re.escape(operands[index])} = \S+ add\(%([\w.\-]+), %([\w.\-]+)\)",
                      text)
    constants = dict(_CONSTANT.findall(text))
    steps = [int(constants[n]) for n in (added.groups() if added else ()) if n in constants]
    return max(steps[0], 1) if steps else 1


def _array_bytes(shape_text: str) -> int:
    """Bytes of a result shape; a tuple (collectives the compiler combined) sums its parts."""
    total = 0
    for dtype, dims in _SHAPE.findall(shape_text):
        count = 1
        for dim in filter(None, dims.split(",")):
            count *= int(dim)
        total += count * ELEMENT_BYTES[dtype]
    return total


_ENTRY_PARAMETER = re.compile(r"^\s*%?[\w.\-]+ = (.+?) parameter\((\d+)\)")


def entry_parameter_bytes(compiled_text: str) -> dict[int, int]:
    """Entry parameter number -> its bytes on one chip, from a compiled (partitioned)
    program's text, whose entry parameters have their shards' shapes."""
    entry = _ENTRY.search(compiled_text).group(1)
    sizes = {}
    for line in _computations(compiled_text)[entry]:
        match = _ENTRY_PARAMETER.match(line)
        if match:
            sizes[int(match.group(2))] = _array_bytes(match.group(1))
    return sizes
