"""DeepSeek-V3: multi-head latent attention and DeepSeekMoE (shared plus routed experts,
grouped sigmoid routing with a balancing bias) after a few dense layers."""
