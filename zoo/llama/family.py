"""Registry entry for the Llama family."""

import dataclasses
from pathlib import Path
from typing import TypeVar

from core.decoder_shape import DecoderShape
from core.errors import UserError
from core.flops import decoder_lm_forward_flops_per_token
from core.memory import decoder_stack_activation_bytes
from core.mesh import MeshConfig
from core.task import RunConfig
from core.topology import Topology
from zoo.llama.config import SIZES, LlamaConfig
from zoo.llama.hf import config_from_hf, load_hf
from zoo.llama.model import LlamaForCausalLM
from zoo.registry import ModelFamily
from zoo.tasks.causal_lm import CAUSAL_LM

# LlamaConfig or a subclass (Mixtral's): for_slice returns what it is given
LlamaLike = TypeVar("LlamaLike", bound=LlamaConfig)


def decoder_shape(config: LlamaConfig) -> DecoderShape:
    return DecoderShape(layers=config.num_hidden_layers, hidden=config.hidden_size,
                        heads=config.num_attention_heads, vocab=config.vocab_size,
                        kv_heads=config.num_key_value_heads, head_dim=config.dim_per_head,
                        intermediate=config.intermediate_size)


def forward_flops(run: RunConfig, causal: bool = True) -> float:
    """Forward matmul FLOPs per token at the run's sequence length."""
    return decoder_lm_forward_flops_per_token(decoder_shape(run.model), run.seq_len, causal)


def activation_bytes(run: RunConfig, batch_per_device: int, tensor: int, remat: str | None,
                     bytes_per_value: int, on_tpu: bool) -> dict[str, float]:
    return decoder_stack_activation_bytes(
        decoder_shape(run.model), seq=run.seq_len, batch=batch_per_device, tensor=tensor,
        remat=remat, bytes_per_value=bytes_per_value,
        flash=run.model.uses_flash(on_tpu, run.mesh.sequence != 1),
        logit_positions=run.model.loss_chunk_tokens)


def for_slice(config: LlamaLike, topo: Topology, mesh: MeshConfig) -> LlamaLike:
    """`attention=auto` made concrete for the hardware and mesh: flash on a TPU, plain
    elsewhere. torch_xla's flash kernel splits batch and heads only: with the sequence split
    over devices it would gather every query and compute all of attention on each device."""
    sequence_split = mesh.sequence != 1
    if config.attention == "flash" and sequence_split:
        raise UserError(f"model.attention=flash cannot split sequences (mesh.sequence="
                        f"{mesh.sequence}); use model.attention=plain or auto")
    return dataclasses.replace(
        config, attention="flash" if config.uses_flash(topo.is_tpu, sequence_split)
        else "plain")


FAMILY = ModelFamily(
    name="llama",
    config_cls=LlamaConfig,
    sizes=SIZES,
    model_cls=LlamaForCausalLM,
    task=CAUSAL_LM,
    presets_dir=Path(__file__).parent,
    layer_classes=("LlamaDecoderLayer",),
    layer_stacks=("model.layers",),
    shared_sharding="dense_decoder",
    forward_flops=forward_flops,
    activation_bytes=activation_bytes,
    hf_class="LlamaForCausalLM",
    hf_config=LlamaConfig.to_hf,
    config_from_hf=config_from_hf,
    load_hf=load_hf,
    for_slice=for_slice,
)
