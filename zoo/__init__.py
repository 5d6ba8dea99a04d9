"""zoo: reference models (llama, t5, vit) on the shared core runtime, and the `zoo` CLI."""
