"""Registry entry for the Llama family."""

from pathlib import Path

from core.flops import decoder_lm_forward_flops_per_token
from core.lm import LMTrainConfig, LMTrainer
from zoo.llama.config import SIZES, LlamaConfig
from zoo.llama.hf import config_from_hf, load_hf
from zoo.llama.model import LlamaForCausalLM
from zoo.registry import ModelFamily


def build(config: LlamaConfig, init: bool = True, seed: int = 0) -> LlamaForCausalLM:
    model = LlamaForCausalLM(config)
    if init:
        model.init_weights(seed)
    return model


def forward_flops_per_token(config: LlamaConfig, seq_len: int, causal: bool = True) -> float:
    return decoder_lm_forward_flops_per_token(
        layers=config.num_hidden_layers,
        hidden=config.hidden_size,
        heads=config.num_attention_heads,
        kv_heads=config.num_key_value_heads,
        head_dim=config.dim_per_head,
        intermediate=config.intermediate_size,
        vocab=config.vocab_size,
        seq_len=seq_len,
        causal=causal,
    )


FAMILY = ModelFamily(
    name="llama",
    config_cls=LlamaConfig,
    sizes=SIZES,
    build=build,
    train_config_cls=LMTrainConfig,
    trainer_cls=LMTrainer,
    presets_dir=Path(__file__).parent,
    forward_flops_per_token=forward_flops_per_token,
    load_hf=load_hf,
    config_from_hf=config_from_hf,
)
