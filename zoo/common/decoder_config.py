"""The decoder configuration every decoder family subclasses: the fields, their checks and
the Hugging Face conversion pieces that Llama-style decoders share. A family adds its
defaults, sizes and `to_hf`/`from_hf`."""

from __future__ import annotations

import dataclasses

from core.config import check_sizes
from zoo.common.architecture import run_time


@dataclasses.dataclass
class RopeScaling:
    """Llama 3.1 frequency-dependent RoPE scaling (HF rope_type "llama3")."""

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclasses.dataclass
class DecoderConfig:
    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 4
    num_attention_heads: int = 8
    num_key_value_heads: int = 4
    head_dim: int | None = None  # default hidden_size // num_attention_heads
    rms_norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    rope_scaling: RopeScaling | None = None
    max_position_embeddings: int = 8192
    tie_word_embeddings: bool = False
    initializer_range: float = run_time(0.02)  # a random start's; a checkpoint brings its own
    # How the model runs, not what its weights are (zoo/common/architecture.py): a run
    # started from a checkpoint (`--init-from`) takes these from the user, the rest from it.
    # "auto": Pallas flash attention on TPU, plain softmax attention elsewhere or when the
    # sequence is split over devices (the kernel splits batch and heads only), decided when
    # the run is built (family.for_slice); a model built from "auto" directly runs plain.
    attention: str = run_time("auto")
    # Positions per sequence whose logits the training loss holds at once: a longer
    # sequence's loss runs in chunks, each recomputed in backward. 0 (default): never chunk.
    # Off because it did not pay where measured: llama-8b on v5p-128 at 128 x 8192 went from
    # 19.4 to 26.1 GiB per chip (each chunk all-reduces a whole LM-head gradient).
    loss_chunk_tokens: int = run_time(0)
    # the tokenizer's (the LM tasks fill them from it), not the weights'
    bos_token_id: int | None = run_time(None)
    eos_token_id: int | None = run_time(None)
    pad_token_id: int | None = run_time(None)

    def __post_init__(self):
        check_sizes(self, counts=("vocab_size", "hidden_size", "intermediate_size",
                                  "num_hidden_layers", "num_attention_heads",
                                  "num_key_value_heads", "head_dim", "max_position_embeddings"),
                    positive=("rms_norm_eps", "rope_theta"))
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"model.num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"model.num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.loss_chunk_tokens < 0:
            raise ValueError(f"model.loss_chunk_tokens must be >= 0, not {self.loss_chunk_tokens}")
        if self.attention not in ("auto", "plain", "flash"):
            raise ValueError(f"model.attention must be auto, plain or flash, not {self.attention}")

    def mesh_divides(self) -> dict[str, dict[str, int]]:
        """Mesh axis -> the sizes it splits under this family's presets, which it must divide."""
        return {"tensor": {"model.num_attention_heads": self.num_attention_heads,
                           "model.num_key_value_heads": self.num_key_value_heads,
                           "model.intermediate_size": self.intermediate_size}}

    def uses_flash(self, on_tpu: bool, sequence_split: bool = False) -> bool:
        """Whether attention runs the Pallas flash kernel (`auto`: on a TPU, unless the
        sequence is split over devices)."""
        return self.attention == "flash" or (
            self.attention == "auto" and on_tpu and not sequence_split)

    @property
    def dim_per_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads


# The config.json keys a decoder's weights' shapes are read from, which transformers would
# otherwise fill with its own defaults (a family adds its own: core.hf.read_config).
HF_REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
               "num_attention_heads")
# Fields with the same name and meaning in transformers' LlamaConfig (and the configs copied
# from it); the rest are converted.
HF_SAME_NAMES = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                 "num_attention_heads", "rms_norm_eps", "max_position_embeddings",
                 "bos_token_id", "pad_token_id")


def eos_from_hf(hf) -> int | None:
    """The end-of-sequence id of a transformers config (the first, where it lists several)."""
    return hf.eos_token_id[0] if isinstance(hf.eos_token_id, list) else hf.eos_token_id


def qwen3_fields_from_hf(hf) -> dict:
    """What Qwen3's transformers configs (dense and MoE: two families, one lineage) hold under
    other names or forms; the sliding window (which no released Qwen3 turns on) and scaled
    rope types (YaRN, for contexts past 32k) are refused."""
    if getattr(hf, "use_sliding_window", False):
        raise ValueError("use_sliding_window=true is not supported (no released Qwen3 uses it)")
    rope = dict(getattr(hf, "rope_parameters", None) or {})
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"unsupported rope type {rope['rope_type']!r}: default only "
                         "(remove rope_scaling from config.json for contexts up to 32k)")
    return {"head_dim": hf.head_dim,
            "rope_theta": float(rope.get("rope_theta", getattr(hf, "rope_theta", 1e6))),
            "tie_word_embeddings": bool(hf.tie_word_embeddings), "eos_token_id": eos_from_hf(hf)}
