"""Gemma 3 (text): Llama's decoder with GeGLU, (1 + weight) norms around attention and MLP,
QK-norm, scaled embeddings and interleaved sliding-window and global layers."""
