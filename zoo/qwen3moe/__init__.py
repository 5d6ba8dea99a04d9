"""Qwen3-MoE: mixtral's routed experts (zoo/mixtral) under qwen3's attention (zoo/qwen3)."""
