"""Qwen3-MoE: zoo/common's routed experts under QK-norm attention (Qwen3's)."""
