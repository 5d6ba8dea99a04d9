"""Gemma 3 (text) configuration: the decoder's fields (zoo/common/decoder_config.py) plus
what Gemma 3 adds (local layers' window and rotary base, the global layers' linear rope
factor, the query scale), its published shapes; convertible to and from Hugging Face
`Gemma3TextConfig`."""

from __future__ import annotations

import dataclasses

from core.config import check_sizes, same_named
from zoo.common.decoder_config import HF_SAME_NAMES as DECODER_SAME_NAMES
from zoo.common.decoder_config import DecoderConfig, eos_from_hf

LOCAL, GLOBAL = "sliding_attention", "full_attention"  # transformers' layer types


@dataclasses.dataclass
class Gemma3Config(DecoderConfig):
    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 512
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int | None = 64
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1e6  # the global layers' base
    # the global layers' positions divided by this (transformers' rope type "linear")
    rope_linear_factor: float = 1.0
    rope_local_theta: float = 1e4  # the local layers' base
    sliding_window: int = 8  # each local layer's query sees its last `sliding_window` keys
    # every `sliding_window_pattern`-th layer is global, the others local (5 : 1 released)
    sliding_window_pattern: int = 2
    # scores scale by query_pre_attn_scalar**-0.5 (head_dim**-0.5 in Llama); 27b: 168
    query_pre_attn_scalar: int = 48
    tie_word_embeddings: bool = True

    def __post_init__(self):
        super().__post_init__()
        check_sizes(self, counts=("sliding_window", "sliding_window_pattern",
                                  "query_pre_attn_scalar"),
                    positive=("rope_local_theta", "rope_linear_factor"))
        if self.attention == "flash":
            raise ValueError("model.attention=flash is not available for gemma3 (torch_xla's "
                             "flash kernel has no sliding window); use plain or auto")

    def uses_flash(self, on_tpu: bool, sequence_split: bool = False) -> bool:
        """Never: torch_xla's flash kernel has no window (`auto` is the masked product)."""
        return False

    @property
    def layer_types(self) -> list[str]:
        """Each layer's attention, as transformers names it."""
        return [GLOBAL if (i + 1) % self.sliding_window_pattern == 0 else LOCAL
                for i in range(self.num_hidden_layers)]

    def to_hf(self):
        """The equivalent `transformers.Gemma3TextConfig`."""
        from transformers import Gemma3TextConfig  # transformers

        full = {"rope_type": "default", "rope_theta": self.rope_theta}
        if self.rope_linear_factor != 1.0:
            full = {**full, "rope_type": "linear", "factor": self.rope_linear_factor}
        return Gemma3TextConfig(
            **same_named(self, HF_SAME_NAMES),
            head_dim=self.dim_per_head,
            layer_types=self.layer_types,
            rope_parameters={GLOBAL: full, LOCAL: {"rope_type": "default",
                                                   "rope_theta": self.rope_local_theta}},
            tie_word_embeddings=self.tie_word_embeddings,
            initializer_range=self.initializer_range,
            eos_token_id=self.eos_token_id,
            hidden_activation="gelu_pytorch_tanh",
        )

    @classmethod
    def from_hf(cls, hf) -> Gemma3Config:
        """From a `transformers.Gemma3TextConfig`. What no released Gemma 3 text model uses
        is refused in one line: logit soft-capping (Gemma 2's), bidirectional attention, an
        activation other than tanh-approximated GELU, layers that do not repeat one
        pattern, scaled rope on local layers or a type other than linear on global ones."""
        for name in ("final_logit_softcapping", "attn_logit_softcapping"):
            if getattr(hf, name, None) is not None:
                raise ValueError(f"{name} is not supported (Gemma 2's; no Gemma 3 uses it)")
        if getattr(hf, "use_bidirectional_attention", False):
            raise ValueError("use_bidirectional_attention=true is not supported (a causal LM)")
        if hf.hidden_activation != "gelu_pytorch_tanh":
            raise ValueError(f"hidden_activation {hf.hidden_activation!r} is not supported: "
                             "gelu_pytorch_tanh")
        layer_types = list(hf.layer_types)
        pattern = layer_types.index(GLOBAL) + 1 if GLOBAL in layer_types else len(layer_types) + 1
        config = cls(**same_named(hf, HF_SAME_NAMES), head_dim=hf.head_dim,
                     sliding_window_pattern=pattern, **_rope_fields(hf.rope_parameters),
                     tie_word_embeddings=bool(hf.tie_word_embeddings),
                     eos_token_id=eos_from_hf(hf))
        if config.layer_types != layer_types:
            raise ValueError("layer_types must repeat one pattern (local layers, then a global "
                             f"one), as released Gemma 3 models do; got {layer_types}")
        return config


def _rope_fields(rope: dict) -> dict:
    full, local = rope[GLOBAL], rope[LOCAL]
    if local.get("rope_type", "default") != "default":
        raise ValueError(f"unsupported rope type {local['rope_type']!r} on local layers: default")
    if full.get("rope_type", "default") not in ("default", "linear"):
        raise ValueError(f"unsupported rope type {full['rope_type']!r} on global layers: "
                         "default or linear")
    return {"rope_theta": float(full["rope_theta"]),
            "rope_linear_factor": float(full.get("factor", 1.0)),
            "rope_local_theta": float(local["rope_theta"])}


HF_SAME_NAMES = (*DECODER_SAME_NAMES, "num_key_value_heads", "sliding_window",
                 "query_pre_attn_scalar")


def _gemma3(vocab, hidden, intermediate, layers, heads, kv_heads, head_dim, window, positions,
            rope_factor, query_scalar=256) -> Gemma3Config:
    """A released Gemma 3 text shape (google/gemma-3-*-pt): 5 local layers to 1 global,
    local base 10k, global 1M; end of turn <end_of_turn> (106) as EOS."""
    return Gemma3Config(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        head_dim=head_dim, sliding_window=window, sliding_window_pattern=6,
        rope_linear_factor=rope_factor, query_pre_attn_scalar=query_scalar,
        max_position_embeddings=positions, bos_token_id=2, eos_token_id=106, pad_token_id=0)


# 1b is a text-only checkpoint (262144 tokens); 4b-27b are the language models of the
# image-text checkpoints, whose table has 64 image tokens more
SIZES: dict[str, Gemma3Config] = {
    "tiny": Gemma3Config(),
    "1b": _gemma3(262144, 1152, 6912, 26, 4, 1, 256, 512, 32768, rope_factor=1.0),
    "4b": _gemma3(262208, 2560, 10240, 34, 8, 4, 256, 1024, 131072, rope_factor=8.0),
    "12b": _gemma3(262208, 3840, 15360, 48, 16, 8, 256, 1024, 131072, rope_factor=8.0),
    "27b": _gemma3(262208, 5376, 21504, 62, 32, 16, 128, 1024, 131072, rope_factor=8.0,
                   query_scalar=168),
}
