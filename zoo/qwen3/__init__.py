"""Qwen3 (dense): Llama's decoder with queries and keys normalised per head."""
