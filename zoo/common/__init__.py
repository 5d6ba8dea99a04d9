"""The layers every decoder family builds from (norms, rotary embeddings, attention, MLPs,
the decoder stack, the mixture-of-experts block and its router), their configs, Hugging Face
expert names, and the decoder's FLOP and memory formulas. Families import this and core,
never another family."""
