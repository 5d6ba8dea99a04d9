"""DeepSeek-V3 configuration: the routed-expert fields (zoo/common/moe_config.py:
dispatch, capacity, expert parallelism) plus multi-head latent attention, shared experts,
grouped sigmoid routing and the first dense layers; convertible to and from Hugging Face
`DeepseekV3Config`, whose names differ where noted."""

from __future__ import annotations

import dataclasses
import math

from core.config import check_sizes, same_named
from zoo.common.architecture import run_time
from zoo.common.decoder_config import eos_from_hf
from zoo.common.moe_config import MoeConfig

# transformers' name -> ours, where they differ
HF_RENAMED = {"n_routed_experts": "num_local_experts", "moe_intermediate_size": "intermediate_size",
              "intermediate_size": "dense_intermediate_size"}


@dataclasses.dataclass
class DeepseekV3Config(MoeConfig):
    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 64  # per routed expert (transformers' moe_intermediate_size)
    dense_intermediate_size: int = 512  # the first dense layers' MLP
    num_hidden_layers: int = 3
    num_attention_heads: int = 4
    num_key_value_heads: int = 4  # MLA: one latent for all heads; equal to the heads
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    num_local_experts: int = 8
    num_experts_per_tok: int = 2
    n_shared_experts: int = 1  # their width: n_shared_experts x intermediate_size
    first_k_dense_replace: int = 1  # layers before the first routed one
    n_group: int = 2  # experts are chosen within the best topk_group of n_group groups
    topk_group: int = 1
    routed_scaling_factor: float = 2.5
    # DeepSeek-V3 balances by the routing bias, not a loss (transformers has none either):
    # after each update every routed layer's bias moves by bias_update_rate toward an even
    # load (the paper's gamma; 0 holds the bias, as MaxText's default does)
    router_aux_loss_coef: float = 0.0
    bias_update_rate: float = run_time(0.001)
    q_lora_rank: int = 32  # 0: queries projected directly (the lite shape)
    kv_lora_rank: int = 32
    qk_nope_head_dim: int = 32
    qk_rope_head_dim: int = 16
    v_head_dim: int = 32
    rope_interleave: bool = True  # DeepSeek's checkpoints pair rotary dims (0,1), (2,3), ...
    # YaRN (rope_factor 1: none): positions scaled past original_max_position_embeddings
    rope_factor: float = 1.0
    rope_original_max_position_embeddings: int = 4096
    rope_beta_fast: float = 32.0
    rope_beta_slow: float = 1.0
    rope_mscale: float = 1.0
    rope_mscale_all_dim: float = 0.0

    def __post_init__(self):
        if self.head_dim not in (None, self.qk_rope_head_dim):
            raise ValueError(f"model.head_dim is model.qk_rope_head_dim ({self.qk_rope_head_dim}) "
                             "for deepseek3: set that instead")
        self.head_dim = self.qk_rope_head_dim  # the rotary part's width, as transformers'
        super().__post_init__()
        check_sizes(self, counts=("dense_intermediate_size", "n_shared_experts", "n_group",
                                  "topk_group", "kv_lora_rank", "qk_nope_head_dim",
                                  "qk_rope_head_dim", "v_head_dim"),
                    positive=("routed_scaling_factor", "rope_factor"))
        if self.bias_update_rate < 0:
            raise ValueError(f"model.bias_update_rate ({self.bias_update_rate}) must be 0 "
                             "(the routing bias held) or positive")
        if self.num_key_value_heads != self.num_attention_heads:
            raise ValueError("model.num_key_value_heads must equal model.num_attention_heads "
                             "(multi-head latent attention)")
        if self.num_local_experts % self.n_group or self.topk_group > self.n_group:
            raise ValueError(f"model.n_group ({self.n_group}) must divide model.num_local_experts "
                             f"({self.num_local_experts}) and be at least model.topk_group "
                             f"({self.topk_group})")
        if not 0 <= self.first_k_dense_replace <= self.num_hidden_layers:
            raise ValueError("model.first_k_dense_replace must be between 0 and "
                             "model.num_hidden_layers")
        if self.attention == "flash":
            raise ValueError("model.attention=flash is not available for deepseek3 (its keys "
                             "and values differ in width); use plain or auto")

    def uses_flash(self, on_tpu: bool, sequence_split: bool = False) -> bool:
        return False

    @property
    def softmax_mscale(self) -> float:
        """YaRN's factor on the attention scores (mscale_all_dim's, squared), 1 without."""
        if self.rope_factor <= 1 or not self.rope_mscale_all_dim:
            return 1.0
        return (0.1 * self.rope_mscale_all_dim * math.log(self.rope_factor) + 1.0) ** 2

    def rope_parameters(self) -> dict:
        if self.rope_factor == 1.0:
            return {"rope_type": "default", "rope_theta": self.rope_theta}
        return {"rope_type": "yarn", "rope_theta": self.rope_theta, "factor": self.rope_factor,
                "original_max_position_embeddings": self.rope_original_max_position_embeddings,
                "beta_fast": self.rope_beta_fast, "beta_slow": self.rope_beta_slow,
                "mscale": self.rope_mscale, "mscale_all_dim": self.rope_mscale_all_dim}

    def to_hf(self):
        from transformers import DeepseekV3Config as HFDeepseekV3Config  # transformers

        return HFDeepseekV3Config(
            **same_named(self, HF_SAME_NAMES),
            **{theirs: getattr(self, ours) for theirs, ours in HF_RENAMED.items()},
            q_lora_rank=self.q_lora_rank or None,
            rope_parameters=self.rope_parameters(),
            tie_word_embeddings=self.tie_word_embeddings,
            initializer_range=self.initializer_range,
            eos_token_id=self.eos_token_id,
        )

    @classmethod
    def from_hf(cls, hf) -> DeepseekV3Config:
        rope = dict(getattr(hf, "rope_parameters", None) or {})
        kind = rope.get("rope_type", "default")
        if kind not in ("default", "yarn"):
            raise ValueError(f"unsupported rope type {kind!r}: default or yarn")
        yarn = {}
        if kind == "yarn":
            yarn = {"rope_factor": float(rope["factor"]),
                    "rope_original_max_position_embeddings":
                        int(rope["original_max_position_embeddings"]),
                    "rope_beta_fast": float(rope.get("beta_fast", 32.0)),
                    "rope_beta_slow": float(rope.get("beta_slow", 1.0)),
                    "rope_mscale": float(rope.get("mscale") or 1.0),
                    "rope_mscale_all_dim": float(rope.get("mscale_all_dim") or 0.0)}
        return cls(**same_named(hf, HF_SAME_NAMES),
                   **{ours: getattr(hf, theirs) for theirs, ours in HF_RENAMED.items()},
                   q_lora_rank=hf.q_lora_rank or 0,
                   rope_theta=float(rope.get("rope_theta", 10000.0)), **yarn,
                   tie_word_embeddings=bool(hf.tie_word_embeddings), eos_token_id=eos_from_hf(hf))


HF_SAME_NAMES = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "rms_norm_eps", "max_position_embeddings",
                 "bos_token_id", "pad_token_id", "num_experts_per_tok", "norm_topk_prob",
                 "n_shared_experts", "first_k_dense_replace", "n_group", "topk_group",
                 "routed_scaling_factor", "kv_lora_rank", "qk_nope_head_dim",
                 "qk_rope_head_dim", "v_head_dim", "rope_interleave")


def _yarn_deepseek(**shape) -> DeepseekV3Config:
    """A released DeepSeek shape: 128 heads of 128 + 64 rotary dims, latents of 512, YaRN
    x40 past 4k, 163k positions."""
    return DeepseekV3Config(
        **shape, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, kv_lora_rank=512,
        rope_factor=40.0, rope_original_max_position_embeddings=4096, rope_mscale=1.0,
        rope_mscale_all_dim=1.0, max_position_embeddings=163840, tie_word_embeddings=False,
        bos_token_id=0, eos_token_id=1)


SIZES: dict[str, DeepseekV3Config] = {
    "tiny": DeepseekV3Config(),
    # DeepSeek-V2-Lite's shape (15.7 B, 2.4 B active) with V3's routing: sigmoid scores, one
    # group, the routing bias
    "lite": _yarn_deepseek(
        vocab_size=102400, hidden_size=2048, dense_intermediate_size=10944,
        intermediate_size=1408, num_hidden_layers=27, num_attention_heads=16,
        num_key_value_heads=16, num_local_experts=64, num_experts_per_tok=6,
        n_shared_experts=2, first_k_dense_replace=1, n_group=1, topk_group=1,
        routed_scaling_factor=1.0, q_lora_rank=0),
    "671b": _yarn_deepseek(  # DeepSeek-V3 / R1
        vocab_size=129280, hidden_size=7168, dense_intermediate_size=18432,
        intermediate_size=2048, num_hidden_layers=61, num_attention_heads=128,
        num_key_value_heads=128, num_local_experts=256, num_experts_per_tok=8,
        n_shared_experts=1, first_k_dense_replace=3, n_group=8, topk_group=4,
        routed_scaling_factor=2.5, q_lora_rank=1536),
}
