"""Tests that run XLA worker processes over several virtual CPU devices or compile with the
TPU compiler: sharding, checkpoints, conformance, the families' parity and presets."""
