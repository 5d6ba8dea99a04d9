"""`zoo plan --compile --compare maxtext` without compiling: the zoo config in MaxText's keys
(and the refusals), the step model's arithmetic, the comparison's record and table, and the
CLI's one-line refusals (the compile itself: tests/e2e/test_plan_compare.py, slow)."""

import pytest
from click.testing import CliRunner

from benchmarks.maxtext_keys import maxtext_keys, remat_keys
from benchmarks.plan.analytic import make_plan
from benchmarks.plan.compare import Comparison
from benchmarks.plan.compare_table import describe, table_rows
from benchmarks.plan.step_model import LABEL, project
from benchmarks.plan.tpu_compile import (
    CompiledStep,
    count_collectives,
    count_matmul_flops,
)
from core.errors import UserError
from core.out_of_memory import OutOfMemory, parse_out_of_memory
from core.topology import parse
from tools.cli import cli
from zoo.app.run import resolve_run

GiB = 2**30


def keys(model: str, slice_type: str, *overrides: str) -> list[str]:
    run = resolve_run(model, [f"tpu={slice_type}", *overrides])
    return maxtext_keys(run.family.name, run.config, run.topology)


def test_llama_8b_on_v5p_128_maps_shape_batch_mesh_remat_precision_and_attention():
    found = keys("llama-8b", "v5p-128", "global_batch_size=128", "seq_len=8192",
                 "remat=checkpoint", "model.attention=flash")
    for key in ("decoder_block=llama2", "base_emb_dim=4096", "base_mlp_dim=14336",
                "base_num_decoder_layers=32", "base_num_query_heads=32", "base_num_kv_heads=8",
                "head_dim=128", "vocab_size=128256", "logits_via_embedding=false",
                "per_device_batch_size=2", "gradient_accumulation_steps=1",
                "max_target_length=8192", "ici_data_parallelism=1", "ici_fsdp_parallelism=64",
                "remat_policy=full", "scan_layers=false", "dtype=bfloat16",
                "weight_dtype=float32", "attention=flash", "opt_type=adamw",
                "allow_split_physical_axes=true"):
        assert key in found, key


@pytest.mark.parametrize("remat,policy,scan", [
    ("none", "minimal_with_context", "false"), ("checkpoint", "full", "false"),
    ("scan", "minimal_with_context", "true"), ("scan_checkpoint", "full", "true"),
    ("scan_minimal", "minimal", "true"), ("scan_save_qkv_proj", "save_qkv_proj", "true")])
def test_remat_presets_map_to_a_policy_and_scan_layers(remat, policy, scan):
    assert remat_keys(remat) == [f"remat_policy={policy}", f"scan_layers={scan}"]


def test_offload_maps_to_maxtexts_custom_policy_offloading_the_layer_input():
    assert remat_keys("scan_offload") == ["remat_policy=custom", "scan_layers=true",
                                          "decoder_layer_input=offload"]


def test_tensor_and_expert_axes_and_mixtral_experts_map():
    tensor = keys("llama-tiny", "v5p-8", "sharding=fsdp_tensor", "mesh.tensor=2",
                  "global_batch_size=2", "grad_accum=2")
    assert {"ici_fsdp_parallelism=2", "ici_tensor_parallelism=2", "per_device_batch_size=0.25",
            "gradient_accumulation_steps=2"} <= set(tensor)
    expert = keys("mixtral-tiny", "v5p-8", "sharding=fsdp_expert", "mesh.expert=2")
    assert {"decoder_block=mixtral", "num_experts=4", "num_experts_per_tok=2",
            "ici_expert_parallelism=2", "sparse_matmul=false", "capacity_factor=1.0"
            } <= set(expert)
    dense = keys("mixtral-tiny", "v5p-8", "model.dispatch=dense")
    assert "capacity_factor=-1.0" in dense


def test_plain_attention_and_fp32_map_to_dot_product_and_float32():
    """zoo's plain attention takes its softmax in fp32: MaxText's the same (float32_logits)."""
    found = keys("llama-tiny", "v5p-8", "model.attention=plain", "precision=fp32")
    assert {"attention=dot_product", "float32_logits=true", "dtype=float32"} <= set(found)


@pytest.mark.parametrize("model,overrides,message", [
    ("t5-tiny", [], "MaxText has no counterpart of the t5 family"),
    ("llama-tiny", ["sharding=fsdp_context", "mesh.sequence=2"],
     "sharding=fsdp_context has no MaxText counterpart"),
    ("llama-tiny", ["mesh.tensor=2"], "mesh.tensor=2 under sharding=fsdp"),
    ("llama-tiny", ["optim.name=sgd", "global_batch_size=100"], None),
])
def test_settings_without_a_maxtext_counterpart_are_refused_by_name(model, overrides, message):
    if message is None:  # sgd maps; 100 rows over 4 devices is a per-device batch of 25
        assert "opt_type=sgd" in keys(model, "v5p-8", *overrides)
        return
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        keys(model, "v5p-8", *overrides)


def test_slices_map_to_maxtexts_dcn_degrees():
    found = keys("llama-tiny", "2xv5p-8", "global_batch_size=8")
    assert {"ici_data_parallelism=1", "ici_fsdp_parallelism=4", "dcn_data_parallelism=2",
            "dcn_fsdp_parallelism=1"} <= set(found)
    assert not any(key.startswith("dcn_") for key in keys("llama-tiny", "v5p-8"))


def test_a_batch_maxtext_cannot_split_per_device_is_refused():
    with pytest.raises(UserError, match="global_batch_size=100 over 192 devices"):
        keys("llama-tiny", "v4-384", "global_batch_size=100")


def test_unknown_remat_preset_is_refused():
    with pytest.raises(UserError, match="remat=offload has no MaxText counterpart"):
        remat_keys("offload")


# MaxText's compiled step as libtpu 0.0.52 prints it: its splash attention kernels declare no
# cost estimate, and their kernel_metadata holds a newline that splits the instruction
MAXTEXT_HLO = """\
HloModule jit_train_step, is_scheduled=true

ENTRY %main.1 (p0: bf16[2,32,8192,128], p1: bf16[8,8192,128]) -> bf16[32,128,4096] {
  %q = bf16[2,32,8192,128]{3,2,1,0} parameter(0)
  %k = bf16[8,8192,128]{2,1,0} parameter(1)
  %splash_mha_fwd_segmented_residuals.3 = (bf16[2,32,8192,128]{3,2,1,0}, f32[32,8192,128]{2,1,0}) \
custom-call(%q, %k, %k), custom_call_target="tpu_custom_call", operand_layout_constraints=\
{s8[1,16,16]{2,1,0}, bf16[2,32,8192,128]{3,2,1,0}, bf16[8,8192,128]{2,1,0}, \
bf16[8,8192,128]{2,1,0}}, frontend_attributes={kernel_metadata={
"xprof_metadata":"{\\"block_q\\": 512}"
}}, backend_config={"custom_call_config":{"body":"TUxJUg","needs_layout_passes":true}}
  %splash_mha_dkv_no_residuals.1 = (bf16[8,8192,128]{2,1,0}) custom-call(%q, %k), \
custom_call_target="tpu_custom_call", operand_layout_constraints={bf16[2,32,8192,128]{3,2,1,0}, \
bf16[8,8192,128]{2,1,0}}, frontend_attributes={kernel_metadata={
"xprof_metadata":"{}"
}}, backend_config={"custom_call_config":{"body":"TUxJUg"}}
  ROOT %all-gather.8 = bf16[32,128,4096]{2,1,0} all-gather(%k), channel_id=14, \
replica_groups=mesh['axis_0'=4] {'axis_0'}, dimensions={2}
}
"""


def test_splash_kernels_without_a_cost_count_dense_attention_across_split_lines():
    scores = 2 * 32 * 8192 * 8192 * 128  # batch 2 x 32 heads, 8192 x 8192 scores, dim 128
    every, once = count_matmul_flops(MAXTEXT_HLO)
    assert every == once == 2.0 * (2 + 4) * scores  # forward 2 matmuls, dkv 4
    assert count_collectives(MAXTEXT_HLO)["all-gather"]["count"] == 1  # after the split lines


def test_libtpu_0_0_52_out_of_memory_message_is_read():
    message = ("RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: Ran out of memory on HBM, the "
               "total memory required for HLO temporaries (314.75G) exceeds available HBM "
               "(95.73G). HLO module: IrToHlo.4058.")
    refusal = parse_out_of_memory(message, 2.0)
    assert (refusal.program_bytes, refusal.usable_bytes) == (int(314.75 * GiB), int(95.73 * GiB))


def test_step_model_counts_compute_hbm_and_ring_collectives():
    topo = parse("v5p-128")  # 459 TFLOP/s, 2765 GB/s HBM, 600 GB/s ICI per direction
    model = project(459e12, 2765e9 / 2, {"all-gather": {"count": 3, "bytes": 300e9},
                                         "all-reduce": {"count": 1, "bytes": 150e9}}, topo)
    assert model.compute_s == pytest.approx(1.0)
    assert model.memory_s == pytest.approx(0.5)
    assert model.communication_s == pytest.approx((300e9 + 2 * 150e9) / 600e9)  # 1.0
    assert model.overlapped_s == pytest.approx(1.0)
    assert model.exposed_s == pytest.approx(2.0)
    assert model.mfu(229.5e12, topo.peak_bf16_flops_per_chip) == pytest.approx(
        {"overlapped": 0.5, "exposed": 0.25})
    assert model.record()["label"] == LABEL == "a model, not a measurement"


def test_step_model_puts_what_crosses_slices_on_the_data_center_network():
    topo = parse("2xv5p-128")  # DCN 50 Gbps = 6.25 GB/s per chip; ring over 2 slices
    dcn = {"all-reduce": {"count": 2, "bytes": 6.25e9}, "all-gather": {"count": 1, "bytes": 1e9}}
    model = project(459e12, 0.0, {}, topo, dcn)
    assert model.dcn_s == pytest.approx((2 * 1 / 2 * 6.25e9 + 1 * 1e9) / 6.25e9)  # 1.16
    assert model.overlapped_s == pytest.approx(model.dcn_s)
    assert model.exposed_s == pytest.approx(1.0 + model.dcn_s)
    with pytest.raises(UserError, match="no DCN bandwidth is published for v4"):
        project(1.0, 0.0, {}, parse("2xv4-32"), dcn)


def compiled(matmul_flops: float, collectives: dict) -> CompiledStep:
    return CompiledStep(argument_bytes=2 * GiB, output_bytes=GiB, alias_bytes=GiB,
                        temp_bytes=3 * GiB, code_bytes=GiB // 4, flops=matmul_flops * 1.1,
                        matmul_flops=matmul_flops, bytes_accessed=1e11, optimal_seconds=None,
                        collectives=collectives, compile_seconds=12.0)


@pytest.fixture(scope="module")
def comparison():
    analytic = make_plan(resolve_run("llama-tiny", ["tpu=v5p-8"]), 0.5)
    sides = {"zoo": compiled(2e13, {"all-gather": {"count": 40, "bytes": 8 * GiB},
                                    "all-reduce": {"count": 2, "bytes": GiB}}),
             "maxtext": compiled(1e13, {"all-gather": {"count": 20, "bytes": 4 * GiB},
                                        "reduce-scatter": {"count": 5, "bytes": GiB}})}
    versions = {"compiler": {"libtpu": "0.0.52", "jax": "0.12.0.1", "jaxlib": "0.12.0.1",
                             "maxtext": "0.2.5", "platform": "TFRT TPU v5"},
                "zoo_trace": {"torch": "2.9.0", "torch_xla": "2.9.0", "jax": "0.7.1",
                              "libtpu": "0.0.20"}}
    return Comparison(analytic, sides, ["decoder_block=llama2"], versions, "flash", 3.0)


def test_record_holds_both_sides_with_the_projected_step(comparison):
    record = comparison.record()
    assert record["zoo"]["fits"] and record["maxtext"]["fits"]
    assert record["zoo"]["hbm"]["total"] == comparison.compiled["zoo"].total_bytes
    assert record["zoo"]["collectives"]["all-gather"]["count"] == 40
    projected = record["maxtext"]["projected_step"]
    assert projected["label"] == LABEL
    assert projected["compute_s"] == pytest.approx(1e13 / 459e12)
    assert 0 < projected["mfu"]["exposed"] <= projected["mfu"]["overlapped"]


def test_table_has_every_row_with_ratios_and_dashes_where_a_side_has_none(comparison):
    rows = {row[0]: row[1:] for row in table_rows(comparison.record())}
    assert rows["fits"] == ("yes", "yes", "-")
    assert rows["HBM total"] == ("5.25 GiB", "5.25 GiB", "1.00")
    assert rows["all-gather count"] == ("40", "20", "2.00")
    assert rows["all-reduce count"] == ("2", "0", "-")  # MaxText has none: no ratio
    assert rows["reduce-scatter bytes"] == ("0 KiB", "1.00 GiB", "0.00")
    assert rows["matmul FLOPs (every loop trip)"][2] == "2.00"
    assert rows["compile"] == ("12.0 s", "12.0 s", "1.00")
    for label in ("projected step, ICI overlapped", "projected step, ICI exposed",
                  "projected MFU, ICI overlapped", "projected MFU, ICI exposed"):
        assert label in rows


def test_a_refused_side_shows_what_the_compiler_needed(comparison):
    refused = OutOfMemory(program_bytes=120 * GiB, usable_bytes=95 * GiB,
                          largest=["14.00G bf16[32,16384,14336] (scan)"], compile_seconds=30.0)
    record = Comparison(comparison.analytic, {**comparison.compiled, "zoo": refused},
                        comparison.maxtext_keys, comparison.versions, "flash", 3.0).record()
    rows = {row[0]: row[1:] for row in table_rows(record)}
    assert rows["fits"][0] == "no: refused, needs >= 120.00 GiB"
    assert rows["HBM total"][0] == "-" and rows["projected step, ICI exposed"][0] == "-"
    assert rows["compile"][0] == "30.0 s"


def test_console_names_the_one_compiler_and_says_the_step_is_a_model(comparison):
    text = describe(comparison.record())
    assert "both compiled by libtpu 0.0.52 (jax 0.12.0.1" in text
    assert "MaxText settings: decoder_block=llama2" in text
    assert "a model, not a measurement" in text
    assert "all-reduce 2x" in text and "600 GB/s per chip and direction" in text


@pytest.mark.parametrize("args,message", [
    (["llama-tiny", "--tpu", "v5p-8", "--compare", "maxtext"],
     "--compare maxtext compares compiled programs: add --compile"),
    (["t5-tiny", "--tpu", "v5p-8", "--compile", "--compare", "maxtext"],
     "MaxText has no counterpart of the t5 family"),
])
def test_cli_refuses_in_one_line(args, message):
    result = CliRunner().invoke(cli, ["plan", *args])
    assert result.exit_code != 0
    assert result.output.strip().splitlines() == [f"Error: {result.output.split(': ', 1)[1]}"
                                                  .strip()]
    assert message in result.output
