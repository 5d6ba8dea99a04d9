"""Every family's presets compiled by the real TPU compiler (libtpu, compile-only) for
real slices, on this CPU-only machine: each fits, its FLOPs per chip agree with the
analytic count, and the collectives its sharding implies are in the program.

Default suite: llama's fsdp and fsdp_tensor presets on v5p-8 (4 chips), unrolled and
scanned, with and without remat; one preset per other family on v6e-8 (8 chips); mixtral
with and without expert parallelism on v5p-8; qwen3 scanned on v5p-64
(32 chips on 8 hosts: FSDP's gradients reduced into their shards); a full-tune DPO step on
v5p-8 (its reference copy among the arguments). `slow`: the full family x sharding x remat
x slice matrix (v4 chips: v4-32), the context preset and its memory at 4096 tokens, eager
attention under tensor parallelism, and a plan that cannot fit (llama-70b replicated on
v4-8; the compiler's refusal messages are read by default below and in
tests/unit/test_plan_compare.py)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.plan.tpu_compile import (
    compile_target,
    count_collectives,
    count_dcn_collectives,
    count_matmul_flops,
    loop_trips,
)
from core.out_of_memory import parse_out_of_memory
from core.topology import parse
from tests.support.paths import ROOT
from tests.support.runs import env, start_python
from zoo.registry import family

WORKER = "tests.support.compile_worker"
FAMILIES = ("llama", "t5", "vit", "qwen3", "qwen3moe", "gemma3", "deepseek3")
# families checked on each slice by default; every family is in the slow matrix (llama's
# fsdp preset compiles on v5p-8, qwen3's on v5p-64, so v6e-8 takes the others)
ON_SLICE = {"v5p-8": ("llama",),
            "v6e-8": tuple(f for f in FAMILIES if f not in ("llama", "qwen3"))}
SHARDINGS = {"fsdp": [], "fsdp_tensor": ["mesh.tensor=2"]}
REMATS = ("none", "checkpoint", "scan", "scan_checkpoint")
# every sharding, unrolled and scanned, with and without a remat barrier (plain `scan`:
# mixtral's expert-parallel compile below)
DEFAULT_PRESETS = [("fsdp", "none"), ("fsdp_tensor", "checkpoint"),
                   ("fsdp_tensor", "scan_checkpoint")]
BAD_PLAN = ["llama-70b", ["mesh.data=4", "mesh.fsdp=1", "remat=scan"]]  # replicated
# eager attention under tensor parallelism (llama's default on a TPU is flash; T5's is eager)
EAGER_TENSOR = ["llama-tiny", ["sharding=fsdp_tensor", "remat=none", "mesh.tensor=2",
                               "model.attention=plain"]]


# llama's third sharding preset, at the tiny model's own sequence length (attention=auto:
# plain, since the flash kernel would compute all of attention on every sequence device)
CONTEXT_PRESET = ["llama-tiny", ["sharding=fsdp_context", "remat=none", "mesh.sequence=2"]]

# a mixture of experts with its experts over the expert axis (under FSDP, where every chip
# holds every expert: qwen3moe's compile on v6e-8, the same experts)
MIXTRAL = [["mixtral-tiny", ["sharding=fsdp_expert", "remat=scan", "mesh.expert=2"]]]

# FSDP on a slice where libtpu reduce-scatters gradients (3-D, one 4x4x2 cube), scanned and
# recomputed as the MaxText comparisons run: a weight's gradient pinned whole was all-reduced
GRADIENTS_TO_SHARDS = ["qwen3-tiny", ["sharding=fsdp", "remat=scan_checkpoint",
                                      "global_batch_size=32"]]

# a full-tune DPO step: its frozen reference copy is among the compiled arguments
DPO = ["llama-tiny", ["task=dpo", "sharding=fsdp", "remat=none"]]
REFERENCE = "reference model (frozen copy)"

# context parallelism at a long sequence (plain attention: each chip holds its scores)
CONTEXT = [["llama-tiny", [f"sharding={sharding}", "remat=none", "seq_len=4096",
                           "model.attention=plain", *extra]]
           for sharding, extra in (("fsdp", []), ("fsdp_context", ["mesh.sequence=2"]))]


def case(family: str, sharding: str, remat: str) -> list:
    return [f"{family}-tiny", [f"sharding={sharding}", f"remat={remat}", *SHARDINGS[sharding]]]


def family_cases(name: str) -> list:
    """Every sharding x remat preset of SHARDINGS x REMATS the family has (a mixture of
    experts has no fsdp_tensor)."""
    fam = family(name)
    return [case(name, s, r) for s in SHARDINGS for r in REMATS
            if s in fam.preset_names("sharding") and r in fam.preset_names("remat")]


def compile_cases(jobs: list[tuple[str, list]], out_dir: Path, timeout: int = 1800) -> dict:
    """[(slice, cases)] -> {slice: [records]}: one worker process per device count (the
    slices of one count share a process), all in parallel."""
    by_devices: dict = {}
    for slice_type, cases in jobs:
        by_devices.setdefault(parse(slice_type).devices, []).append((slice_type, cases))
    procs = []
    for devices, shared in by_devices.items():
        out = out_dir / f"{devices}-devices.json"
        procs.append((shared, out, start_python([str(out), json.dumps(shared)], env(),
                                                timeout, WORKER)))
    results: dict = {}
    for shared, out, proc in procs:
        log = "".join(proc.communicate(timeout=timeout))
        names = ", ".join(slice_type for slice_type, _ in shared)
        assert proc.returncode == 0, f"compiling for {names} failed:\n{log[-3000:]}"
        records = iter(json.loads(out.read_text()))
        for slice_type, cases in shared:  # the worker's records, in the jobs' order
            results.setdefault(slice_type, []).extend(next(records) for _ in cases)
    return results


def check_preset(record: dict, fsdp_only: dict | None) -> None:
    """Fits; the compiled program's matmul FLOPs (every loop trip) within 5% of the analytic
    count as executed; collectives as the preset says:
    FSDP all-gathers weights and sums gradients over the fsdp axis, tensor parallelism
    all-reduces activations (bytes well beyond the FSDP run's scalar all-reduces)."""
    name = f"{record['case']} on {record['slice']}"
    assert record["fits"], name
    check_flops(record)
    check_collectives(record, fsdp_only)


def check_flops(record: dict) -> None:
    name = f"{record['case']} on {record['slice']}"
    ratio = record["flops_per_chip"]["compiled_over_executed"]
    assert 0.95 <= ratio <= 1.05, f"{name}: compiled / analytic FLOPs = {ratio:.3f}"


def check_collectives(record: dict, fsdp_only: dict | None) -> None:
    name = f"{record['case']} on {record['slice']}"
    collectives = record["collectives"]
    if record["mesh"]["fsdp"] > 1:
        assert "all-gather" in collectives, f"{name}: {collectives}"
        assert gradient_bytes_reduced(collectives) >= bf16_gradient_bytes(record) / 2, (
            f"{name}: {collectives}")
    if record["mesh"]["tensor"] > 1:
        baseline = fsdp_only["collectives"].get("all-reduce", {"bytes": 0})["bytes"]
        assert collectives["all-reduce"]["bytes"] > baseline + 2**20, f"{name}: {collectives}"


def gradient_bytes_reduced(collectives: dict) -> int:
    """FSDP gradients are summed over the fsdp axis: reduce-scatters on 2-D slices; on 3-D
    ones (v4, v5p beyond one 2x2 plane) libtpu all-reduces them in full and slices after,
    as it does for JAX's FSDP."""
    return sum(collectives.get(kind, {"bytes": 0})["bytes"]
               for kind in ("reduce-scatter", "all-reduce"))


def bf16_gradient_bytes(record: dict) -> float:
    """The bf16 gradient of one fsdp group's parameters: what its reduction moves."""
    analytic = record["hbm_per_chip"]["analytic"]
    fp32_params = next(v for k, v in analytic.items() if k.startswith("parameters"))
    return fp32_params * record["mesh"]["fsdp"] / 2


@pytest.fixture(scope="module")
def default_records(tmp_path_factory):
    # one process per device count (each loads torch_xla, JAX and libtpu once): v5p-8 (4
    # devices), v6e-8 and 2xv5p-8 (8 each), v5p-64 (32)
    jobs = [("v5p-8", [case("llama", s, r) for s, r in DEFAULT_PRESETS] + MIXTRAL + [DPO]),
            ("v6e-8", [case(f, "fsdp", "none") for f in ON_SLICE["v6e-8"]]),
            ("2xv5p-8", [case("llama", "fsdp", "none")]), ("v5p-64", [GRADIENTS_TO_SHARDS])]
    return compile_cases(jobs, tmp_path_factory.mktemp("compile"))


def test_every_llama_preset_compiles_and_fits_on_v5p_8(default_records):
    """(The other families' presets: test_full_matrix.)"""
    presets = [case("llama", s, r) for s, r in DEFAULT_PRESETS]
    records = [r for r in default_records["v5p-8"] if r["case"] in presets]
    assert len(records) == len(DEFAULT_PRESETS)
    for record in records:
        check_preset(record, records[0])
    arguments = {r["case"][1][0]: r["hbm_per_chip"]["compiled"]["arguments"] for r in records
                 if r["case"][1][1] in ("remat=none", "remat=checkpoint")}
    for record in records:
        if record["case"][1][1].startswith("remat=scan"):
            # compiled as a loop, its weights as sharded as the unrolled stack's
            assert record["flops_per_chip"]["loop_trips"], record["case"]
            assert record["hbm_per_chip"]["compiled"]["arguments"] == pytest.approx(
                arguments[record["case"][1][0]], rel=0.05), record["case"]


def test_mixtral_experts_travel_by_all_to_all_under_expert_parallelism(default_records):
    """Tokens go to the chips that hold their experts and come back (all-to-all); under
    FSDP every chip holds every expert, so no token moves (qwen3moe's FSDP compile, the
    same experts). Both fit, FLOPs as counted."""
    (expert,) = [r for r in default_records["v5p-8"] if r["case"] in MIXTRAL]
    (fsdp,) = [r for r in default_records["v6e-8"] if r["case"][0] == "qwen3moe-tiny"]
    for record, moves_tokens in ((expert, True), (fsdp, False)):
        assert record["fits"], record["case"]
        check_flops(record)
        assert ("all-to-all" in record["collectives"]) == moves_tokens, record["collectives"]
    assert expert["flops_per_chip"]["loop_trips"]


def test_a_gathered_weights_gradient_goes_to_its_shards_not_all_reduced_whole(default_records):
    """o_proj's weight is gathered whole where it is used (the `gathered` rule) and its
    gradient left free: the step all-reduces only scalars and the norms' gradients. With the
    gradient pinned whole too, libtpu all-reduced it whole every layer (1.0 MiB here; 1.13
    GiB a step on qwen3-8b on v5p-64, docs/results/plan-compare-qwen3-8b-v5p-64.md)."""
    (record,) = default_records["v5p-64"]
    assert record["fits"] and record["mesh"]["fsdp"] == 32
    assert record["chips"] == 32 and record["hosts"] == 8  # one program over 8 hosts
    check_flops(record)
    o_proj = 256 * 8 * 64 * 2  # qwen3-tiny's [hidden, heads x head_dim] weight in bf16
    assert record["collectives"]["all-reduce"]["bytes"] < o_proj, record["collectives"]


def test_the_compiled_dpo_step_holds_the_reference_the_plan_counts(default_records):
    """A full-tune DPO step holds its frozen reference copy among the program's arguments,
    as many bytes per chip as the analytic plan counts for it (core.task.Task.placed): before
    the trace bound the task as `zoo train` does, the compiled step read the policy's own
    weights as its reference and its arguments were the plain step's."""
    (record,) = [r for r in default_records["v5p-8"] if r["case"] == DPO]
    analytic, compiled = record["hbm_per_chip"]["analytic"], record["hbm_per_chip"]["compiled"]
    persistent = sum(v for k, v in analytic.items()
                     if k.startswith(("parameters", "optimizer")) or k == REFERENCE)
    assert analytic[REFERENCE] == analytic["parameters (fp32)"]
    # the arguments: the persistent state and the batch (a few KiB of token ids)
    assert 0 <= compiled["arguments"] - persistent < 2**20, (compiled, analytic)
    assert record["fits"]


@pytest.mark.slow  # its memory at 4096 tokens: test_context_parallelism_splits_the_sequence...
def test_the_context_preset_compiles_and_gathers_keys_and_values(tmp_path):
    (record,) = compile_cases([("v5p-8", [CONTEXT_PRESET])], tmp_path)["v5p-8"]
    assert record["fits"] and record["mesh"]["sequence"] == 2
    assert record["attention"] == "eager"
    check_flops(record)
    assert "all-gather" in record["collectives"]


@pytest.mark.slow
def test_context_parallelism_splits_the_sequence_and_its_memory(tmp_path):
    """At 4096 tokens, splitting every sequence over sequence=2 (with fsdp=2) needs well
    under the HBM of fsdp=4 with whole sequences: attention scores and activations are split;
    keys and values are gathered (all-gather), and the FLOPs are those of the same model."""
    fsdp, context = compile_cases([("v5p-8", CONTEXT)], tmp_path)["v5p-8"]
    assert fsdp["fits"] and context["fits"]
    assert context["mesh"]["sequence"] == 2 and context["mesh"]["fsdp"] == 2
    for record in (fsdp, context):
        check_flops(record)
    used = [record["hbm_per_chip"]["compiled"]["total"] for record in (fsdp, context)]
    assert used[1] < 0.6 * used[0], used
    assert "all-gather" in context["collectives"]


@pytest.mark.slow  # T5's eager attention under fsdp_tensor is in test_full_matrix too
def test_eager_attention_is_split_over_the_tensor_axis(tmp_path):
    """Written with `@`, 4-D attention merges batch and heads and libtpu gathered the
    tensor-split heads first (1.11x the FLOPs); einsum keeps them apart."""
    (record,) = compile_cases([("v5p-8", [EAGER_TENSOR])], tmp_path)["v5p-8"]
    assert record["attention"] == "eager"
    check_flops(record)


@pytest.mark.parametrize("slice_type", ["v5p-8", "v6e-8"])  # v4: test_full_matrix (slow)
def test_one_preset_per_family_on_each_slice(default_records, slice_type):
    topo = parse(slice_type)
    records = [r for r in default_records[slice_type] if "sharding=fsdp" in r["case"][1]
               and "remat=none" in r["case"][1] and r["case"] not in (*MIXTRAL, DPO)]
    assert len(records) == len(ON_SLICE.get(slice_type, FAMILIES))
    for record in records:
        check_preset(record, None)
        assert record["chips"] == topo.chips and record["hosts"] == topo.hosts
        assert record["mesh"]["fsdp"] == topo.devices


def test_two_slices_compile_with_the_gradient_reduction_across_them(default_records):
    """2 x v5p-8, data parallel across the slices by default: the program compiles for a
    topology of 2 slices, FSDP inside each, and what crosses slices is the gradient
    reduction (all-reduces of each chip's gradient shard; at llama-tiny's size the
    partitioner also gathers the embedding's output gradient, 128 KiB, across them)."""
    record = default_records["2xv5p-8"][0]
    assert record["fits"] and record["compile_target"]["num_slices"] == 2
    assert record["mesh"]["data"] == 2 and record["mesh"]["fsdp"] == 4
    check_flops(record)
    dcn = record["dcn_collectives"]
    gradient_shard = bf16_gradient_bytes(record) / record["mesh"]["fsdp"]
    assert gradient_shard <= dcn["all-reduce"]["bytes"] <= 2 * gradient_shard, dcn
    others = sum(v["bytes"] for kind, v in dcn.items() if kind != "all-reduce")
    assert others <= 0.1 * dcn["all-reduce"]["bytes"], dcn
    model = record["projected_step"]
    assert model["dcn_s"] > 0 and model["label"] == "a model, not a measurement"


@pytest.mark.slow
def test_llama_70b_replicated_on_v4_8_does_not_fit(tmp_path):
    (record,) = compile_cases([("v4-8", [BAD_PLAN])], tmp_path)["v4-8"]
    assert not record["fits"]
    compiled = record["hbm_per_chip"]["compiled"]
    # refused by the compiler, or compiled with more per chip than a v4 chip has
    assert compiled.get("refused") or compiled["total"] > record["hbm_per_chip"]["chip"]


@pytest.mark.slow
@pytest.mark.parametrize("slice_type", ["v5p-8", "v6e-8", "v4-32"])
def test_full_matrix(tmp_path, slice_type):
    cases = [c for f in FAMILIES for c in family_cases(f)]
    records = compile_cases([(slice_type, cases)], tmp_path, timeout=5400)[slice_type]
    for name in FAMILIES:
        mine = [r for r in records if r["case"][0] == f"{name}-tiny"]
        for record in mine:
            check_preset(record, mine[0])


def test_compile_targets_match_the_slices():
    assert compile_target(parse("v5p-8"))["topology_name"] == "v5p:2x2x1"
    assert compile_target(parse("v4-32"))["topology_name"] == "v4:2x2x4"
    assert compile_target(parse("v5p-128"))["topology_name"] == "v5p:4x4x4"
    assert compile_target(parse("v5p-128"))["wrap"] == (True, True, True)
    assert compile_target(parse("v6e-8"))["topology_name"] == "v6e:2x4"
    assert compile_target(parse("v4-8"))["chip_config_name"] == "megacore"


def test_slices_compile_as_one_topology_of_several_slices():
    target = compile_target(parse("2xv6e-256"))
    assert (target["topology_name"], target["num_slices"]) == ("v6e:16x16", 2)
    assert compile_target(parse("v6e-256"))["num_slices"] == 1


def test_dcn_collectives_are_the_megascale_transfers_counted_once_per_rendezvous():
    """libtpu hands what crosses slices to the megascale runtime as send/recv host
    transfers; the send's buffer is what a chip sends, its pair (the recv) is not counted."""
    attrs = ('is_host_transfer=true, frontend_attributes={_xla_host_transfer_handler_name='
             '"xla_megascale_runtime",_xla_host_transfer_rendezvous="R",'
             '_xla_megascale_transfer_type="T"}')

    def transfer(op, shape, rendezvous, kind):
        return (f"  %{op}.{rendezvous} = ({shape}, u32[], token[]) {op}(%x, %t), "
                + attrs.replace('"R"', f'"{rendezvous}"').replace('"T"', f'"{kind}"') + "\n")
    body = (transfer("send", "f32[1024,8]{1,0}", "ar.1", "ALL_REDUCE")
            + transfer("recv", "f32[1024,8]{1,0}", "ar.1", "ALL_REDUCE")
            + transfer("send", "bf16[4,8]{1,0}", "ag.2", "ALL_GATHER"))
    hlo = (f"HloModule m\n\nENTRY %main (x: f32[8]) -> f32[8] {{\n{body}"
           "  ROOT %x = f32[8] parameter(0)\n}\n")
    assert count_dcn_collectives(hlo) == {"all-reduce": {"count": 1, "bytes": 1024 * 8 * 4},
                                          "all-gather": {"count": 1, "bytes": 4 * 8 * 2}}
    assert count_collectives(hlo) == {}  # none of them is an ICI collective


def test_collectives_count_async_pairs_fused_scatters_combined_tuples_and_loop_trips():
    hlo = """HloModule m

%all-reduce-scatter (input: f32[64,8]) -> f32[16,8] {
  %input = f32[64,8]{1,0} parameter(0)
  %all-reduce.1 = f32[64,8]{1,0} all-reduce(%input), replica_groups={{0,1,2,3}}
  ROOT %ds = f32[16,8]{1,0} dynamic-slice(%all-reduce.1, %a, %b)
}

%body (p: f32[16,8]) -> f32[16,8] {
  %ag-start = (f32[16,8]{1,0}, f32[64,8]{1,0}) all-gather-start(%p), dimensions={0}
  %ag-done = f32[64,8]{1,0} all-gather-done(%ag-start)
  ROOT %f = f32[16,8]{1,0} fusion(%ag-done), kind=kCustom, calls=%all-reduce-scatter
}

ENTRY %main (x: f32[16,8]) -> f32[16,8] {
  %x = f32[16,8]{1,0} parameter(0)
  %combined = (f32[4]{0}, bf16[8,8]{1,0}) all-reduce(%y, %z), replica_groups={{0,1,2,3}}
  ROOT %w = f32[16,8]{1,0} while(%x), condition=%cond, body=%body, backend_config=TRIPS
}
""".replace("TRIPS", '{"known_trip_count":{"n":"3"}}')
    found = count_collectives(hlo)
    assert found["all-gather"] == {"count": 3, "bytes": 3 * 64 * 8 * 4}
    assert found["reduce-scatter"] == {"count": 3, "bytes": 3 * 64 * 8 * 4}
    assert loop_trips(hlo) == [3]
    # libtpu's rewritten scan loops carry no known_trip_count: the bound is in the condition,
    # a 64-bit counter tested as hi < 0 || (hi == 0 && lo < 5)
    rewritten = re.sub(r", backend_config=\S+", "", hlo).replace(
        "ENTRY", """%cond (c: f32[16,8]) -> pred[] {
  %zero = s32[]{:T(128)} constant(0)
  %bound = u32[]{:T(128)} constant(5)
  %hi = s32[]{:T(128)} get-tuple-element(%c), index=1
  %negative = pred[]{:T(512)} compare(%hi, %zero), direction=LT
  %i = u32[]{:T(128)} get-tuple-element(%c), index=0
  %lt = pred[]{:T(512)} compare(%i, %bound), direction=LT
  ROOT %either = pred[]{:T(512)} or(%negative, %lt)
}

ENTRY""")
    assert loop_trips(rewritten) == [5]
    assert count_collectives(rewritten)["all-gather"]["count"] == 5
    assert found["all-reduce"] == {"count": 1, "bytes": 4 * 4 + 8 * 8 * 2}


def test_collectives_count_once_across_libtpu_async_collective_fusion_copies():
    """libtpu splits an async collective into start, update and done fusions, each holding a
    copy of the all-gather under the collective's one channel id: it is one all-gather."""
    copy = ("  %ag.N = bf16[64,8]{1,0} all-gather(%p.N), channel_id=19, "
            "replica_groups={{0,1,2,3}}, dimensions={0}\n"
            "  ROOT %r.N = bf16[64,8]{1,0} copy(%ag.N)\n")
    hlo = "HloModule m\n\n" + "".join(
        f"%{name} (p.{i}: bf16[16,8]) -> bf16[64,8] {{\n{copy.replace('N', str(i))}}}\n\n"
        for i, name in enumerate(("start", "update", "done"))) + """ENTRY %main (x: bf16[16,8]) -> bf16[64,8] {
  %x = bf16[16,8]{1,0} parameter(0)
  %s = bf16[64,8]{1,0} fusion(%x), kind=kCustom, calls=%start
  %u = bf16[64,8]{1,0} fusion(%s), kind=kOutput, calls=%update
  ROOT %d = bf16[64,8]{1,0} fusion(%u), kind=kCustom, calls=%done
}
"""  # noqa: E501
    assert count_collectives(hlo) == {"all-gather": {"count": 1, "bytes": 64 * 8 * 2}}


def test_a_channel_id_reused_outside_a_loop_is_another_collective():
    """libtpu sinks a loop's collective into a copy outside the loop under the same channel
    id: the loop's copy runs every trip, the other once."""
    hlo = """HloModule m

%body (p: bf16[64,8]) -> bf16[64,8] {
  %p = bf16[64,8]{1,0} parameter(0)
  ROOT %ar.1 = bf16[64,8]{1,0} all-reduce(%p), channel_id=21, replica_groups={{0,1,2,3}}
}

ENTRY %main (x: bf16[64,8]) -> bf16[64,8] {
  %x = bf16[64,8]{1,0} parameter(0)
  %ar.2 = bf16[64,8]{1,0} all-reduce(%x), channel_id=21, replica_groups={{0,1,2,3}}
  ROOT %w = bf16[64,8]{1,0} while(%ar.2), condition=%cond, body=%body, backend_config=TRIPS
}
""".replace("TRIPS", '{"known_trip_count":{"n":"5"}}')
    assert count_collectives(hlo) == {"all-reduce": {"count": 6, "bytes": 6 * 64 * 8 * 2}}


def test_matmul_flops_count_dots_valid_convolution_windows_kernels_and_loop_trips():
    """Dots by their contracting dims; a convolution by its valid window positions only
    (the compiler writes batched dots as padded, dilated convolutions); a Pallas kernel by
    its declared cost; integer convolutions (gather lowering) not at all; loop bodies per
    trip."""
    hlo = """HloModule m

%body (p: bf16[8,32]) -> bf16[8,32] {
  %p = bf16[8,32]{1,0} parameter(0)
  %w = bf16[32,32]{1,0} parameter(1)
  ROOT %d = bf16[8,32]{1,0} dot(%p, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (x: bf16[8,32]) -> bf16[8,32] {
  %x = bf16[8,32]{1,0} parameter(0)
  %a = bf16[2,256,256,1]{3,2,1,0} parameter(1)
  %b = bf16[4,32,256,1]{3,2,1,0} parameter(2)
  %c = bf16[2,256,4,32]{3,2,1,0} convolution(%a, %b), window={size=1x4 pad=0_0x3_3 rhs_reversal=0x1}, dim_labels=0bf1_1oi0->0b1f
  %e = bf16[32,32,32]{2,1,0} convolution(%f, %g), window={size=32 stride=31 lhs_dilate=32}, dim_labels=0bf_0io->0bf
  %f = bf16[32,32,32]{2,1,0} parameter(3)
  %g = bf16[32,32,32]{2,1,0} parameter(4)
  %i = u32[1024,4]{0,1} convolution(%j, %k), dim_labels=bf_io->bf
  %k2 = f32[2,8]{1,0} custom-call(%x), custom_call_target="tpu_custom_call", backend_config={"custom_call_config":{"cost_estimate":{"flops":"1000","transcendentals":"0"}}}
  ROOT %w = bf16[8,32]{1,0} while(%x), condition=%cond, body=%body, backend_config=TRIPS
}
""".replace("TRIPS", '{"known_trip_count":{"n":"3"}}')  # noqa: E501
    loop_dot = 2 * 8 * 32 * 32
    # 4 heads of a [2*256, 256] x [256, 32] matmul, written as a window over the head axis
    heads = 2 * 2 * 256 * 256 * 32 * 4
    # a batched [32, 32] x [32, 32] matmul (batch 32) as a dilated 1-D convolution
    batched = 2 * 32 * 32 * 32 * 32
    every, once = count_matmul_flops(hlo)
    assert every == 3 * loop_dot + heads + batched + 1000
    assert once == loop_dot + heads + batched + 1000


def test_loop_trips_follow_the_counter_step_of_libtpu_windowed_einsums():
    """libtpu's collective-matmul loops test `i < 8` and add 2 per trip: 4 trips."""
    hlo = """HloModule m

%cond (c: (u32[], bf16[8])) -> pred[] {
  %c = (u32[], bf16[8]{0}) parameter(0)
  %bound = u32[]{:T(128)} constant(8)
  %i = u32[]{:T(128)} get-tuple-element(%c), index=0
  ROOT %lt = pred[]{:T(512)} compare(%i, %bound), direction=LT
}

%body (b: (u32[], bf16[8])) -> (u32[], bf16[8]) {
  %b = (u32[], bf16[8]{0}) parameter(0)
  %two = u32[]{:T(128)} constant(2)
  %j = u32[]{:T(128)} get-tuple-element(%b), index=0
  %x = bf16[8]{0} get-tuple-element(%b), index=1
  %next = u32[]{:T(128)} add(%j, %two)
  %cp = bf16[8]{0} collective-permute(%x), source_target_pairs={{0,1},{1,0}}
  ROOT %t = (u32[]{:T(128)}, bf16[8]{0}) tuple(%next, %cp)
}

ENTRY %main (x: (u32[], bf16[8])) -> (u32[], bf16[8]) {
  %x = (u32[], bf16[8]{0}) parameter(0)
  ROOT %w = (u32[], bf16[8]{0}) while(%x), condition=%cond, body=%body
}
"""
    assert loop_trips(hlo) == [4]
    assert count_collectives(hlo)["collective-permute"]["count"] == 4


def test_out_of_memory_message_is_read():
    message = ("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in "
               "memory space hbm. Used 38.33G of 30.75G hbm. Exceeded hbm capacity by 7.59G.\n"
               "  1. Size: 448.00M\n     Operator: op_name=\"dot.1\"\n"
               "     Shape: bf16[8192,28672]{1,0:T(8,128)(2,1)}\n     Unpadded size: 448.00M\n"
               "     XLA label: all-gather.882 = all-gather(convert.3521)\n")
    refusal = parse_out_of_memory(message, 1.0)
    assert refusal.program_bytes == int(38.33 * 2**30)
    assert refusal.usable_bytes == int(30.75 * 2**30)
    assert refusal.largest == ["448.00M bf16[8192,28672] (all-gather.882)"]
    assert parse_out_of_memory("some other compiler error", 1.0) is None
    one_buffer = parse_out_of_memory(
        "RESOURCE_EXHAUSTED: Allocation (size=37580963840) would exceed memory "
        "(size=34359738368) :: #allocation8039 [shape = 'bf16[80,8192,28672]{2,1,0:T(8,128)}',"
        " space=hbm, size = 0xffffffffffffffff, tag = 'output of fusion.264@{}'] :: <no-hlo>", 1.0)
    assert (one_buffer.program_bytes, one_buffer.usable_bytes) == (37580963840, 34359738368)
    assert one_buffer.largest == ["35.00G bf16[80,8192,28672] (output of fusion.264@{})"]


def test_json_record_holds_every_field_the_console_shows(default_records):
    record = default_records["v6e-8"][0]
    compiled = record["hbm_per_chip"]["compiled"]
    assert {"arguments", "temporaries", "generated_code", "total"} <= set(compiled)
    assert record["hbm_per_chip"]["chip"] == parse("v6e-8").hbm_bytes_per_chip
    assert record["hbm_per_chip"]["analytic"]["total"] > 0
    flops = record["flops_per_chip"]
    assert flops["compiled_matmul"] > 0 and flops["cost_analysis"] > 0
    assert 0 <= flops["cost_analysis_vector_share"] < 1
    assert flops["analytic_model"] > 0
    assert record["compile_seconds"] > 0
    assert record["compile_target"]["topology_name"] == "v6e:2x4"
    estimate = record["compiler_estimate"]
    assert estimate["step_seconds"] > 0 and 0 < estimate["mfu_ceiling"] <= 1
    assert "compiler" in estimate["source"]
    assert record["attention"] in ("flash", "eager")


TRACE_256 = """
from benchmarks.plan.tpu_step import trace_step_hlo
from zoo.app.run import resolve_run
run = resolve_run("llama-tiny", ["tpu=v6e-256", "remat=none"])
text, _, _ = trace_step_hlo(run)
print(run.topology.devices, "devices=[256" in text)
"""


@pytest.mark.slow  # ~20 s: 256 virtual devices in a fresh process
def test_a_slice_past_127_devices_traces():
    """torch's autograd engine counts device queues in 8 bits; the trace runs its backward
    on the calling thread, so 256 virtual devices (v6e-256) trace with shardings over all."""
    result = subprocess.run([sys.executable, "-c", TRACE_256], cwd=ROOT, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-2:] == ["256", "True"]


@pytest.mark.slow
def test_a_slice_past_127_devices_compiles(tmp_path):
    record = compile_cases([("v6e-256", [["llama-tiny", ["remat=none"]]])], tmp_path)
    assert record["v6e-256"][0]["fits"]
