"""zoo: reference models (llama, t5, vit) on the shared core runtime: registry, train, plan."""
