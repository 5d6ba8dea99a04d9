"""Per-device memory estimates for planning, before anything is allocated.

Parameters, gradients and optimizer state come from the exact sharding plan. Activations of
a decoder layer follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models"): s*b*h*(34 + 5*a*s/h) bytes per layer in 16-bit, tensor parallelism
dividing all but the 10*s*b*h kept replicated (no sequence parallelism). An estimate: XLA's
fusion and scheduling change the real peak.
"""

from __future__ import annotations

from core.decoder_shape import DecoderShape


def decoder_layer_activation_bytes(
    *,
    seq: int,
    batch: int,
    hidden: int,
    heads: int,
    tensor: int = 1,
    bytes_per_value: int = 2,
    flash: bool = False,
) -> float:
    """Activations one decoder layer keeps for backward, per device. Flash attention keeps
    no seq x seq score matrices (the 5*a*s^2*b term)."""
    sbh = seq * batch * hidden
    sharded = 24 * sbh + (0 if flash else 5 * heads * seq * seq * batch)
    return (10 * sbh + sharded / tensor) * bytes_per_value / 2


def decoder_stack_activation_bytes(
    shape: DecoderShape,
    *,
    seq: int,
    batch: int,
    tensor: int,
    remat: str | None,
    bytes_per_value: int,
    flash: bool,
    logit_positions: int | None = None,
) -> dict[str, float]:
    """{'activations': ..., 'logits': ...} for a decoder LM whose layers are recomputed in
    backward under remat policy `remat` (core/remat.py; None: no remat, every layer keeps
    all it needs); the loss holds the logits of `logit_positions` positions per sequence at
    once (default: all)."""
    layer = decoder_layer_activation_bytes(seq=seq, batch=batch, hidden=shape.hidden,
                                           heads=shape.heads, tensor=tensor,
                                           bytes_per_value=bytes_per_value, flash=flash)
    if remat:  # keep what the policy saves of each layer; recompute one layer at a time
        saved = _saved_per_token(shape, remat, tensor)
        stack = shape.layers * seq * batch * saved * bytes_per_value + layer
    else:
        stack = shape.layers * layer
    # the logits and their gradient in the compute dtype (the compiler fuses the fp32 loss
    # into reading them: llama-8b's compiled bf16 step holds 2 x 3.9 GiB, not 2 x 7.8),
    # vocab split over tensor
    positions = min(seq, logit_positions or seq)
    logits = 2 * positions * batch * shape.vocab * bytes_per_value / tensor
    return {"activations": stack, "logits": logits}


def _saved_per_token(shape: DecoderShape, policy: str, tensor: int) -> float:
    """Values per token a rematerialised layer keeps on the device for backward: its input
    (none under `offload`: host memory holds it), and what the policy names."""
    qkv = (shape.heads + 2 * shape.kv) * shape.dim_per_head / tensor
    mlp = (2 if shape.gated_mlp else 1) * shape.mlp_width * shape.experts_per_token / tensor
    return {"full": shape.hidden, "offload": 0, "save_qkv_proj": shape.hidden + qkv,
            # the weight matmul outputs backward reads: q, k, v and the MLP's inputs to its
            # activation (o_proj's and down_proj's outputs only feed residual adds)
            "minimal": shape.hidden + qkv + mlp}[policy]
