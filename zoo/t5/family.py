"""Registry entry for the T5 family."""

from pathlib import Path

from core.memory import decoder_layer_activation_bytes
from core.task import RunConfig
from zoo.registry import ModelFamily
from zoo.t5.config import SIZES, T5Config
from zoo.t5.generation import t5_layout
from zoo.t5.hf import config_from_hf, load_hf
from zoo.t5.model import T5ForConditionalGeneration
from zoo.tasks.seq2seq import SEQ2SEQ


def forward_flops(run: RunConfig, causal: bool = True) -> float:
    """Forward matmul FLOPs per target token (the trainer's item), at the run's source and
    target lengths: encoder over the source, decoder self-attention over the target (causal
    halves its score matrix unless `causal=False`), cross-attention target x source, and
    the LM head."""
    c, src, tgt = run.model, run.source_len, run.target_len
    inner = c.num_heads * c.d_kv
    projections = 4 * c.d_model * inner  # q, k, v, o per token
    ffn = 3 * c.d_model * c.d_ff  # wi_0, wi_1, wo per token
    encoder_layer = src * (projections + ffn) + 2 * src * src * inner  # + scores, values
    self_attention = 2 * tgt * tgt * inner / (2 if causal else 1)
    cross_attention = 2 * c.d_model * inner * (tgt + src) + 2 * tgt * src * inner
    decoder_layer = tgt * (projections + ffn) + self_attention + cross_attention
    head = tgt * c.d_model * c.vocab_size
    macs = c.num_layers * encoder_layer + c.num_decoder_layers * decoder_layer + head
    return 2.0 * macs / tgt


def activation_bytes(run: RunConfig, batch_per_device: int, tensor: int, remat: str | None,
                     bytes_per_value: int, on_tpu: bool) -> dict[str, float]:
    """core/memory.py's transformer-layer estimate for every encoder block (over the source)
    and decoder block (over the target; cross-attention counted like self-attention over
    the longer side), fp32 logits; with remat each block keeps only its input."""
    c = run.model

    def layer(seq: int) -> float:
        return decoder_layer_activation_bytes(
            seq=seq, batch=batch_per_device, hidden=c.d_model, heads=c.num_heads,
            tensor=tensor, bytes_per_value=bytes_per_value)

    blocks = [(run.source_len, c.num_layers), (max(run.source_len, run.target_len),
                                               c.num_decoder_layers)]
    if remat:
        stack = sum(n * seq * batch_per_device * c.d_model * bytes_per_value for seq, n in blocks)
        stack += max(layer(seq) for seq, _ in blocks)
    else:
        stack = sum(n * layer(seq) for seq, n in blocks)
    logits = 2 * run.target_len * batch_per_device * c.vocab_size * 4 / tensor
    return {"activations": stack, "logits": logits}


FAMILY = ModelFamily(
    name="t5",
    config_cls=T5Config,
    sizes=SIZES,
    model_cls=T5ForConditionalGeneration,
    task=SEQ2SEQ,
    presets_dir=Path(__file__).parent,
    layer_classes=("T5Block",),
    layer_stacks=("encoder.block", "decoder.block"),
    without_presets=("remat/scan_minimal", "remat/scan_offload", "remat/scan_save_qkv_proj"),
    forward_flops=forward_flops,
    activation_bytes=activation_bytes,
    hf_class="T5ForConditionalGeneration",
    hf_config=T5Config.to_hf,
    config_from_hf=config_from_hf,
    load_hf=load_hf,
    cache_layout=t5_layout,
)
