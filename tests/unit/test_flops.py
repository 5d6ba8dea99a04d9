"""Analytic FLOPs against torch's FlopCounterMode on tiny llama configs.

FlopCounterMode counts every matmul the forward runs (mm/bmm/addmm): the weight matmuls, the
LM head, and the full (unmasked) S x S attention score and value products that our plain
attention computes. The analytic count with causal=False counts the same things, so they
must agree; causal=True halves the attention terms (MaxText's convention).
"""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from zoo.app.run import resolve_run
from zoo.common.decoder_costs import forward_flops
from zoo.llama.config import LlamaConfig
from zoo.llama.family import FAMILY

CONFIGS = {
    "mha": LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=160,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4),
    "gqa_tied": LlamaConfig(vocab_size=512, hidden_size=96, intermediate_size=256,
                            num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=2,
                            tie_word_embeddings=True),
    "long_seq": LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1),
}


def forward_flops_per_token(config: LlamaConfig, seq: int, causal: bool) -> float:
    run = resolve_run("llama-tiny", [f"seq_len={seq}"]).config
    run.model = config
    return forward_flops(run, causal=causal)


def counted_forward_flops(config: LlamaConfig, batch: int, seq: int) -> int:
    model = FAMILY.build(config, seed=0)
    ids = torch.zeros(batch, seq, dtype=torch.long)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(ids)
    return counter.get_total_flops()


@pytest.mark.parametrize("seq", [32, 256])
@pytest.mark.parametrize("name", CONFIGS)
def test_analytic_forward_flops_match_flop_counter(name, seq):
    config, batch = CONFIGS[name], 2
    analytic = forward_flops_per_token(config, seq, causal=False) * batch * seq
    counted = counted_forward_flops(config, batch, seq)
    assert analytic == pytest.approx(counted, rel=0.02)


def test_causal_convention_halves_only_attention():
    config, seq = CONFIGS["mha"], 256
    full = forward_flops_per_token(config, seq, causal=False)
    causal = forward_flops_per_token(config, seq, causal=True)
    attention = 2 * config.num_hidden_layers * 2 * seq * config.hidden_size
    assert full - causal == pytest.approx(attention / 2)


def test_llama_8b_training_flops_per_token_are_about_6n():
    """Sanity against the 6 x parameters rule of thumb (short sequence: attention small)."""
    config = FAMILY.sizes["8b"]
    params = 8.03e9 - config.vocab_size * config.hidden_size  # the input embedding is no matmul
    flops = 3 * forward_flops_per_token(config, 128, causal=True)
    assert flops == pytest.approx(6 * params, rel=0.02)


@pytest.mark.parametrize("model", ["deepseek3-tiny", "t5-tiny"])
def test_a_scanned_stack_counts_its_leading_layers(model):
    """What `zoo plan --compile` counts as executed (benchmarks/plan/tpu_step.py) for a
    stack whose first layers differ (DeepSeek's dense layer, T5's block 0) and run before
    the scan: scanned without remat, the same matmuls as unrolled."""
    from benchmarks.plan.tpu_step import executed_flops_per_step

    def executed(remat: str) -> float:
        run = resolve_run(model, [f"remat={remat}"])
        return executed_flops_per_step(run, run.config, flash=False)

    assert executed("scan") == executed("none")
